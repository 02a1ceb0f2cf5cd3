package outbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
)

// The db worker frees a row's slot once its handler has run, not once its
// settle has committed: while the settle of one row waits (here for a lock
// another transaction holds on its ledger claim), the worker claims and
// handles the next. With one handler and a batch of one the pool holds two
// claimed rows; were slots freed by the settle, the third row would wait
// for the lock. PostgreSQL only: on SQLite the waiting settle would hold
// the one writer, and the next claim with it.
func TestWorkerClaimsWhileASettleWaits(t *testing.T) {
	b := setup(t)
	if b.db.Dialect != sqldb.Postgres {
		t.Skip("a settle that waits for a row lock while claims go on: PostgreSQL only")
	}
	t.Parallel()
	ctx := context.Background()
	ids := b.enqueue(t, outbox.Event{Type: "note"}, outbox.Event{Type: "note"}, outbox.Event{Type: "note"})

	first := make(chan struct{})
	release := make(chan struct{})
	var (
		mu      sync.Mutex
		handled = map[string]bool{}
	)
	b.reg.Handle("note", "h", func(_ context.Context, ev outbox.Event) error {
		if ev.ID == ids[0] {
			close(first)
			<-release
		}
		mu.Lock()
		handled[ev.ID] = true
		mu.Unlock()
		return nil
	})
	settled := make(chan string, len(ids))
	w, err := outbox.NewWorker(outbox.WorkerConfig{
		DB: b.db.Write, Read: b.db.Read, Registry: b.reg, Concurrency: 1, BatchSize: 1, Now: b.clock.Now,
		PollInterval: 10 * time.Millisecond,
		Observer:     &outbox.Observer{Settled: func(string, outbox.Outcome) { settled <- "" }},
	})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx) }()
	defer func() { cancel(); <-done }()

	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the first row's handler did not run in 30 s")
	}
	// The first row's ledger claim is committed; lock it so that its
	// settle (the ledger mark) waits.
	lock, err := b.db.Write.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback() //nolint:errcheck // released below; a second rollback is harmless
	var one int
	if err := lock.QueryRowContext(ctx, `SELECT 1 FROM processed_events WHERE event_id = ? FOR UPDATE`, ids[0]).Scan(&one); err != nil {
		t.Fatal(err)
	}
	close(release)

	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		third := handled[ids[2]]
		mu.Unlock()
		if third {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the third row was not handled in 30 s while the first one's settle waited")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := b.row(t, ids[0]).Status; got != outbox.StatusProcessing {
		t.Fatalf("first row %s while its settle waits, want processing", got)
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	for range ids {
		select {
		case <-settled:
		case <-time.After(30 * time.Second):
			t.Fatal("the rows were not all settled in 30 s once the lock was gone")
		}
	}
	for _, id := range ids {
		if got := b.row(t, id).Status; got != outbox.StatusDone {
			t.Fatalf("row of %s is %s, want done", id, got)
		}
		if e := b.ledger(t, id)["h"]; e.Status != outbox.LedgerDone {
			t.Fatalf("ledger of %s: %+v, want done", id, e)
		}
	}
}
