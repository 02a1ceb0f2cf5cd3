package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
)

func newRunner(t testing.TB, b *testBundle, reg *outbox.Registry, clock *testClock, obs *outbox.Observer) *outbox.Runner {
	t.Helper()
	r, err := outbox.NewRunner(outbox.RunnerConfig{DB: b.db.Write, Registry: reg, Now: clock.Now, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRunnerConfigValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, cfg := range map[string]outbox.RunnerConfig{
		"no db":       {Registry: b.reg},
		"no registry": {DB: b.db.Write},
		"attempts":    {DB: b.db.Write, Registry: b.reg, MaxAttempts: -1},
		"lease":       {DB: b.db.Write, Registry: b.reg, LedgerLease: time.Millisecond},
	} {
		if _, err := outbox.NewRunner(cfg); err == nil {
			t.Errorf("%s: NewRunner accepted %+v", name, cfg)
		}
	}
	if _, err := outbox.NewWorker(outbox.WorkerConfig{DB: b.db.Write, Registry: b.reg, BatchSize: 5000}); err == nil {
		t.Error("NewWorker accepted BatchSize 5000")
	}
}

// Two deliveries of one event on two "processes" (two Runners with their own
// clocks over one database): a fresh claim held elsewhere defers the second
// delivery to the claim's expiry, an expired one is taken over, and the stale
// owner's late mark-done changes nothing.
func TestLedgerTakeOverAndOwnerToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := outbox.Event{ID: outbox.ChildID("6a1c1f7e-2d0b-4b8a-9a53-0c9f4f2e7a10", "x"), Type: "note"}

	clock1, clock2 := newClock(), newClock()
	entered, leave := make(chan struct{}), make(chan struct{})
	reg1 := outbox.NewRegistry()
	reg1.Handle("note", "post", func(ctx context.Context, ev outbox.Event) error {
		close(entered)
		<-leave
		return nil
	})
	var ran2 atomic.Int32
	reg2 := outbox.NewRegistry()
	reg2.Handle("note", "post", func(ctx context.Context, ev outbox.Event) error {
		ran2.Add(1)
		return nil
	})
	claims := map[string]int{}
	var mu sync.Mutex
	obs := &outbox.Observer{LedgerClaimed: func(h, result string) {
		mu.Lock()
		claims[result]++
		mu.Unlock()
	}}
	r1 := newRunner(t, b, reg1, clock1, obs)
	r2 := newRunner(t, b, reg2, clock2, obs)

	res1 := make(chan outbox.Result, 1)
	go func() { res1 <- r1.Run(context.Background(), ev, 1) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("first delivery did not start")
	}
	token1 := b.ledger(t, ev.ID)["post"].StartedAt
	if !token1.Equal(clock1.Now()) {
		t.Fatalf("claim started_at %s, want %s", token1, clock1.Now())
	}

	// A second delivery while the claim is fresh: deferred to its expiry.
	clock2.Advance(time.Second)
	res := r2.Run(context.Background(), ev, 1)
	if res.Outcome != outbox.Deferred || !res.Next.Equal(token1.Add(outbox.DefaultLedgerLease)) || ran2.Load() != 0 {
		t.Fatalf("second delivery = %+v (ran %d), want deferred to %s", res, ran2.Load(), token1.Add(outbox.DefaultLedgerLease))
	}

	// After the lease the claim is taken over and the handler runs.
	clock2.Advance(outbox.DefaultLedgerLease)
	if res := r2.Run(context.Background(), ev, 2); res.Outcome != outbox.Succeeded || ran2.Load() != 1 {
		t.Fatalf("takeover delivery = %+v (ran %d)", res, ran2.Load())
	}
	after := b.ledger(t, ev.ID)["post"]
	if after.Status != outbox.LedgerDone || !after.StartedAt.Equal(clock2.Now()) {
		t.Fatalf("ledger after takeover = %+v", after)
	}

	// The stale first delivery finishes: its mark-done is conditioned on its
	// own token and changes nothing.
	clock1.Advance(2 * outbox.DefaultLedgerLease)
	close(leave)
	if r := <-res1; r.Outcome != outbox.Succeeded {
		t.Fatalf("stale delivery = %+v", r)
	}
	if got := b.ledger(t, ev.ID)["post"]; got != after {
		t.Fatalf("stale owner changed the ledger: %+v, want %+v", got, after)
	}
	// A third delivery skips the done handler.
	if res := r2.Run(context.Background(), ev, 3); res.Outcome != outbox.Succeeded || ran2.Load() != 1 {
		t.Fatalf("delivery after done = %+v (ran %d)", res, ran2.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{outbox.ClaimClaimed: 1, outbox.ClaimHeldElsewhere: 1, outbox.ClaimTakenOver: 1, outbox.ClaimAlreadyDone: 1}
	if fmt.Sprint(claims) != fmt.Sprint(want) {
		t.Fatalf("claims = %v, want %v", claims, want)
	}
}

// A stale owner whose handler fails must not release (delete) the claim a
// newer delivery holds.
func TestLedgerStaleReleaseKeepsNewerClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := outbox.Event{ID: "0b7e3f6c-91d2-4f0e-8a4b-5f3c2e1d0a99", Type: "note"}
	clock1, clock2 := newClock(), newClock()
	entered1, leave1 := make(chan struct{}), make(chan struct{})
	entered2, leave2 := make(chan struct{}), make(chan struct{})
	reg1 := outbox.NewRegistry()
	reg1.Handle("note", "post", func(ctx context.Context, ev outbox.Event) error {
		close(entered1)
		<-leave1
		return errors.New("stale failure")
	})
	reg2 := outbox.NewRegistry()
	reg2.Handle("note", "post", func(ctx context.Context, ev outbox.Event) error {
		close(entered2)
		<-leave2
		return nil
	})
	r1, r2 := newRunner(t, b, reg1, clock1, nil), newRunner(t, b, reg2, clock2, nil)
	res1, res2 := make(chan outbox.Result, 1), make(chan outbox.Result, 1)
	go func() { res1 <- r1.Run(context.Background(), ev, 1) }()
	<-entered1
	clock2.Advance(outbox.DefaultLedgerLease)
	go func() { res2 <- r2.Run(context.Background(), ev, 2) }()
	select {
	case <-entered2:
	case <-time.After(10 * time.Second):
		t.Fatal("takeover did not run")
	}
	close(leave1)
	if r := <-res1; r.Outcome != outbox.Failed {
		t.Fatalf("stale = %+v", r)
	}
	if l := b.ledger(t, ev.ID)["post"]; l.Status != outbox.LedgerInProgress || !l.StartedAt.Equal(clock2.Now()) {
		t.Fatalf("stale release touched the newer claim: %+v", l)
	}
	close(leave2)
	if r := <-res2; r.Outcome != outbox.Succeeded {
		t.Fatalf("newer = %+v", r)
	}
	if l := b.ledger(t, ev.ID)["post"]; l.Status != outbox.LedgerDone {
		t.Fatalf("ledger = %+v", l)
	}
}

// Two claims of one (event, handler) in the same millisecond must carry
// different owner tokens, or a stale settle could hit the newer claim.
func TestOwnerTokensAreUniqueWithinAMillisecond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	frozen := newClock() // never advances
	var mu sync.Mutex
	var starts []time.Time
	reg := outbox.NewRegistry()
	ev := outbox.Event{ID: "5c0a4b2e-8f61-4d3a-b7c9-1e2f3a4b5c6d", Type: "note"}
	r := newRunner(t, b, reg, frozen, nil)
	reg.Handle("note", "post", func(ctx context.Context, e outbox.Event) error {
		l := b.ledger(t, e.ID)["post"]
		mu.Lock()
		starts = append(starts, l.StartedAt)
		mu.Unlock()
		return errors.New("again")
	})
	for attempt := 1; attempt <= 5; attempt++ {
		if res := r.Run(context.Background(), ev, attempt); res.Outcome != outbox.Failed {
			t.Fatalf("attempt %d: %+v", attempt, res)
		}
	}
	for i := 1; i < len(starts); i++ {
		if !starts[i].After(starts[i-1]) {
			t.Fatalf("owner tokens not strictly increasing: %v", starts)
		}
	}
}

func TestRunnerLedgerReadErrorFailsTheDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ran atomic.Int32
	b.reg.Handle("note", "h", func(ctx context.Context, ev outbox.Event) error {
		ran.Add(1)
		return nil
	})
	r := newRunner(t, b, b.reg, b.clock, nil)
	// Break the ledger for real: the table is gone.
	if _, err := b.db.Write.Exec(`ALTER TABLE processed_events RENAME TO processed_events_gone`); err != nil {
		t.Fatal(err)
	}
	res := r.Run(context.Background(), outbox.Event{ID: "7d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6", Type: "note"}, 1)
	if res.Outcome != outbox.Failed || res.Err == nil || ran.Load() != 0 ||
		!res.Next.Equal(b.clock.Now().Add(outbox.Backoff(1))) {
		t.Fatalf("result = %+v, ran %d; want failed without running", res, ran.Load())
	}
}

func TestRunnerPanicIsAFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Handle("note", "h", func(ctx context.Context, ev outbox.Event) error {
		panic("handler bug")
	})
	r := newRunner(t, b, b.reg, b.clock, nil)
	res := r.Run(context.Background(), outbox.Event{ID: "8e2f3a4b-5c6d-4e7f-9081-92a3b4c5d6e7", Type: "note"}, 10)
	if res.Outcome != outbox.Dead || res.Err == nil {
		t.Fatalf("result = %+v, want dead (last attempt)", res)
	}
}

func TestRunnerInterruptedIsReleased(t *testing.T) {
	t.Parallel()
	b := setup(t)
	entered := make(chan struct{})
	b.reg.Handle("note", "h", func(ctx context.Context, ev outbox.Event) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	})
	r := newRunner(t, b, b.reg, b.clock, nil)
	ctx, cancel := context.WithCancel(context.Background())
	id := "9f3a4b5c-6d7e-4f80-a192-a3b4c5d6e7f8"
	res := make(chan outbox.Result, 1)
	go func() { res <- r.Run(ctx, outbox.Event{ID: id, Type: "note"}, 1) }()
	<-entered
	cancel()
	if got := <-res; got.Outcome != outbox.Released {
		t.Fatalf("result = %+v, want released", got)
	}
	if l := b.ledger(t, id); len(l) != 0 {
		t.Fatalf("claim not released: %+v", l)
	}
}

