package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/outbox/natsbus"
)

// startJetStream runs an embedded JetStream server on 127.0.0.1 until the
// test ends and returns its URL.
func startJetStream(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats server not ready in 10s")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}

// Messages the JetStream consumer gave up on are listed, shown with their
// event, and replayed through the API; the worker republishes them and the
// fixed handler runs.
func TestJetStreamExhaustedListAndReplay(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	b := setup(t, func(b *bundle, c *admin.Config) {
		c.JetStream = admin.NewJetStream(b.db.Read, b.db.Write, b.clock.Now)
	})
	var fixed atomic.Bool
	var calls atomic.Int32
	reg := outbox.NewRegistry()
	reg.Handle("delivery.post", "post", func(context.Context, outbox.Event) error {
		calls.Add(1)
		if fixed.Load() {
			return nil
		}
		return outbox.Permanent(errors.New("remote answered 403"))
	})
	runner, err := outbox.NewRunner(outbox.RunnerConfig{DB: b.db.Write, Registry: reg, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	bus, err := natsbus.New(natsbus.Config{
		URL: url, DB: b.db.Write, Runner: runner,
		PollInterval: 20 * time.Millisecond, PauseMin: 50 * time.Millisecond, PauseMax: 400 * time.Millisecond,
		PublishTimeout: 2 * time.Second, ReconnectWait: 50 * time.Millisecond, ReplayPoll: 50 * time.Millisecond,
		ShutdownGrace: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bus.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("bus: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("bus did not stop in 30s")
		}
	})
	waitFor(t, "bus ready", func() bool { return bus.Ready() == nil })

	evs := b.enqueue(events(2, "delivery.post", "e.example")...)
	var l admin.ExhaustedList
	waitFor(t, "two exhausted records", func() bool {
		l = admin.ExhaustedList{}
		b.call("GET", "/admin/jetstream/exhausted", http.StatusOK, &l)
		return len(l.Exhausted) == 2
	})
	// Newest first.
	if l.Exhausted[0].ID <= l.Exhausted[1].ID || l.NextCursor != "" {
		t.Errorf("order or cursor: %+v", l)
	}
	byEvent := map[string]admin.Exhausted{}
	for _, e := range l.Exhausted {
		byEvent[e.EventID] = e
		if e.Reason != "terminated" || e.EventType != "delivery.post" || e.Deliveries != 1 || e.StreamSeq == 0 ||
			e.RecordedAt.IsZero() {
			t.Errorf("record %+v", e)
		}
	}
	first, ok := byEvent[evs[0].ID]
	if !ok {
		t.Fatalf("no record of %s in %+v", evs[0].ID, l.Exhausted)
	}
	// Paging.
	var p1, p2 admin.ExhaustedList
	b.call("GET", "/admin/jetstream/exhausted?limit=1", http.StatusOK, &p1)
	b.call("GET", "/admin/jetstream/exhausted?limit=1&cursor="+p1.NextCursor, http.StatusOK, &p2)
	if len(p1.Exhausted) != 1 || p1.NextCursor == "" || len(p2.Exhausted) != 1 || p2.NextCursor != "" ||
		p2.Exhausted[0].ID == p1.Exhausted[0].ID {
		t.Errorf("pages %+v / %+v", p1, p2)
	}
	var filtered admin.ExhaustedList
	b.call("GET", "/admin/jetstream/exhausted?reason=terminated&event_id="+evs[1].ID, http.StatusOK, &filtered)
	if len(filtered.Exhausted) != 1 || filtered.Exhausted[0].EventID != evs[1].ID {
		t.Errorf("filtered %+v", filtered)
	}
	// The event's detail carries its record.
	var d admin.EventDetail
	b.call("GET", "/admin/events/"+evs[0].ID, http.StatusOK, &d)
	if len(d.Exhausted) != 1 || d.Exhausted[0].ID != first.ID {
		t.Errorf("detail exhausted %+v, want record %d", d.Exhausted, first.ID)
	}

	fixed.Store(true)
	var res admin.ActionResult
	b.call("POST", "/admin/jetstream/exhausted/"+strconv.FormatInt(first.ID, 10)+"/replay", http.StatusAccepted, &res)
	if res.RecordID != first.ID || res.Action != "replay" {
		t.Errorf("replay answered %+v", res)
	}
	ledgerDone := func(id string) bool {
		var d admin.EventDetail
		b.call("GET", "/admin/events/"+id, http.StatusOK, &d)
		return len(d.Ledger) == 1 && d.Ledger[0].Status == outbox.LedgerDone
	}
	waitFor(t, "replayed event handled", func() bool { return ledgerDone(evs[0].ID) })
	// The other event, by its event id.
	b.call("POST", "/admin/events/"+evs[1].ID+"/replay", http.StatusAccepted, &res)
	if res.EventID != evs[1].ID || res.RecordID == 0 {
		t.Errorf("replay by event answered %+v", res)
	}
	waitFor(t, "second replayed event handled", func() bool { return ledgerDone(evs[1].ID) })
	if n := calls.Load(); n != 4 {
		t.Errorf("handler ran %d times, want 4 (one failure and one replay each)", n)
	}
	waitFor(t, "replays recorded", func() bool {
		var l admin.ExhaustedList
		b.call("GET", "/admin/jetstream/exhausted?event_id="+evs[0].ID, http.StatusOK, &l)
		return len(l.Exhausted) == 1 && l.Exhausted[0].Replays == 1 && !l.Exhausted[0].ReplayedAt.IsZero()
	})
	if recs := b.logs.records("admin: jetstream replay requested"); len(recs) != 2 {
		t.Errorf("replay logs %v", recs)
	}

	// The CLI shows the same.
	code, out, errOut := b.cli("exhausted")
	if code != 0 || !strings.Contains(out, "RECORD") || !strings.Contains(out, evs[0].ID) ||
		!strings.Contains(out, "terminated") {
		t.Errorf("cli exhausted: %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = b.cli("exhausted", "--json", "--limit", "1")
	var cl admin.ExhaustedList
	if code != 0 || json.Unmarshal([]byte(out), &cl) != nil || len(cl.Exhausted) != 1 || cl.NextCursor == "" {
		t.Errorf("cli exhausted --json: %d %s", code, out)
	}
	code, out, _ = b.cli("exhausted", "replay", strconv.FormatInt(first.ID, 10))
	if code != 0 || !strings.Contains(out, "replay record "+strconv.FormatInt(first.ID, 10)) {
		t.Errorf("cli replay: %d %s", code, out)
	}

	b.wantError("POST", "/admin/jetstream/exhausted/987654/replay", "", http.StatusNotFound, "no exhausted-message record")
	b.wantError("POST", "/admin/jetstream/exhausted/x/replay", "", http.StatusBadRequest, "want the id")
	b.wantError("POST", "/admin/events/6f0d9a3c-4f1e-5b8a-9c61-2d7e0b4a8f15/replay", "", http.StatusNotFound,
		"no exhausted JetStream message")
	b.wantError("POST", "/admin/events/12/replay", "", http.StatusBadRequest, "want an event UUID")
	b.wantError("GET", "/admin/jetstream/exhausted?reason=tired", "", http.StatusBadRequest, "reason")
	b.wantError("GET", "/admin/jetstream/exhausted?event_id=nope", "", http.StatusBadRequest, "not a UUID")
	b.wantError("GET", "/admin/jetstream/exhausted?cursor=0", "", http.StatusBadRequest, "cursor")
	b.wantError("GET", "/admin/jetstream/exhausted?limit=5000", "", http.StatusBadRequest, "limit")
}
