package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// testDeadline is the time a test may wait for what it expects: its
// deadline less a margin, or a minute.
func testDeadline(t *testing.T) time.Time {
	if dl, ok := t.Deadline(); ok {
		return dl.Add(-5 * time.Second)
	}
	return time.Now().Add(time.Minute)
}

// metricValue is the value of the series of name with collection, 0 when
// it has none.
func metricValue(t *testing.T, reg prometheus.Gatherer, name, collection string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "collection" && l.GetValue() == collection {
					if m.Gauge != nil {
						return m.Gauge.GetValue()
					}
					return m.Counter.GetValue()
				}
			}
		}
	}
	return 0
}

// outboxEvent reads the next event of s: its id and the activity it
// reports (the Add's object, or the Update's or Delete's own id).
func outboxEvent(t *testing.T, s *sse) (int64, string, string) {
	t.Helper()
	ev, err := s.next(nil)
	if err != nil {
		t.Fatalf("read the stream: %v", err)
	}
	seq, err := strconv.ParseInt(ev.id, 10, 64)
	if err != nil {
		t.Fatalf("event id %q: %v", ev.id, err)
	}
	var data struct {
		Type   string          `json:"type"`
		ID     string          `json:"id"`
		Target string          `json:"target"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.Unmarshal([]byte(ev.data), &data); err != nil {
		t.Fatalf("event %s: %v: %s", ev.id, err, ev.data)
	}
	if data.Type != "Add" {
		return seq, data.Type, data.ID
	}
	var obj struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(data.Object, &obj); err != nil {
		t.Fatalf("event %s: %v: %s", ev.id, err, ev.data)
	}
	return seq, "Add:" + data.Target, obj.ID
}

// TestOutboxStream: the outbox's event stream is its owner's only; it
// delivers exactly the actor's own activities, each once, in seq order
// (Add for a new activity, Update and Delete mapped as the inbox's), the
// Accept the importer writes for the actor included; a client that
// reconnects with Last-Event-ID gets exactly what it missed; one without
// gets what is written from then on; the streams gauge and events counter
// move.
func TestOutboxStream(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{})
	m.Init(metrics.Known{})
	// Poll an hour: only wake-ups from the writes' commits move the stream.
	b := setup(t, app.Config{Metrics: m.App(), Poll: time.Hour})
	alice, aliceTok := b.actor(t, "alice", false)
	bob, bobTok := b.actor(t, "bob", false)
	streamURL := b.base + "/users/alice/outbox/stream"
	outboxURL := b.base + "/users/alice/outbox"

	for _, c := range []struct {
		url, tok string
		status   int
	}{
		{streamURL, "", http.StatusUnauthorized},
		{streamURL, "not-a-token", http.StatusUnauthorized},
		{streamURL, bobTok, http.StatusForbidden},
		{b.base + "/users/nobody/outbox/stream", aliceTok, http.StatusNotFound},
	} {
		if resp, body := get(t, c.url, c.tok); resp.StatusCode != c.status {
			t.Errorf("GET %s (token %q): %d %s, want %d", c.url, c.tok, resp.StatusCode, body, c.status)
		}
	}

	ctx, cancel := context.WithDeadline(b.ctx, testDeadline(t))
	defer cancel()
	sctx, scancel := context.WithCancel(ctx)
	s, resp := openStream(t, sctx, streamURL, aliceTok, "0")
	if s == nil {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	if got := metricValue(t, reg, "courier_app_streams", "outbox"); got != 1 {
		t.Errorf("courier_app_streams{collection=outbox} = %v with one stream open", got)
	}

	type want struct{ kind, activity string }
	var wants []want
	create, note, err := notetest.Create(ctx, b.st, alice, notetest.Input{Content: "one", To: []string{public}})
	if err != nil {
		t.Fatal(err)
	}
	wants = append(wants, want{"Add:" + outboxURL, create.URI})
	if _, _, err := notetest.Create(ctx, b.st, bob, notetest.Input{Content: "bob's", To: []string{public}}); err != nil {
		t.Fatal(err)
	}
	update, _, err := notetest.Update(ctx, b.st, alice, note.URI, notetest.Input{Content: "one, edited", To: []string{public}})
	if err != nil {
		t.Fatal(err)
	}
	wants = append(wants, want{"Update", update.URI})
	// A Follow of alice, imported: the importer writes her Accept.
	dan := b.remoteActor("dan")
	b.post(t, map[string]any{"id": b.id("follow"), "type": "Follow", "actor": dan, "object": b.base + "/users/alice"})
	b.waitItems(t, alice, 1)
	var accept string
	if err := b.db.Read.QueryRowContext(ctx, `SELECT uri FROM activities WHERE actor_id = ? AND type = 'Accept'`,
		alice.ID).Scan(&accept); err != nil {
		t.Fatalf("alice's Accept: %v", err)
	}
	wants = append(wants, want{"Add:" + outboxURL, accept})

	var last int64
	read := func(s *sse, ws []want) {
		t.Helper()
		for _, w := range ws {
			seq, kind, act := outboxEvent(t, s)
			if seq != last+1 || kind != w.kind || act != w.activity {
				t.Fatalf("event %d %s %s, want %d %s %s", seq, kind, act, last+1, w.kind, w.activity)
			}
			last = seq
		}
	}
	read(s, wants)
	// The stream counts an event once its write returned, which may be
	// after the client read it: wait for the count, bounded.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := metricValue(t, reg, "courier_app_stream_events_total", "outbox")
		if got == float64(len(wants)) {
			break
		}
		if got > float64(len(wants)) || time.Now().After(deadline) {
			t.Fatalf("courier_app_stream_events_total{collection=outbox} = %v, want %d", got, len(wants))
		}
	}

	// The client goes away; alice writes on; it comes back with its
	// Last-Event-ID and gets exactly what it missed.
	scancel()
	s.close()
	for metricValue(t, reg, "courier_app_streams", "outbox") != 0 {
		if time.Now().After(testDeadline(t)) {
			t.Fatal("courier_app_streams{collection=outbox} stays above 0 after the stream ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	del, err := b.st.DeleteObject(ctx, alice, note.URI)
	if err != nil {
		t.Fatal(err)
	}
	missed := []want{{"Delete", del.URI}}
	for i := range 3 {
		act, _, err := notetest.Create(ctx, b.st, alice, notetest.Input{Content: fmt.Sprint("while away ", i), To: []string{public}})
		if err != nil {
			t.Fatal(err)
		}
		missed = append(missed, want{"Add:" + outboxURL, act.URI})
	}
	s, resp = openStream(t, ctx, streamURL, aliceTok, strconv.FormatInt(last, 10))
	if s == nil {
		t.Fatalf("stream again: %d", resp.StatusCode)
	}
	read(s, missed)
	// Nothing repeated, nothing more: the next event is the next write.
	act, _, err := notetest.Create(ctx, b.st, alice, notetest.Input{Content: "after", To: []string{public}})
	if err != nil {
		t.Fatal(err)
	}
	read(s, []want{{"Add:" + outboxURL, act.URI}})
	s.close()

	// Without Last-Event-ID: only what is written from now on.
	s, resp = openStream(t, ctx, streamURL, aliceTok, "")
	if s == nil {
		t.Fatalf("stream from now: %d", resp.StatusCode)
	}
	defer s.close()
	act, _, err = notetest.Create(ctx, b.st, alice, notetest.Input{Content: "latest", To: []string{public}})
	if err != nil {
		t.Fatal(err)
	}
	read(s, []want{{"Add:" + outboxURL, act.URI}})
	if got := metricValue(t, reg, "courier_app_stream_events_total", "inbox"); got != 0 {
		t.Errorf("courier_app_stream_events_total{collection=inbox} = %v with no inbox stream", got)
	}
}

// TestOutboxSeqConcurrent: concurrent writes by one actor get gap-free,
// strictly increasing seqs, one per activity the actor wrote (the view
// holds exactly the actor's activities), and a stream open meanwhile
// sends them all in seq order.
func TestOutboxSeqConcurrent(t *testing.T) {
	b := setup(t, app.Config{})
	alice, tok := b.actor(t, "alice", false)
	bob, _ := b.actor(t, "bob", false)
	ctx, cancel := context.WithDeadline(b.ctx, testDeadline(t))
	defer cancel()
	s, resp := openStream(t, ctx, b.base+"/users/alice/outbox/stream", tok, "0")
	if s == nil {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	defer s.close()

	const writers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, 2*writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				for _, a := range []*store.Actor{alice, bob} {
					if _, _, err := notetest.Create(ctx, b.st, a, notetest.Input{Content: fmt.Sprintf("%d/%d", w, i),
						To: []string{public}}); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const n = writers * each
	for _, a := range []*store.Actor{alice, bob} {
		rows, err := b.db.Read.QueryContext(ctx, `SELECT i.seq, i.activity_uri FROM app_outbox_items i
			JOIN activities a ON a.uri = i.activity_uri AND a.actor_id = i.actor_id
			WHERE i.actor_id = ? ORDER BY i.seq`, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for rows.Next() {
			var seq int64
			var uri string
			if err := rows.Scan(&seq, &uri); err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		var items, acts, counter int64
		if err := b.db.Read.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM app_outbox_items WHERE actor_id = ?),
			(SELECT COUNT(*) FROM activities WHERE actor_id = ?),
			(SELECT seq FROM app_outbox_counters WHERE actor_id = ?)`, a.ID, a.ID, a.ID).Scan(&items, &acts, &counter); err != nil {
			t.Fatal(err)
		}
		if items != n || acts != n || counter != n || len(seqs) != n {
			t.Fatalf("%s: %d items (%d matching its activities), %d activities, counter %d; want %d", a.Name, items, len(seqs), acts, counter, n)
		}
		for i, seq := range seqs {
			if seq != int64(i+1) {
				t.Fatalf("%s: seq %d at position %d: a gap or a repeat", a.Name, seq, i)
			}
		}
	}
	for i := range n {
		seq, _, _ := outboxEvent(t, s)
		if seq != int64(i+1) {
			t.Fatalf("stream event %d has id %d", i+1, seq)
		}
	}
}
