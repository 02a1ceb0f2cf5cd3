package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
)

func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	for attempt, want := range map[int]time.Duration{
		0: 5 * time.Second, 1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second,
		4: 40 * time.Second, 5: 80 * time.Second, 6: 160 * time.Second, 7: 300 * time.Second,
		8: 300 * time.Second, 10: 300 * time.Second, 1000: 300 * time.Second,
	} {
		if got := outbox.Backoff(attempt); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", attempt, got, want)
		}
	}
}

func TestEnqueueIgnoresRepeatedDeterministicID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := outbox.ChildID("9b2d9d1e-7c53-4a3e-8f43-7c1f1f0e4b11", "https://remote.example/inbox")
	for range 3 {
		b.enqueue(t, outbox.Event{ID: id, Type: "delivery", Payload: []byte(`{"n":1}`)})
	}
	rows, err := b.queue().List(context.Background(), outbox.Filter{Type: "delivery"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Event.ID != id {
		t.Fatalf("rows = %+v, want one row with id %s", rows, id)
	}
}

func TestWorkerSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var got []string
	var mu sync.Mutex
	b.reg.Handle("note", "record", func(ctx context.Context, ev outbox.Event) error {
		if outbox.Attempt(ctx) != 1 {
			t.Errorf("attempt = %d, want 1", outbox.Attempt(ctx))
		}
		mu.Lock()
		got = append(got, string(ev.Payload))
		mu.Unlock()
		return nil
	})
	// A poll interval of an hour: after the first event the worker is idle
	// and only Notify (wired to sqldb.DB.OnWrite) can wake it in time.
	rw := b.startWorker(t, outbox.WorkerConfig{PollInterval: time.Hour})
	b.enqueue(t, outbox.Event{Type: "note", Payload: []byte(`{"a":0}`)})
	if s := rw.next(t); s.Outcome != outbox.Succeeded {
		t.Fatalf("outcome = %s", s.Outcome)
	}
	ids := b.enqueue(t, outbox.Event{Type: "note", Payload: []byte(`{"a":1}`)})
	if s := rw.next(t); s.Outcome != outbox.Succeeded {
		t.Fatalf("outcome = %s", s.Outcome)
	}
	r := b.row(t, ids[0])
	if r.Status != outbox.StatusDone || r.Attempts != 0 || !r.ClaimedAt.IsZero() {
		t.Fatalf("row = %+v", r)
	}
	if l := b.ledger(t, ids[0])["record"]; l.Status != outbox.LedgerDone || !l.ProcessedAt.Equal(b.clock.Now()) {
		t.Fatalf("ledger = %+v", l)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[1] != `{"a":1}` {
		t.Fatalf("handled %q", got)
	}
}

func TestWorkerRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	b.reg.Handle("note", "flaky", func(ctx context.Context, ev outbox.Event) error {
		if n := calls.Add(1); n <= 4 && int(n) != outbox.Attempt(ctx) {
			t.Errorf("call %d saw attempt %d", n, outbox.Attempt(ctx))
		}
		return errors.New("remote said 503")
	})
	rw := b.startWorker(t, outbox.WorkerConfig{MaxAttempts: 4})
	ids := b.enqueue(t, outbox.Event{Type: "note"})
	for attempt := 1; attempt <= 3; attempt++ {
		if s := rw.next(t); s.Outcome != outbox.Failed {
			t.Fatalf("attempt %d: outcome %s, want failed", attempt, s.Outcome)
		}
		r := b.row(t, ids[0])
		want := b.clock.Now().Add(outbox.Backoff(attempt))
		if r.Status != outbox.StatusPending || r.Attempts != attempt || !r.NextAttemptAt.Equal(want) ||
			!strings.Contains(r.LastError, "remote said 503") {
			t.Fatalf("attempt %d: row = %+v, want pending, attempts %d, next %s", attempt, r, attempt, want)
		}
		if l := b.ledger(t, ids[0]); len(l) != 0 {
			t.Fatalf("attempt %d: failed claim not released: %+v", attempt, l)
		}
		// Not due a millisecond early.
		b.clock.Advance(outbox.Backoff(attempt) - time.Millisecond)
		rw.w.Notify()
		rw.expectIdle(t, 50*time.Millisecond)
		b.clock.Advance(time.Millisecond)
		rw.w.Notify()
	}
	if s := rw.next(t); s.Outcome != outbox.Dead {
		t.Fatalf("last attempt: outcome %s, want dead", s.Outcome)
	}
	r := b.row(t, ids[0])
	if r.Status != outbox.StatusDeadLettered || r.Attempts != 4 || !strings.Contains(r.LastError, "503") {
		t.Fatalf("row = %+v", r)
	}
	if calls.Load() != 4 {
		t.Fatalf("calls = %d, want 4", calls.Load())
	}

	// An operator retries it: attempts reset, due now.
	q := b.queue()
	if err := q.Retry(context.Background(), r.ID); err != nil {
		t.Fatal(err)
	}
	if err := q.Retry(context.Background(), r.ID); !errors.Is(err, outbox.ErrState) {
		t.Fatalf("second retry: %v, want ErrState", err)
	}
	rw.w.Notify()
	if s := rw.next(t); s.Outcome != outbox.Failed {
		t.Fatalf("after retry: %s", s.Outcome)
	}
	if r := b.row(t, ids[0]); r.Attempts != 1 {
		t.Fatalf("after retry: attempts %d, want 1", r.Attempts)
	}
}

func TestWorkerPermanentErrorDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Handle("note", "gone", func(ctx context.Context, ev outbox.Event) error {
		return outbox.Permanent(errors.New("410 gone"))
	})
	rw := b.startWorker(t, outbox.WorkerConfig{})
	ids := b.enqueue(t, outbox.Event{Type: "note"})
	if s := rw.next(t); s.Outcome != outbox.Dead {
		t.Fatalf("outcome %s", s.Outcome)
	}
	r := b.row(t, ids[0])
	if r.Status != outbox.StatusDeadLettered || r.Attempts != 1 || !strings.Contains(r.LastError, "410 gone") {
		t.Fatalf("row = %+v", r)
	}
}

func TestWorkerRetryAfterIsALowerBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Handle("note", "busy", func(ctx context.Context, ev outbox.Event) error {
		return outbox.RetryAfter(errors.New("429"), 2*time.Minute)
	})
	rw := b.startWorker(t, outbox.WorkerConfig{})
	ids := b.enqueue(t, outbox.Event{Type: "note"})
	if s := rw.next(t); s.Outcome != outbox.Failed {
		t.Fatalf("outcome %s", s.Outcome)
	}
	if r := b.row(t, ids[0]); !r.NextAttemptAt.Equal(b.clock.Now().Add(2*time.Minute)) || r.Attempts != 1 {
		t.Fatalf("row = %+v", r)
	}
}

func TestWorkerDeferDoesNotSpendAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	until := b.clock.Now().Add(time.Hour)
	b.reg.Handle("delivery", "post", func(ctx context.Context, ev outbox.Event) error {
		if calls.Add(1) <= 3 {
			return outbox.Defer(until, "host parked")
		}
		return nil
	})
	rw := b.startWorker(t, outbox.WorkerConfig{MaxAttempts: 2})
	ids := b.enqueue(t, outbox.Event{Type: "delivery", Target: "remote.example"})
	for i := range 3 {
		if s := rw.next(t); s.Outcome != outbox.Deferred {
			t.Fatalf("delivery %d: outcome %s, want deferred", i, s.Outcome)
		}
		r := b.row(t, ids[0])
		if r.Status != outbox.StatusPending || r.Attempts != 0 || !r.NextAttemptAt.Equal(until) {
			t.Fatalf("delivery %d: row = %+v", i, r)
		}
		if i < 2 {
			b.clock.Advance(time.Hour)
			until = b.clock.Now().Add(time.Hour)
			rw.w.Notify()
		}
	}
	// An operator releases the parked host's rows: due now, attempts kept.
	n, err := b.queue().ReleaseTarget(context.Background(), "remote.example")
	if err != nil || n != 1 {
		t.Fatalf("ReleaseTarget = %d, %v", n, err)
	}
	rw.w.Notify()
	if s := rw.next(t); s.Outcome != outbox.Succeeded {
		t.Fatalf("outcome %s", s.Outcome)
	}
	if r := b.row(t, ids[0]); r.Status != outbox.StatusDone || r.Attempts != 0 {
		t.Fatalf("row = %+v", r)
	}
}

