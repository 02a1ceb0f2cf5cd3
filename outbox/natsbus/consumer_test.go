package natsbus

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// A handler that always fails is delivered exactly max_deliver times on the
// backoff schedule; then the max-deliveries advisory is counted and recorded
// and the error line is logged.
func TestAlwaysFailingExhaustsMaxDeliver(t *testing.T) {
	t.Parallel()
	testAlwaysFailingExhaustsMaxDeliver(t, newBroker)
}

func testAlwaysFailingExhaustsMaxDeliver(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	db := newDB(t)
	logs := &logBuffer{}
	const maxDeliver = 4
	backoff := func(n int) time.Duration { return time.Duration(n) * 150 * time.Millisecond }

	var mu sync.Mutex
	var at []time.Time
	var attempts []int
	reg := outbox.NewRegistry()
	reg.Handle("delivery.post", "always-fails", func(ctx context.Context, ev outbox.Event) error {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		attempts = append(attempts, outbox.Attempt(ctx))
		return errAlways
	})
	runner := newRunner(t, db, reg, maxDeliver, 30*time.Second, nil)
	prom := prometheus.NewRegistry()
	cfg := fastConfig(br.url(), db, runner, logs)
	cfg.Backoff = backoff
	cfg.Registerer = prom
	bus := mustNew(t, cfg)
	if bus.cfg.MaxAttempts != maxDeliver {
		t.Fatalf("MaxAttempts %d not taken from the runner", bus.cfg.MaxAttempts)
	}
	runBus(t, bus, (*Bus).Run)
	waitReady(t, bus)
	ev := enqueue(t, db, testEvents(1, "delivery.post")...)[0]

	waitFor(t, 20*time.Second, "exhausted event recorded", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM jetstream_exhausted WHERE event_id = ? AND reason = 'max_deliveries'`, ev.ID) == 1
	})
	time.Sleep(3 * backoff(maxDeliver)) // a further delivery would show up by now
	mu.Lock()
	got := append([]time.Time(nil), at...)
	gotAttempts := append([]int(nil), attempts...)
	mu.Unlock()
	if len(got) != maxDeliver {
		t.Fatalf("delivered %d times, want exactly %d", len(got), maxDeliver)
	}
	for i := range gotAttempts {
		if gotAttempts[i] != i+1 {
			t.Errorf("delivery %d saw attempt %d", i+1, gotAttempts[i])
		}
	}
	for i := 1; i < len(got); i++ {
		gap, want := got[i].Sub(got[i-1]), backoff(i)
		// The floor is the backoff; above it a loaded machine may add
		// seconds, so the ceiling only catches a backoff far too long.
		if gap < want-10*time.Millisecond || gap > want+30*time.Second {
			t.Errorf("gap before delivery %d = %s, want about %s", i+1, gap, want)
		}
	}
	if v := testutil.ToFloat64(bus.metrics.maxDeliveries); v != 1 {
		t.Errorf("courier_jetstream_max_deliveries_total = %v, want 1", v)
	}
	recs := logs.records("event exhausted max deliveries")
	if len(recs) != 1 || recs[0]["level"] != "ERROR" || recs[0]["event_id"] != ev.ID {
		t.Errorf("want one error line with event_id %s, got %v", ev.ID, recs)
	}
	list, err := ListExhausted(context.Background(), db.Read, ExhaustedFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].EventID != ev.ID || list[0].EventType != "delivery.post" ||
		list[0].Deliveries != maxDeliver || list[0].StreamSeq != 1 || list[0].Reason != "max_deliveries" {
		t.Errorf("ListExhausted = %+v", list)
	}
	// The outbox row was relayed (done) and never dead-lettered by the relay.
	if n := count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`); n != 1 {
		t.Errorf("outbox row not done after relay: %d", n)
	}
}

// A permanent failure terminates the message after one delivery and records
// it as dead through the terminated advisory.
func TestPermanentFailureTerminates(t *testing.T) {
	t.Parallel()
	testPermanentFailureTerminates(t, newBroker)
}

