package delivery_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// The deliveries of a fan-out to more than BulkFanout inboxes go in the
// bulk lane; those of a smaller one stay interactive.
func TestFanoutLanes(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *delivery.Config) { c.BulkFanout = 3 })
	big, small := b.actor("big"), b.actor("small")
	rm := newRemote(t, b.keys, b.clock, false)
	for i := range 5 {
		rm.follow(b, big, fmt.Sprintf("b%d", i))
	}
	for i := range 2 {
		rm.follow(b, small, fmt.Sprintf("s%d", i))
	}
	for _, a := range []string{"big", "small"} {
		act := b.note(map[string]*store.Actor{"big": big, "small": small}[a], "hi from "+a)
		if err := b.handle(b.eventOf(act)); err != nil {
			t.Fatal(err)
		}
	}
	lanes := map[string]map[int]int{}
	for _, r := range b.rows(delivery.EventPost) {
		var p delivery.Post
		if err := json.Unmarshal(r.Event.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if lanes[p.Actor] == nil {
			lanes[p.Actor] = map[int]int{}
		}
		lanes[p.Actor][r.Event.Lane]++
	}
	if got := lanes[big.URI]; got[outbox.LaneBulk] != 5 || len(got) != 1 {
		t.Errorf("big fan-out lanes %v, want 5 bulk", got)
	}
	if got := lanes[small.URI]; got[outbox.LaneInteractive] != 2 || len(got) != 1 {
		t.Errorf("small fan-out lanes %v, want 2 interactive", got)
	}
}
