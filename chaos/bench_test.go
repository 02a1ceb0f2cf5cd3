package chaos

import (
	"fmt"
	"testing"
)

// BenchmarkEvaluate measures one look of the settle phase at the size of a
// ten-minute run (about 2,100 activities, 10,500 POSTs, 2,400 inbound
// activities), which the run repeats every settleInterval: it must stay far
// below that interval.
func BenchmarkEvaluate(b *testing.B) {
	const (
		creates = 2100
		inbound = 2400
		base    = "http://127.0.0.1:9"
	)
	hosts := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"}
	w := newWorld("db", hosts[4])
	local := base + "/users/local0"
	for i, h := range hosts {
		w.addFollow(follow{id: fmt.Sprintf("http://%s/follows/%d", h, i), host: h, local: local})
	}
	s := &snapshot{
		dead: map[string]deadRow{}, inbox: map[string]inboxRow{}, objects: map[string]int{},
		likes: map[string]int{}, likesOf: map[string]int{}, ledger: map[string]string{},
	}
	var posts []post
	for i := range creates {
		a := fmt.Sprintf("%s/activities/%d", base, i)
		o := fmt.Sprintf("%s/objects/%d", base, i)
		s.activities = append(s.activities, activityRow{uri: a, typ: "Create", actor: local, object: o})
		for _, h := range hosts[:4] {
			posts = append(posts, post{activityID: a, typ: "Create", objectID: o, host: h})
		}
		ev := fmt.Sprintf("e%d", i)
		s.targets = append(s.targets, targetRow{eventID: ev, activity: a, host: hosts[4]})
		s.dead[ev] = deadRow{eventID: ev, typ: "delivery.post", reason: "delivery: host unavailable"}
	}
	var items []inboundActivity
	for i := range inbound {
		id := fmt.Sprintf("http://127.0.0.1:1/activities/%d", i)
		note := fmt.Sprintf("http://127.0.0.1:1/notes/%d", i)
		items = append(items, inboundActivity{id: id, typ: "Create", objectID: note, acked: true})
		s.inbox[id] = inboxRow{eventID: "i" + id, imported: true}
		s.objects[note] = 1
		s.ledger["i"+id] = "done"
	}
	b.ReportAllocs()
	for b.Loop() {
		o := evaluate(w, s, posts, writeStats{}, items, 0)
		if o.report.PairsLost != 0 || o.report.ImportedOnce != inbound {
			b.Fatalf("lost %d, imported once %d", o.report.PairsLost, o.report.ImportedOnce)
		}
	}
	// The share of the settle phase's interval one look takes.
	b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(settleInterval), "interval_share")
}
