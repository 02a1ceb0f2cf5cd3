package outbox_test

import (
	"context"
	"database/sql"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// The tests run once per store (package storetest): against real SQLite
// files in t.TempDir() (WAL, one BEGIN IMMEDIATE writer, a read pool), and
// with COURIER_TEST_STORE=postgres against databases of a throwaway
// PostgreSQL cluster, each migrated by the real runner. On SQLite
// synchronous=NORMAL keeps the suite fast; the benchmarks and the crash test
// use the production FULL.

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

// testClock is an injected clock that only moves when told.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

// newClock starts an hour ahead of the real clock: Enqueue stamps rows with
// the real time, so every row a test enqueues is due on the test clock, and
// everything the outbox computes afterwards follows the test clock.
func newClock() *testClock {
	return &testClock{now: time.Now().Add(time.Hour).Truncate(time.Millisecond)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

type testBundle struct {
	db    *sqldb.DB
	clock *testClock
	reg   *outbox.Registry
}

// openDB opens the store at loc (storetest.Location), migrated; sync is
// SQLite's synchronous mode.
func openDB(t testing.TB, loc, sync string) *sqldb.DB {
	t.Helper()
	return storetest.Open(t, loc, storetest.Options{Synchronous: sync})
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	return &testBundle{
		db:    openDB(t, storetest.Location(t), "NORMAL"),
		clock: newClock(),
		reg:   outbox.NewRegistry(),
	}
}

// enqueue inserts events in one transaction through sqldb.DB.Tx, as
// production code does, and returns their ids.
func (b *testBundle) enqueue(t testing.TB, evs ...outbox.Event) []string {
	t.Helper()
	err := b.db.Tx(context.Background(), func(tx *sql.Tx) error {
		return outbox.Enqueue(context.Background(), tx, evs...)
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	return ids
}

func (b *testBundle) queue() *outbox.Queue {
	return outbox.NewQueue(b.db.Write, outbox.QueueOptions{Read: b.db.Read, Now: b.clock.Now})
}

func (b *testBundle) row(t testing.TB, eventID string) outbox.Row {
	t.Helper()
	rows, err := b.queue().List(context.Background(), outbox.Filter{EventID: eventID})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("rows of event %s: %d, want 1", eventID, len(rows))
	}
	return rows[0]
}

func (b *testBundle) ledger(t testing.TB, eventID string) map[string]outbox.LedgerEntry {
	t.Helper()
	es, err := b.queue().Ledger(context.Background(), eventID)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]outbox.LedgerEntry{}
	for _, e := range es {
		m[e.Handler] = e
	}
	return m
}

// settled is a test signal: the worker's observer reports every settled
// delivery on it, so tests wait for events instead of sleeping.
type settled struct {
	Type    string
	Outcome outbox.Outcome
}

type runningWorker struct {
	w       *outbox.Worker
	settled chan settled
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
}

// startWorker runs a worker with cfg (DB, Registry, Now and Observer.Settled
// filled in) until the test ends or stop is called.
func (b *testBundle) startWorker(t testing.TB, cfg outbox.WorkerConfig) *runningWorker {
	t.Helper()
	rw := &runningWorker{settled: make(chan settled, 10000), done: make(chan error, 1)}
	cfg.DB, cfg.Read, cfg.Registry = b.db.Write, b.db.Read, b.reg
	if cfg.Now == nil {
		cfg.Now = b.clock.Now
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	obs := cfg.Observer
	if obs == nil {
		obs = &outbox.Observer{}
	}
	obs.Settled = func(typ string, o outbox.Outcome) { rw.settled <- settled{typ, o} }
	cfg.Observer = obs
	w, err := outbox.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rw.w = w
	b.db.OnWrite(w.Notify)
	ctx, cancel := context.WithCancel(context.Background())
	rw.cancel = cancel
	go func() { rw.done <- w.Run(ctx) }()
	t.Cleanup(func() { rw.stop(t) })
	return rw
}

func (rw *runningWorker) stop(t testing.TB) {
	t.Helper()
	rw.cancel()
	rw.once.Do(func() {
		select {
		case err := <-rw.done:
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("worker did not stop within 30s")
		}
	})
}

// next waits (bounded) for the next settled delivery.
func (rw *runningWorker) next(t testing.TB) settled {
	t.Helper()
	select {
	case s := <-rw.settled:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery settled within 10s")
	}
	return settled{}
}

// expectIdle asserts that nothing settles for a short while.
func (rw *runningWorker) expectIdle(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case s := <-rw.settled:
		t.Fatalf("unexpected delivery settled: %+v", s)
	case <-time.After(d):
	}
}