func testPermanentFailureTerminates(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	db := newDB(t)
	var calls atomic.Int32
	reg := outbox.NewRegistry()
	reg.Handle("delivery.post", "gone", func(ctx context.Context, ev outbox.Event) error {
		calls.Add(1)
		return outbox.Permanent(errors.New("410 gone"))
	})
	runner := newRunner(t, db, reg, 5, 30*time.Second, nil)
	prom := prometheus.NewRegistry()
	cfg := fastConfig(br.url(), db, runner, nil)
	cfg.Registerer = prom
	bus := mustNew(t, cfg)
	runBus(t, bus, (*Bus).Run)
	waitReady(t, bus)
	ev := enqueue(t, db, testEvents(1, "delivery.post")...)[0]
	waitFor(t, 20*time.Second, "terminated event recorded", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM jetstream_exhausted WHERE event_id = ? AND reason = 'terminated'`, ev.ID) == 1
	})
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
	list, err := ListExhausted(context.Background(), db.Read, ExhaustedFilter{EventID: ev.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Deliveries != 1 {
		t.Fatalf("record %+v: want one delivery", list)
	}
	// Servers before 2.10.4 take no terminate reason (the log has it).
	nc, _ := br.js(t)
	if serverAtLeast(nc.ConnectedServerVersion(), 2, 10, 4) && !strings.Contains(list[0].Detail, "410 gone") {
		t.Errorf("record detail %q: want the terminate reason", list[0].Detail)
	}
	if v := testutil.ToFloat64(bus.metrics.terminated); v != 1 {
		t.Errorf("courier_jetstream_terminated_total = %v, want 1", v)
	}
}

// An exhausted event replayed through the admin function is republished
// under a new Nats-Msg-Id; the ledger skips the handler that had already
// succeeded, and the fixed one runs.
func TestReplayExhausted(t *testing.T) {
	t.Parallel()
	testReplayExhausted(t, newBroker)
}

func testReplayExhausted(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	db := newDB(t)
	_, js := br.js(t)
	var fixed atomic.Bool
	var flaky, steady atomic.Int32
	reg := outbox.NewRegistry()
	reg.Handle("delivery.post", "steady", func(ctx context.Context, ev outbox.Event) error {
		steady.Add(1)
		return nil
	})
	reg.Handle("delivery.post", "flaky", func(ctx context.Context, ev outbox.Event) error {
		flaky.Add(1)
		if !fixed.Load() {
			return errAlways
		}
		return nil
	})
	runner := newRunner(t, db, reg, 2, 30*time.Second, nil)
	cfg := fastConfig(br.url(), db, runner, nil)
	cfg.Backoff = func(int) time.Duration { return 50 * time.Millisecond }
	bus := mustNew(t, cfg)
	runBus(t, bus, (*Bus).Run)
	waitReady(t, bus)
	ev := enqueue(t, db, testEvents(1, "delivery.post")...)[0]
	waitFor(t, 20*time.Second, "exhausted event recorded", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM jetstream_exhausted WHERE event_id = ?`, ev.ID) == 1
	})
	if s, f := steady.Load(), flaky.Load(); s != 1 || f != 2 {
		t.Fatalf("before replay: steady ran %d times, flaky %d; want 1 and 2", s, f)
	}
	if _, err := ReplayEvent(context.Background(), db.Write, "no-such-event", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Errorf("replay of an unknown event: %v, want ErrNotFound", err)
	}
	fixed.Store(true)
	id, err := ReplayEvent(context.Background(), db.Write, ev.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "replayed event handled", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM processed_events WHERE event_id = ? AND status = 'done'`, ev.ID) == 2
	})
	if s, f := steady.Load(), flaky.Load(); s != 1 || f != 3 {
		t.Errorf("after replay: steady ran %d times, flaky %d; want 1 and 3", s, f)
	}
	// A second replay is published (new id) and skipped by the ledger.
	if err := Replay(context.Background(), db.Write, id, time.Now()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "second replay performed", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM jetstream_exhausted WHERE id = ? AND replays = 2 AND replay_requested_at IS NULL`, id) == 1
	})
	waitFor(t, 10*time.Second, "second replay in the stream", func() bool { return streamMsgs(t, js, DefaultStream) == 3 })
	time.Sleep(300 * time.Millisecond)
	if s, f := steady.Load(), flaky.Load(); s != 1 || f != 3 {
		t.Errorf("after second replay: steady ran %d times, flaky %d; want 1 and 3", s, f)
	}
}

// A long handler that signals progress is not redelivered while it runs,
// although it runs for several ack_wait periods.
func TestProgressKeepsMessage(t *testing.T) {
	t.Parallel()
	testProgressKeepsMessage(t, newBroker)
}