func TestWorkerRetryRerunsOnlyTheFailedHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var aCalls, bCalls atomic.Int32
	b.reg.Handle("note", "a", func(ctx context.Context, ev outbox.Event) error {
		aCalls.Add(1)
		return nil
	})
	b.reg.Handle("note", "b", func(ctx context.Context, ev outbox.Event) error {
		if bCalls.Add(1) == 1 {
			return errors.New("first time fails")
		}
		return nil
	})
	var skipped atomic.Int32
	obs := &outbox.Observer{Handled: func(typ, h, outcome string, d time.Duration) {
		if h == "a" && outcome == outbox.HandledSkippedDone {
			skipped.Add(1)
		}
	}}
	rw := b.startWorker(t, outbox.WorkerConfig{Observer: obs})
	ids := b.enqueue(t, outbox.Event{Type: "note"})
	if s := rw.next(t); s.Outcome != outbox.Failed {
		t.Fatalf("outcome %s", s.Outcome)
	}
	l := b.ledger(t, ids[0])
	if l["a"].Status != outbox.LedgerDone || len(l) != 1 {
		t.Fatalf("ledger after first delivery = %+v", l)
	}
	b.clock.Advance(outbox.Backoff(1))
	rw.w.Notify()
	if s := rw.next(t); s.Outcome != outbox.Succeeded {
		t.Fatalf("outcome %s", s.Outcome)
	}
	if aCalls.Load() != 1 || bCalls.Load() != 2 || skipped.Load() != 1 {
		t.Fatalf("a ran %d, b ran %d, a skipped %d; want 1, 2, 1", aCalls.Load(), bCalls.Load(), skipped.Load())
	}
	if l := b.ledger(t, ids[0]); l["a"].Status != outbox.LedgerDone || l["b"].Status != outbox.LedgerDone {
		t.Fatalf("ledger = %+v", l)
	}
}

