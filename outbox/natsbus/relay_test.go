package natsbus

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/outbox"
)

// The same event relayed twice lands once in the stream: the second publish
// carries the same Nats-Msg-Id, the broker answers with a duplicate ack, and
// that ack still marks the row done.
func TestRelaySameEventTwiceLandsOnce(t *testing.T) {
	t.Parallel()
	testRelaySameEventTwiceLandsOnce(t, newBroker)
}

func testRelaySameEventTwiceLandsOnce(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	db := newDB(t)
	_, js := br.js(t)
	cfg := fastConfig(br.url(), db, nil, nil)
	var beats atomic.Int64
	cfg.Beat = func() { beats.Add(1) }
	bus := mustNew(t, cfg)
	stop := runBus(t, bus, (*Bus).RunRelay)
	waitReady(t, bus)
	waitFor(t, 5*time.Second, "relay beats while idle", func() bool { return beats.Load() >= 3 })

	evs := enqueue(t, db, testEvents(3, "delivery.post")...)
	waitFor(t, 10*time.Second, "rows done", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == 3
	})
	if n := streamMsgs(t, js, DefaultStream); n != 3 {
		t.Fatalf("stream holds %d messages after the first relay, want 3", n)
	}
	// A relay that crashed after publishing and before marking done runs the
	// rows again: put them back to pending.
	if _, err := db.Write.Exec(`UPDATE event_queue SET status = 'pending', claimed_at = NULL`); err != nil {
		t.Fatal(err)
	}
	bus.Notify()
	waitFor(t, 10*time.Second, "rows done again", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == 3
	})
	stop()
	if n := streamMsgs(t, js, DefaultStream); n != 3 {
		t.Fatalf("stream holds %d messages after relaying the same events twice, want 3", n)
	}
	// The stored message carries the event.
	s, err := js.Stream(context.Background(), DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Header.Get(jetstream.MsgIDHeader) != evs[0].ID || raw.Header.Get(HeaderEventID) != evs[0].ID ||
		raw.Subject != "courier.events.delivery.post" || string(raw.Data) != string(evs[0].Payload) {
		t.Errorf("stored message %s %v %s does not carry event %+v", raw.Subject, raw.Header, raw.Data, evs[0])
	}
}

// A broker stopped for longer than several pause periods mid-run and
// restarted on the same store leaves zero rows dead-lettered and every event
// handled, once per handler.
func TestBrokerOutageLosesNothing(t *testing.T) {
	t.Parallel()
	testBrokerOutageLosesNothing(t, newBroker)
}