// Many concurrent deliveries share transactions (group commit) and each
// still gets exactly its own verdict.
func TestRunnerConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ran sync.Map
	b.reg.Handle("note", "h", func(ctx context.Context, ev outbox.Event) error {
		if _, dup := ran.LoadOrStore(ev.ID, true); dup {
			t.Errorf("event %s ran twice", ev.ID)
		}
		if ev.Payload[0] == 'f' {
			return errors.New("odd one fails")
		}
		return nil
	})
	r := newRunner(t, b, b.reg, b.clock, nil)
	const n = 300
	var wg sync.WaitGroup
	results := make([]outbox.Result, n)
	for i := range n {
		wg.Go(func() {
			p := "s"
			if i%3 == 0 {
				p = "f"
			}
			results[i] = r.Run(context.Background(), outbox.Event{
				ID: outbox.ChildID("4a5b6c7d-8e9f-4a0b-9c1d-2e3f4a5b6c7d", fmt.Sprint(i)), Type: "note", Payload: []byte(p),
			}, 1)
		})
	}
	wg.Wait()
	for i, res := range results {
		want := outbox.Succeeded
		if i%3 == 0 {
			want = outbox.Failed
		}
		if res.Outcome != want {
			t.Fatalf("delivery %d: %s, want %s", i, res.Outcome, want)
		}
	}
	var done, inProgress int
	if err := b.db.Read.QueryRow(`SELECT COUNT(*) FILTER (WHERE status = 'done'), COUNT(*) FILTER (WHERE status = 'in_progress')
		FROM processed_events`).Scan(&done, &inProgress); err != nil {
		t.Fatal(err)
	}
	if done != n-n/3 || inProgress != 0 {
		t.Fatalf("ledger: %d done, %d in progress; want %d, 0", done, inProgress, n-n/3)
	}
}

func TestRunnerDeferIntoThePastWaitsMinDefer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.reg.Handle("note", "h", func(ctx context.Context, ev outbox.Event) error {
		return outbox.Defer(b.clock.Now().Add(-time.Hour), "stale hint")
	})
	r := newRunner(t, b, b.reg, b.clock, nil)
	res := r.Run(context.Background(), outbox.Event{ID: "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", Type: "note"}, 1)
	if res.Outcome != outbox.Deferred || !res.Next.Equal(b.clock.Now().Add(outbox.MinDefer)) || res.Reason == "" {
		t.Fatalf("result = %+v, want deferred by MinDefer", res)
	}
}