func TestWorkerHandlesRowsWithoutEventID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	b.reg.Handle("legacy", "h", func(ctx context.Context, ev outbox.Event) error {
		if ev.ID != "" {
			t.Errorf("event id %q, want empty", ev.ID)
		}
		calls.Add(1)
		return nil
	})
	now := b.clock.Now().UnixMilli()
	err := b.db.Tx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO event_queue (event_id, type, payload, next_attempt_at, occurred_at, created_at, updated_at)
			VALUES (NULL, 'legacy', '{}', ?, ?, ?, ?), (NULL, 'legacy', '{}', ?, ?, ?, ?)`,
			now, now, now, now, now, now, now, now)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rw := b.startWorker(t, outbox.WorkerConfig{})
	for range 2 {
		if s := rw.next(t); s.Outcome != outbox.Succeeded {
			t.Fatalf("outcome %s", s.Outcome)
		}
	}
	rows, err := b.queue().List(context.Background(), outbox.Filter{Type: "legacy", Status: outbox.StatusDone})
	if err != nil || len(rows) != 2 || calls.Load() != 2 {
		t.Fatalf("done rows %d (%v), calls %d", len(rows), err, calls.Load())
	}
	var n int
	if err := b.db.Read.QueryRow(`SELECT COUNT(*) FROM processed_events`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("ledger rows %d (%v), want 0", n, err)
	}
}

func TestWorkerShutdownReleasesUnfinishedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan string, 100)
	finish := make(chan struct{})
	b.reg.Handle("quick", "h", func(ctx context.Context, ev outbox.Event) error {
		started <- "quick"
		<-finish // released right after shutdown begins, well within the grace
		return nil
	})
	b.reg.Handle("stuck", "h", func(ctx context.Context, ev outbox.Event) error {
		started <- "stuck"
		<-ctx.Done() // only the end of the grace stops it
		return ctx.Err()
	})
	rw := b.startWorker(t, outbox.WorkerConfig{Concurrency: 2, BatchSize: 10, ShutdownGrace: 200 * time.Millisecond})
	quick := b.enqueue(t, outbox.Event{Type: "quick"})
	b.clock.Advance(time.Millisecond)
	var stuck []string
	for range 6 {
		stuck = append(stuck, b.enqueue(t, outbox.Event{Type: "stuck"})...)
	}
	for range 2 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("handlers did not start")
		}
	}
	rw.cancel()
	close(finish)
	rw.stop(t)

	if r := b.row(t, quick[0]); r.Status != outbox.StatusDone {
		t.Fatalf("quick row = %+v, want done", r)
	}
	for _, id := range stuck {
		r := b.row(t, id)
		if r.Status != outbox.StatusPending || r.Attempts != 0 || !r.ClaimedAt.IsZero() || r.NextAttemptAt.After(b.clock.Now()) {
			t.Fatalf("stuck row = %+v, want pending, due, no attempt spent", r)
		}
		if l := b.ledger(t, id); len(l) != 0 {
			t.Fatalf("stuck row kept ledger claims: %+v", l)
		}
	}
}

func TestLeaseReclaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueue(t, outbox.Event{Type: "note"})
	q := b.queue()
	ctx := context.Background()
	const lease = 600 * time.Second
	first, err := q.Claim(ctx, 10, lease)
	if err != nil || len(first) != 1 || first[0].Event.ID != ids[0] || first[0].Status != outbox.StatusProcessing {
		t.Fatalf("claim = %+v, %v", first, err)
	}
	b.clock.Advance(lease - time.Millisecond)
	if again, err := q.Claim(ctx, 10, lease); err != nil || len(again) != 0 {
		t.Fatalf("claim before the lease expired = %+v, %v", again, err)
	}
	b.clock.Advance(time.Millisecond)
	second, err := q.Claim(ctx, 10, lease)
	if err != nil || len(second) != 1 || !second[0].ClaimedAt.After(first[0].ClaimedAt) || second[0].Attempts != 0 {
		t.Fatalf("reclaim = %+v, %v", second, err)
	}
	// The first claimer wakes up: its outcome must not overwrite the new claim.
	if n, err := q.Settle(ctx, outbox.Settlement{Row: first[0], Result: outbox.Result{
		Outcome: outbox.Failed, Err: errors.New("stale")}}); err != nil || n != 0 {
		t.Fatalf("stale settle changed %d rows (%v)", n, err)
	}
	if r := b.row(t, ids[0]); r.Status != outbox.StatusProcessing || r.Attempts != 0 {
		t.Fatalf("row after stale settle = %+v", r)
	}
	if n, err := q.Complete(ctx, second[0]); err != nil || n != 1 {
		t.Fatalf("complete = %d, %v", n, err)
	}
	if r := b.row(t, ids[0]); r.Status != outbox.StatusDone {
		t.Fatalf("row = %+v", r)
	}
}

func TestQueueDeferAndRelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueue(t, outbox.Event{Type: "a"}, outbox.Event{Type: "b"})
	q := b.queue()
	ctx := context.Background()
	rows, err := q.Claim(ctx, 10, time.Minute)
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim = %d rows, %v", len(rows), err)
	}
	until := b.clock.Now().Add(time.Minute)
	if n, err := q.Defer(ctx, until, rows[0]); err != nil || n != 1 {
		t.Fatalf("defer = %d, %v", n, err)
	}
	if n, err := q.Release(ctx, rows[1]); err != nil || n != 1 {
		t.Fatalf("release = %d, %v", n, err)
	}
	if r := b.row(t, ids[0]); r.Status != outbox.StatusPending || r.Attempts != 0 || !r.NextAttemptAt.Equal(until) {
		t.Fatalf("deferred row = %+v", r)
	}
	if r := b.row(t, ids[1]); r.Status != outbox.StatusPending || r.Attempts != 0 || !r.NextAttemptAt.Equal(b.clock.Now()) {
		t.Fatalf("released row = %+v", r)
	}
	again, err := q.Claim(ctx, 10, time.Minute)
	if err != nil || len(again) != 1 || again[0].Event.ID != ids[1] {
		t.Fatalf("claim = %+v, %v; want only the released row", again, err)
	}
	if err := q.Discard(ctx, again[0].ID); !errors.Is(err, outbox.ErrState) {
		t.Fatalf("discard of a processing row: %v, want ErrState", err)
	}
	if err := q.Discard(ctx, rows[0].ID); err != nil {
		t.Fatalf("discard: %v", err)
	}
	if _, err := q.Get(ctx, rows[0].ID); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("get after discard: %v, want ErrNotFound", err)
	}
	st, err := q.Stats(ctx)
	if err != nil || st[outbox.StatusProcessing]["b"] != 1 || len(st) != 1 {
		t.Fatalf("stats = %v, %v", st, err)
	}
}

func TestRetentionSweep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Handle("note", "h", func(ctx context.Context, ev outbox.Event) error { return nil })
	rw := b.startWorker(t, outbox.WorkerConfig{DoneRetention: 7 * 24 * time.Hour})
	old := b.enqueue(t, outbox.Event{Type: "note"}, outbox.Event{Type: "note"})
	for range 2 {
		rw.next(t)
	}
	// Settled is observed before the completer commits the row: wait for the
	// commit, so the rows' update time is the clock before it moves.
	waitRowsDone := func(ids ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for _, id := range ids {
			for b.row(t, id).Status != outbox.StatusDone {
				if time.Now().After(deadline) {
					t.Fatalf("row %s not done within 10s", id)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	waitRowsDone(old...)
	// A worker that read the clock for a claim before it moves could claim
	// the next row with the old time, and the row's ledger would be as old
	// as the first ones: the clock moves with no worker running.
	rw.stop(t)
	b.clock.Advance(2 * 24 * time.Hour)
	rw = b.startWorker(t, outbox.WorkerConfig{DoneRetention: 7 * 24 * time.Hour})
	recent := b.enqueue(t, outbox.Event{Type: "note"})
	rw.next(t)
	waitRowsDone(recent...)
	pending := b.enqueue(t, outbox.Event{Type: "other", NotBefore: b.clock.Now().Add(365 * 24 * time.Hour)})
	ctx := context.Background()

	// Old rows are 7 days and a minute old: the minute covers owner tokens
	// issued a few milliseconds ahead of the clock.
	b.clock.Advance(5*24*time.Hour + time.Minute)
	res, err := rw.w.Sweep(ctx)
	if err != nil || res.Done != 2 || res.Ledger != 0 {
		t.Fatalf("sweep = %+v, %v; want 2 done rows", res, err)
	}
	if _, err := b.queue().List(ctx, outbox.Filter{EventID: old[0]}); err != nil {
		t.Fatal(err)
	}
	for _, id := range append(recent, pending...) {
		b.row(t, id) // still there
	}
	if l := b.ledger(t, old[0]); l["h"].Status != outbox.LedgerDone {
		t.Fatalf("ledger swept too early: %+v", l)
	}
	b.clock.Advance(23 * 24 * time.Hour) // old ledger rows are 30 days and a minute old
	res, err = rw.w.Sweep(ctx)
	if err != nil || res.Ledger != 2 || res.Done != 1 {
		t.Fatalf("sweep = %+v, %v; want 2 ledger rows and the recent done row", res, err)
	}
	if l := b.ledger(t, recent[0]); len(l) != 1 {
		t.Fatalf("recent ledger row swept: %+v", l)
	}
	b.row(t, pending[0])
}

// The db bus meets a fresh ledger claim of another process: the row is
// deferred to the claim's expiry without spending an attempt, then the
// expired claim is taken over.
func TestWorkerDefersToAClaimHeldElsewhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ran atomic.Int32
	b.reg.Handle("note", "post", func(ctx context.Context, ev outbox.Event) error {
		ran.Add(1)
		return nil
	})
	ids := b.enqueue(t, outbox.Event{Type: "note"})
	held := b.clock.Now().Add(-time.Minute)
	if _, err := b.db.Write.Exec(`INSERT INTO processed_events (event_id, handler, status, started_at)
		VALUES (?, 'post', 'in_progress', ?)`, ids[0], held.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	rw := b.startWorker(t, outbox.WorkerConfig{LedgerLease: 10 * time.Minute})
	if s := rw.next(t); s.Outcome != outbox.Deferred {
		t.Fatalf("outcome %s, want deferred", s.Outcome)
	}
	expiry := held.Add(10 * time.Minute)
	if r := b.row(t, ids[0]); r.Status != outbox.StatusPending || r.Attempts != 0 || !r.NextAttemptAt.Equal(expiry) || ran.Load() != 0 {
		t.Fatalf("row = %+v (ran %d), want pending until %s", r, ran.Load(), expiry)
	}
	if l := b.ledger(t, ids[0])["post"]; !l.StartedAt.Equal(held) {
		t.Fatalf("the other claim was touched: %+v", l)
	}
	b.clock.Advance(9 * time.Minute)
	rw.w.Notify()
	if s := rw.next(t); s.Outcome != outbox.Succeeded || ran.Load() != 1 {
		t.Fatalf("after expiry: %s (ran %d)", s.Outcome, ran.Load())
	}
	if l := b.ledger(t, ids[0])["post"]; l.Status != outbox.LedgerDone || !l.StartedAt.After(held) {
		t.Fatalf("ledger = %+v", l)
	}
}

func TestOldestPendingDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue()
	ctx := context.Background()
	now := b.clock.Now()
	if _, ok, err := q.OldestPendingDue(ctx, now); err != nil || ok {
		t.Fatalf("empty outbox: ok=%v err=%v", ok, err)
	}
	later := now.Add(time.Hour)
	b.enqueue(t, outbox.Event{Type: "a", NotBefore: later})
	if _, ok, err := q.OldestPendingDue(ctx, now); err != nil || ok {
		t.Fatalf("only a future row: ok=%v err=%v", ok, err)
	}
	b.enqueue(t, outbox.Event{Type: "b"}) // due at the real clock, an hour before the test clock
	due, ok, err := q.OldestPendingDue(ctx, now)
	if err != nil || !ok || !due.Before(now) {
		t.Fatalf("due row: due=%v ok=%v err=%v", due, ok, err)
	}
	if got, ok, _ := q.OldestPendingDue(ctx, later.Add(time.Second)); !ok || !got.Equal(due) {
		t.Fatalf("oldest at a later time = %v, want %v", got, due)
	}
}

func TestWorkerReportsAliveWhileIdle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alive := make(chan struct{}, 100)
	obs := &outbox.Observer{Alive: func() {
		select {
		case alive <- struct{}{}:
		default:
		}
	}}
	b.startWorker(t, outbox.WorkerConfig{Observer: obs, PollInterval: 5 * time.Millisecond})
	for i := range 3 { // several turns with nothing to claim
		select {
		case <-alive:
		case <-time.After(10 * time.Second):
			t.Fatalf("no Alive call after %d turns", i)
		}
	}
}

func TestEnqueueObserverCountsInsertedEventsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	counts := map[string]int{}
	ctx := outbox.WithEnqueueObserver(context.Background(), func(typ string, n int) { counts[typ] += n })
	id := outbox.ChildID("parent", "https://a.example/inbox")
	for range 3 { // the same deterministic event three times: one insert
		err := b.db.Tx(ctx, func(tx *sql.Tx) error {
			return outbox.Enqueue(ctx, tx, outbox.Event{ID: id, Type: "child"}, outbox.Event{Type: "fresh"})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if counts["child"] != 1 || counts["fresh"] != 3 {
		t.Fatalf("observed %v, want child=1 fresh=3", counts)
	}
}

func TestRunnerReportsEventsEnqueuedByHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	counts := map[string]int{}
	obs := &outbox.Observer{Enqueued: func(typ string, n int) {
		mu.Lock()
		defer mu.Unlock()
		counts[typ] += n
	}}
	b.reg.Handle("parent", "fanout", func(ctx context.Context, ev outbox.Event) error {
		return b.db.Tx(ctx, func(tx *sql.Tx) error {
			return outbox.Enqueue(ctx, tx,
				outbox.Event{ID: outbox.ChildID(ev.ID, "a"), Type: "child"},
				outbox.Event{ID: outbox.ChildID(ev.ID, "b"), Type: "child"})
		})
	})
	r := newRunner(t, b, b.reg, b.clock, obs)
	ev := outbox.Event{ID: "6b0e7c1e-8f55-4d59-9d3c-2f1a0e1d9a77", Type: "parent"}
	if res := r.Run(context.Background(), ev, 1); res.Outcome != outbox.Succeeded {
		t.Fatalf("run = %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if counts["child"] != 2 {
		t.Fatalf("observed %v, want child=2", counts)
	}
}

func TestSweeperAppliesRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueue(t, outbox.Event{Type: "a"}, outbox.Event{Type: "b"})
	q := b.queue()
	ctx := context.Background()
	rows, err := q.Claim(ctx, 10, time.Minute)
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim = %d, %v", len(rows), err)
	}
	if n, err := q.Complete(ctx, rows[0]); err != nil || n != 1 {
		t.Fatalf("complete = %d, %v", n, err)
	}
	b.clock.Advance(8 * 24 * time.Hour)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- outbox.Sweeper{Queue: q, Now: b.clock.Now, Interval: time.Hour}.Run(sctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := q.Get(ctx, rows[0].ID); errors.Is(err, outbox.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("done row older than the retention was not swept")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r := b.row(t, ids[1]); r.Status != outbox.StatusProcessing {
		t.Fatalf("unfinished row = %+v, want it kept", r)
	}
}