func testBrokerOutageLosesNothing(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	db := newDB(t)
	logs := &logBuffer{}
	reg := outbox.NewRegistry()
	var mu sync.Mutex
	handled := map[string]int{}
	reg.Handle("delivery.post", "record", func(ctx context.Context, ev outbox.Event) error {
		mu.Lock()
		defer mu.Unlock()
		handled[ev.ID]++
		return nil
	})
	handledCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled)
	}
	runner := newRunner(t, db, reg, 5, 30*time.Second, nil)
	cfg := fastConfig(br.url(), db, runner, logs)
	cfg.MaxAttempts = 5
	cfg.PublishTimeout = 500 * time.Millisecond
	prom := prometheus.NewRegistry()
	cfg.Gauges = metrics.New(prom, metrics.BuildInfo{}).Relay()
	bus := mustNew(t, cfg)
	stop := runBus(t, bus, (*Bus).Run)
	waitReady(t, bus)

	const first, during, after = 50, 50, 20
	enqueue(t, db, testEvents(first, "delivery.post")...)
	waitFor(t, 20*time.Second, "first events handled", func() bool { return handledCount() == first })

	br.stop()
	waitFor(t, 10*time.Second, "bus not ready during outage", func() bool { return bus.Ready() != nil })
	enqueue(t, db, testEvents(during, "delivery.post")...)
	// Much longer than PauseMax: the relay defers the rows again and again.
	time.Sleep(2 * time.Second)
	if n := len(logs.records("nats unreachable; relay paused, rows deferred without spending an attempt")); n == 0 {
		t.Error("no pause logged during the outage")
	}
	if n := count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE attempts > 0 OR status = 'dead_lettered'`); n != 0 {
		t.Errorf("%d rows spent an attempt or were dead-lettered during the outage", n)
	}
	if v := gaugeValue(t, prom, "courier_relay_paused"); v != 1 {
		t.Errorf("courier_relay_paused = %v during the outage, want 1", v)
	}
	br.start()
	waitReady(t, bus)
	enqueue(t, db, testEvents(after, "delivery.post")...)

	total := first + during + after
	waitFor(t, 30*time.Second, "every event handled", func() bool { return handledCount() == total })
	waitFor(t, 10*time.Second, "every row done", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == total
	})
	if v := gaugeValue(t, prom, "courier_relay_paused"); v != 0 {
		t.Errorf("courier_relay_paused = %v after the outage, want 0", v)
	}
	stop()
	if n := count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'dead_lettered' OR attempts > 0`); n != 0 {
		t.Errorf("%d rows dead-lettered or spent attempts", n)
	}
	if n := count(t, db.Write, `SELECT COUNT(*) FROM processed_events WHERE status = 'done'`); n != total {
		t.Errorf("ledger holds %d done rows, want %d", n, total)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range handled {
		if n != 1 {
			t.Errorf("event %s handled %d times", id, n)
		}
	}
	if len(logs.records("nats reachable again; relay resumed")) == 0 {
		t.Error("relay did not log its resumption")
	}
}

// A stream deleted while the relay runs is set up again, and the rows that
// could not be published meanwhile are relayed without spending attempts.
func TestRelayRecreatesDeletedStream(t *testing.T) {
	t.Parallel()
	testRelayRecreatesDeletedStream(t, newBroker)
}

func testRelayRecreatesDeletedStream(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	db := newDB(t)
	_, js := br.js(t)
	bus := mustNew(t, fastConfig(br.url(), db, nil, nil))
	runBus(t, bus, (*Bus).RunRelay)
	waitReady(t, bus)
	enqueue(t, db, testEvents(2, "t")...)
	waitFor(t, 10*time.Second, "first rows done", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == 2
	})
	if err := js.DeleteStream(context.Background(), DefaultStream); err != nil {
		t.Fatal(err)
	}
	enqueue(t, db, testEvents(3, "t")...)
	waitFor(t, 20*time.Second, "later rows done", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == 5
	})
	if n := streamMsgs(t, js, DefaultStream); n != 3 {
		t.Errorf("recreated stream holds %d messages, want 3", n)
	}
	if n := count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE attempts > 0`); n != 0 {
		t.Errorf("%d rows spent attempts", n)
	}
}

// A row the stream can never take (larger than its max message size) is
// dead-lettered with the broker's error instead of holding up the relay.
func TestRelayDeadLettersUnpublishable(t *testing.T) {
	t.Parallel()
	testRelayDeadLettersUnpublishable(t, newBroker)
}

func testRelayDeadLettersUnpublishable(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	db := newDB(t)
	_, js := br.js(t)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: DefaultStream, Subjects: []string{"courier.events.>"}, MaxMsgSize: 1024, Duplicates: time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
	bus := mustNew(t, fastConfig(br.url(), db, nil, nil))
	runBus(t, bus, (*Bus).RunRelay)
	waitReady(t, bus)
	big := outbox.Event{Type: "t", Payload: json.RawMessage(`{"x":"` + strings.Repeat("y", 2000) + `"}`)}
	enqueue(t, db, big, outbox.Event{Type: "t"})
	waitFor(t, 10*time.Second, "big row dead-lettered, small row done", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'dead_lettered' AND last_error LIKE '%size%'`) == 1 &&
			count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == 1
	})
}

// gaugeValue reads a gauge without labels from a registry; -1 when absent.
func gaugeValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