func testProgressKeepsMessage(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	db := newDB(t)
	var runs atomic.Int32
	var held atomic.Int32
	reg := outbox.NewRegistry()
	reg.Handle("slow", "busy", func(ctx context.Context, ev outbox.Event) error {
		runs.Add(1)
		deadline := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(deadline) {
			outbox.Progress(ctx)
			time.Sleep(25 * time.Millisecond)
		}
		return nil
	})
	obs := &outbox.Observer{LedgerClaimed: func(h, result string) {
		if result == outbox.ClaimHeldElsewhere {
			held.Add(1)
		}
	}}
	runner := newRunner(t, db, reg, 10, 5*time.Second, obs)
	cfg := fastConfig(br.url(), db, runner, nil)
	cfg.AckWait = 500 * time.Millisecond
	bus := mustNew(t, cfg)
	runBus(t, bus, (*Bus).Run)
	waitReady(t, bus)
	ev := enqueue(t, db, testEvents(1, "slow")...)[0]
	waitFor(t, 20*time.Second, "slow event done", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM processed_events WHERE event_id = ? AND status = 'done'`, ev.ID) == 1
	})
	time.Sleep(600 * time.Millisecond)
	if n := held.Load(); n != 0 {
		t.Errorf("the message was redelivered %d times while its handler reported progress", n)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times", n)
	}
}

// Two workers (two connections to the database, two Runners, two Buses)
// share one consumer; ack_wait is shorter than the handler, so messages are
// redelivered to the other worker while they run. The ledger never lets the
// same (event_id, handler) run twice at once.
func TestTwoWorkersNeverOverlap(t *testing.T) {
	t.Parallel()
	testTwoWorkersNeverOverlap(t, newBroker)
}

func testTwoWorkersNeverOverlap(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	loc := storetest.Location(t)
	dbA, dbB := openDB(t, loc), openDB(t, loc)

	var mu sync.Mutex
	running := map[string]int{}
	runs := map[string]int{}
	overlap := 0
	handler := func(name string) outbox.Handler {
		return func(ctx context.Context, ev outbox.Event) error {
			key := ev.ID + "/" + name
			mu.Lock()
			running[key]++
			runs[key]++
			if running[key] > 1 {
				overlap++
			}
			mu.Unlock()
			time.Sleep(400 * time.Millisecond)
			mu.Lock()
			running[key]--
			mu.Unlock()
			return nil
		}
	}
	var held atomic.Int32
	obs := &outbox.Observer{LedgerClaimed: func(h, result string) {
		if result == outbox.ClaimHeldElsewhere {
			held.Add(1)
		}
	}}
	newWorker := func(db *sqldb.DB) *Bus {
		reg := outbox.NewRegistry()
		reg.Handle("delivery.post", "a", handler("a"))
		reg.Handle("delivery.post", "b", handler("b"))
		runner := newRunner(t, db, reg, 30, 2*time.Second, obs)
		cfg := fastConfig(br.url(), db, runner, nil)
		cfg.AckWait = 150 * time.Millisecond
		cfg.Concurrency = 4
		return mustNew(t, cfg)
	}
	wa, wb := newWorker(dbA), newWorker(dbB)
	runBus(t, wa, (*Bus).Run)
	runBus(t, wb, (*Bus).Run)
	waitReady(t, wa)
	waitReady(t, wb)
	const n = 12
	enqueue(t, dbA, testEvents(n, "delivery.post")...)
	waitFor(t, 60*time.Second, "every handler done", func() bool {
		return count(t, dbA.Write, `SELECT COUNT(*) FROM processed_events WHERE status = 'done'`) == 2*n
	})
	mu.Lock()
	defer mu.Unlock()
	if overlap != 0 {
		t.Errorf("%d runs overlapped another run of the same (event_id, handler)", overlap)
	}
	for key, r := range runs {
		if r != 1 {
			t.Errorf("%s ran %d times", key, r)
		}
	}
	if held.Load() == 0 {
		t.Error("no delivery met a claim held elsewhere: the test did not exercise concurrent deliveries")
	}
	if len(runs) != 2*n {
		t.Errorf("%d (event, handler) pairs ran, want %d", len(runs), 2*n)
	}
}

// Core mode: plain publish and queue subscribe; rows are marked done after
// the publish and the handlers run once.
func TestCoreMode(t *testing.T) {
	t.Parallel()
	testCoreMode(t, newBroker)
}

func testCoreMode(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	db := newDB(t)
	var mu sync.Mutex
	seen := map[string]int{}
	reg := outbox.NewRegistry()
	reg.Handle("t", "h", func(ctx context.Context, ev outbox.Event) error {
		mu.Lock()
		defer mu.Unlock()
		seen[ev.ID]++
		return nil
	})
	runner := newRunner(t, db, reg, 5, 30*time.Second, nil)
	cfg := fastConfig(br.url(), db, runner, nil)
	cfg.Mode = ModeCore
	bus := mustNew(t, cfg)
	runBus(t, bus, (*Bus).Run)
	waitReady(t, bus)
	evs := enqueue(t, db, testEvents(40, "t")...)
	waitFor(t, 20*time.Second, "core events handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == len(evs)
	})
	waitFor(t, 10*time.Second, "rows done", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == len(evs)
	})
	mu.Lock()
	defer mu.Unlock()
	for _, ev := range evs {
		if seen[ev.ID] != 1 {
			t.Errorf("event %s handled %d times", ev.ID, seen[ev.ID])
		}
	}
	_, js := br.js(t)
	if _, err := js.Stream(context.Background(), DefaultStream); err == nil {
		t.Error("core mode created a JetStream stream")
	}
}

// A deferral (a parked host) hands the event back to the outbox instead of a
// nak with delay, so an event deferred far more often than max_deliver is
// never exhausted; failures keep counting across hand-backs, and
// ReleaseTarget makes a handed-back event due at once.
func TestDeferralsHandBackWithoutSpendingDeliveries(t *testing.T) {
	t.Parallel()
	br := newBroker(t)
	db := newDB(t)
	const maxAttempts = 3
	var (
		mu       sync.Mutex
		attempts []int
		release  atomic.Bool
	)
	reg := outbox.NewRegistry()
	reg.Handle("delivery.post", "park", func(ctx context.Context, ev outbox.Event) error {
		mu.Lock()
		attempts = append(attempts, outbox.Attempt(ctx))
		n := len(attempts)
		mu.Unlock()
		switch {
		case n == 3: // one failure between deferrals: it is counted
			return errors.New("503")
		case n < 8:
			return outbox.Defer(time.Now().Add(50*time.Millisecond), "host parked")
		case !release.Load():
			return outbox.Defer(time.Now().Add(time.Hour), "host parked")
		}
		return nil
	})
	runner := newRunner(t, db, reg, maxAttempts, 30*time.Second, nil)
	cfg := fastConfig(br.url(), db, runner, nil)
	cfg.Backoff = func(int) time.Duration { return 50 * time.Millisecond }
	bus := mustNew(t, cfg)
	runBus(t, bus, (*Bus).Run)
	waitReady(t, bus)
	ev := outbox.Event{ID: "2f0c6f0e-9a43-4c8e-8b1e-5d7c3a9e6b21", Type: "delivery.post", Target: "parked.example"}
	enqueue(t, db, ev)
	q := outbox.NewQueue(db.Write, outbox.QueueOptions{})
	defer func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("attempts seen: %v", attempts)
			mu.Unlock()
			rows, _ := q.List(context.Background(), outbox.Filter{EventID: ev.ID})
			t.Logf("row: %+v", rows)
		}
	}()
	waitFor(t, 20*time.Second, "eight runs, the last parked for an hour", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) >= 8 && count(t, db.Write,
			`SELECT COUNT(*) FROM event_queue WHERE event_id = ? AND status = 'pending' AND next_attempt_at > ?`,
			ev.ID, time.Now().Add(30*time.Minute).UnixMilli()) == 1
	})
	row, err := q.List(context.Background(), outbox.Filter{EventID: ev.ID})
	if err != nil || len(row) != 1 {
		t.Fatalf("row: %v %v", row, err)
	}
	if row[0].Attempts != 1 || row[0].Republished < 7 {
		t.Errorf("parked row: attempts %d, republished %d; want 1 failure kept and a hand-back per deferral",
			row[0].Attempts, row[0].Republished)
	}
	release.Store(true)
	if n, err := q.ReleaseTarget(context.Background(), "parked.example"); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	waitFor(t, 20*time.Second, "the released event handled", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE event_id = ? AND status = 'done'`, ev.ID) == 1 &&
			count(t, db.Write, `SELECT COUNT(*) FROM processed_events WHERE event_id = ? AND status = 'done'`, ev.ID) == 1
	})
	if n := count(t, db.Write, `SELECT COUNT(*) FROM jetstream_exhausted`); n != 0 {
		t.Errorf("%d exhausted records, want none: deferrals spend no deliveries", n)
	}
	mu.Lock()
	defer mu.Unlock()
	// Attempt numbers: 1 and 2 deferred, 3 failed, then every later run is
	// the event's second attempt (one failure spent) until it succeeds.
	want := []int{1, 1, 1, 2, 2, 2, 2, 2, 2}
	if len(attempts) < len(want) || !slices.Equal(attempts[:3], want[:3]) || attempts[len(attempts)-1] != 2 {
		t.Errorf("attempt numbers seen %v, want them to start %v and stay at 2 after the failure", attempts, want[:3])
	}
}
