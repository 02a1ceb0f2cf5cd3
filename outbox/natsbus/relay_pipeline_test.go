package natsbus

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/sqlite"
)

// queueOnly hides every method of *outbox.Queue but those of Queue, as a
// Queue from elsewhere would: the relay then settles and claims in separate
// transactions.
type queueOnly struct{ Queue }

func TestRelayWithAQueueThatCannotSettleAndClaim(t *testing.T) {
	t.Parallel()
	br := newBroker(t)
	db := newDB(t)
	_, js := br.js(t)
	cfg := fastConfig(br.url(), db, nil, nil)
	cfg.Queue = queueOnly{outbox.NewQueue(db.Write, outbox.QueueOptions{})}
	cfg.BatchSize = 16
	if _, ok := cfg.Queue.(idClaimer); ok {
		t.Fatal("the wrapped queue still settles and claims at once; the test proves nothing")
	}
	bus := mustNew(t, cfg)
	runBus(t, bus, (*Bus).RunRelay)
	waitReady(t, bus)
	const n = 100
	enqueue(t, db, testEvents(n, "delivery.post")...)
	waitFor(t, 20*time.Second, "every row done", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == n
	})
	if m := streamMsgs(t, js, DefaultStream); m != n {
		t.Errorf("stream holds %d messages, want %d", m, n)
	}
}

// A relay stopped while batches are in flight settles what the broker
// acknowledged and puts the rest back, due and without a spent attempt, so
// nothing waits for a lease; the next relay publishes the rest, each event
// once.
func TestRelayStoppedMidBacklogLeavesNothingClaimed(t *testing.T) {
	t.Parallel()
	br := newBroker(t)
	db := newDB(t)
	_, js := br.js(t)
	const n = 3000
	for i := 0; i < n; i += 500 {
		enqueue(t, db, testEvents(500, "delivery.post")...)
	}
	cfg := fastConfig(br.url(), db, nil, nil)
	cfg.BatchSize = 32
	// The relay stops itself once a few batches are done, with more in
	// flight.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Beat = func() {
		var done int
		if err := db.Read.QueryRow(`SELECT COUNT(*) FROM event_queue WHERE status = 'done'`).Scan(&done); err == nil && done >= 64 {
			cancel()
		}
	}
	bus := mustNew(t, cfg)
	ran := make(chan error, 1)
	go func() { ran <- bus.RunRelay(ctx) }()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("relay: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the relay did not stop")
	}
	if c := count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'processing'`); c != 0 {
		t.Fatalf("%d rows still claimed after the relay stopped", c)
	}
	done := count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`)
	if done == n {
		t.Fatal("the relay finished before it was stopped; the test proves nothing")
	}
	if c := count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'pending' AND attempts = 0
		AND next_attempt_at <= ?`, time.Now().UnixMilli()); c != n-done {
		t.Fatalf("%d rows pending and due, want %d", c, n-done)
	}
	if m := streamMsgs(t, js, DefaultStream); m < uint64(done) {
		t.Fatalf("stream holds %d messages, fewer than the %d rows marked done", m, done)
	}

	cfg.Beat = nil
	again := mustNew(t, cfg)
	runBus(t, again, (*Bus).RunRelay)
	waitFor(t, 60*time.Second, "every row done", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == n
	})
	if m := streamMsgs(t, js, DefaultStream); m != n {
		t.Errorf("stream holds %d messages, want %d (one per event)", m, n)
	}
}

// While another connection holds the database's write lock (another
// process writing), the relay's writes fail; it keeps the outcomes of the
// batches the broker acknowledged and writes them once the lock is free,
// instead of leaving the rows claimed until their lease expires.
func TestRelayKeepsOutcomesWhileTheDatabaseIsLocked(t *testing.T) {
	if storetest.Dialect() != sqldb.SQLite {
		t.Skip("holds SQLite's one write lock: SQLite only (PostgreSQL's writers lock rows, not the database)")
	}
	t.Parallel()
	br := newBroker(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "courier.db")
	// A short busy timeout, so the relay's writes fail quickly while the
	// lock is held.
	db := openSQLite(t, path, sqlite.Options{Synchronous: "NORMAL", BusyTimeout: 50 * time.Millisecond})
	other := openSQLite(t, path, sqlite.Options{Synchronous: "NORMAL"})

	const n = 64
	enqueue(t, db, testEvents(n, "delivery.post")...)
	logs := &logBuffer{}
	cfg := fastConfig(br.url(), db, nil, logs)
	cfg.BatchSize = 16

	// Once the first batch is claimed (its acks on their way), the other
	// connection takes the write lock for a while.
	var (
		once     sync.Once
		released = make(chan struct{})
		lockErr  error
	)
	cfg.Beat = func() {
		var claimed int
		if err := db.Read.QueryRow(`SELECT COUNT(*) FROM event_queue WHERE status = 'processing'`).Scan(&claimed); err != nil || claimed == 0 {
			return
		}
		once.Do(func() {
			tx, err := other.Write.BeginTx(ctx, nil) // BEGIN IMMEDIATE
			if err != nil {
				lockErr = err
				close(released)
				return
			}
			time.AfterFunc(500*time.Millisecond, func() {
				lockErr = tx.Rollback()
				close(released)
			})
		})
	}
	bus := mustNew(t, cfg)
	runBus(t, bus, (*Bus).RunRelay)
	select {
	case <-released:
	case <-time.After(20 * time.Second):
		t.Fatal("the relay never claimed a batch")
	}
	if lockErr != nil {
		t.Fatalf("lock: %v", lockErr)
	}
	waitFor(t, 20*time.Second, "every row done", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == n
	})
	kept := false
	for _, rec := range logs.records("relay could not settle and claim rows; retrying") {
		if rows, _ := rec["rows"].(float64); rows > 0 {
			kept = true
		}
	}
	if !kept {
		t.Error("no write with outcomes to settle failed while the lock was held; the test proves nothing")
	}
	if len(logs.records("relay could not settle rows within their lease; their lease will expire")) != 0 {
		t.Error("the relay dropped outcomes")
	}
	if c := count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE attempts > 0`); c != 0 {
		t.Errorf("%d rows spent attempts", c)
	}
	_, js := br.js(t)
	if m := streamMsgs(t, js, DefaultStream); m != n {
		t.Errorf("stream holds %d messages, want %d", m, n)
	}
}
