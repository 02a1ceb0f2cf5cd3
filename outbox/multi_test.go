package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// The tests of this file share one store between several handles, as
// several processes (or machines) share one database: each handle has
// pools of its own, and on PostgreSQL its own database backends.

// runWorker runs a worker on db until the test ends and returns a function
// that stops it and waits for it.
func runWorker(t *testing.T, db *sqldb.DB, cfg outbox.WorkerConfig) (*outbox.Worker, func()) {
	t.Helper()
	cfg.DB, cfg.Read = db.Write, db.Read
	w, err := outbox.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("worker: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("worker did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return w, stop
}

// waitUntil polls cond every 20 ms for up to limit, and never less than two
// minutes: limit says what is expected, but on a loaded machine the
// verdict must not depend on speed.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	limit = max(limit, 2*time.Minute)
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func enqueueOn(t *testing.T, db *sqldb.DB, evs ...outbox.Event) {
	t.Helper()
	ctx := context.Background()
	if err := db.Tx(ctx, func(tx *sql.Tx) error { return outbox.Enqueue(ctx, tx, evs...) }); err != nil {
		t.Fatal(err)
	}
}

func countRows(t *testing.T, db *sqldb.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Read.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Two workers on two separate handles of one store (as two processes) claim
// while events are enqueued under them: every row is claimed once in all
// (their claims are disjoint), each (event, handler) runs exactly once and
// never beside itself, and every row ends done without spending an attempt.
func TestTwoWorkersOnTwoPoolsClaimDisjointRows(t *testing.T) {
	t.Parallel()
	loc := storetest.Location(t)
	producer := openDB(t, loc, "NORMAL")
	const n = 1500
	var (
		mu       sync.Mutex
		running  = map[string]bool{}
		runs     = map[string]int{}
		overlaps []string
		claimed  [2]atomic.Int64
	)
	handler := func(name string) outbox.Handler {
		return func(ctx context.Context, ev outbox.Event) error {
			key := ev.ID + "/" + name
			mu.Lock()
			if running[key] {
				overlaps = append(overlaps, key)
			}
			running[key] = true
			runs[key]++
			mu.Unlock()
			time.Sleep(200 * time.Microsecond)
			mu.Lock()
			running[key] = false
			mu.Unlock()
			return nil
		}
	}
	for i := range 2 {
		db := openDB(t, loc, "NORMAL")
		reg := outbox.NewRegistry()
		reg.Handle("multi", "a", handler("a"))
		reg.Handle("multi", "b", handler("b"))
		runWorker(t, db, outbox.WorkerConfig{
			Registry: reg, Concurrency: 4, BatchSize: 16, PollInterval: 5 * time.Millisecond,
			Observer: &outbox.Observer{Claimed: func(k int) { claimed[i].Add(int64(k)) }},
		})
	}
	for batch := 0; batch < n; batch += 50 {
		evs := make([]outbox.Event, 50)
		for i := range evs {
			evs[i] = outbox.Event{Type: "multi", Payload: fmt.Appendf(nil, `{"n":%d}`, batch+i)}
		}
		enqueueOn(t, producer, evs...)
	}
	waitUntil(t, 120*time.Second, "every row done", func() bool {
		return countRows(t, producer, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == n
	})
	mu.Lock()
	defer mu.Unlock()
	if len(overlaps) > 0 {
		t.Fatalf("%d handler runs overlapped another run of the same (event, handler), first %s", len(overlaps), overlaps[0])
	}
	if len(runs) != 2*n {
		t.Fatalf("%d (event, handler) pairs ran, want %d", len(runs), 2*n)
	}
	for key, k := range runs {
		if k != 1 {
			t.Fatalf("%s ran %d times, want once", key, k)
		}
	}
	a, b := claimed[0].Load(), claimed[1].Load()
	if a+b != n {
		t.Fatalf("rows claimed: %d + %d, want %d in all (each row once)", a, b, n)
	}
	// Both must have claimed on PostgreSQL, whose claims run side by side;
	// on SQLite one worker may hold the write lock for the whole run.
	if (a == 0 || b == 0) && storetest.Dialect() == sqldb.Postgres {
		t.Fatalf("rows claimed: %d and %d; one worker claimed nothing, the test proves nothing", a, b)
	}
	if c := countRows(t, producer, `SELECT COUNT(*) FROM event_queue WHERE attempts > 0`); c != 0 {
		t.Fatalf("%d rows spent attempts", c)
	}
	if c := countRows(t, producer, `SELECT COUNT(*) FROM processed_events WHERE status = 'done'`); c != 2*n {
		t.Fatalf("%d ledger rows done, want %d", c, 2*n)
	}
	t.Logf("claims: %d and %d rows", a, b)
}

// An idle worker finds an event enqueued through another handle of the
// store by polling, with no wake-up from that handle: the fallback of a
// pool that gets no notifications (SQLite across processes; PostgreSQL
// behind a transaction-mode pooler, or without Listen).
func TestIdleWorkerPollsForAnotherHandlesEnqueue(t *testing.T) {
	t.Parallel()
	loc := storetest.Location(t)
	producer, workerDB := openDB(t, loc, "NORMAL"), openDB(t, loc, "NORMAL")
	handled := make(chan string, 10)
	reg := outbox.NewRegistry()
	reg.Handle("poll", "h", func(ctx context.Context, ev outbox.Event) error {
		handled <- ev.ID
		return nil
	})
	w, _ := runWorker(t, workerDB, outbox.WorkerConfig{Registry: reg, PollInterval: 50 * time.Millisecond})
	workerDB.OnWrite(w.Notify) // fires only for commits of workerDB's own handle
	for round := range 3 {
		ev := outbox.Event{Type: "poll", Payload: fmt.Appendf(nil, `{"round":%d}`, round)}
		enqueueOn(t, producer, ev)
		select {
		case <-handled:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the idle worker did not find the event within 30s", round)
		}
	}
}

// On PostgreSQL an idle worker whose handle listens wakes for an event
// enqueued in another process: the enqueue's transaction notifies, and the
// listening handle runs its OnWrite hooks. The worker's poll interval is an
// hour, so only a wake-up can explain a delivery. The listener also wakes
// the hooks once when it connects; of three rounds at most one can owe its
// delivery to that.
func TestIdleWorkerWakesOnAnotherProcessesEnqueue(t *testing.T) {
	if storetest.Dialect() != sqldb.Postgres {
		t.Skip("LISTEN/NOTIFY across processes: PostgreSQL only (SQLite's workers in other processes poll)")
	}
	t.Parallel()
	loc := storetest.Location(t)
	producer := openDB(t, loc, "")
	workerDB := storetest.Open(t, loc, storetest.Options{Listen: true})
	handled := make(chan string, 10)
	reg := outbox.NewRegistry()
	reg.Handle("wake", "h", func(ctx context.Context, ev outbox.Event) error {
		handled <- ev.ID
		return nil
	})
	w, _ := runWorker(t, workerDB, outbox.WorkerConfig{Registry: reg, PollInterval: time.Hour})
	workerDB.OnWrite(w.Notify)
	for round := range 3 {
		ev := []outbox.Event{{Type: "wake", Payload: fmt.Appendf(nil, `{"round":%d}`, round)}}
		enqueueOn(t, producer, ev...)
		select {
		case id := <-handled:
			if id != ev[0].ID {
				t.Fatalf("round %d: handled %s, want %s", round, id, ev[0].ID)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the idle worker was not woken within 30s", round)
		}
	}
}

// On PostgreSQL two transactions that change rows of the same type commit
// side by side: each database backend counts in its own shard of
// event_queue_counts (migration 0016), so the second does not wait for the
// first one's counter rows. With one counter row per (status, type) the
// second would wait until the first ends, which here is only after the
// second has committed, so the second would run into its deadline.
func TestCountShardsLetWritersOfOneTypeCommitSideBySide(t *testing.T) {
	if storetest.Dialect() != sqldb.Postgres {
		t.Skip("concurrent writers: PostgreSQL only (SQLite runs one writer at a time)")
	}
	t.Parallel()
	ctx := context.Background()
	loc := storetest.Location(t)
	dbA, dbB := openDB(t, loc, ""), openDB(t, loc, "")
	enqueueOn(t, dbA, outbox.Event{Type: "shard"}) // counter rows exist for the type
	held, err := dbA.Write.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	if err := outbox.Enqueue(ctx, held, outbox.Event{Type: "shard"}); err != nil {
		t.Fatal(err)
	}
	q := outbox.NewQueue(dbB.Write, outbox.QueueOptions{Read: dbB.Read})
	bctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	// Enqueue and claim (pending -> processing) beside the open transaction.
	if err := dbB.Tx(bctx, func(tx *sql.Tx) error { return outbox.Enqueue(bctx, tx, outbox.Event{Type: "shard"}) }); err != nil {
		t.Fatalf("enqueue beside an open enqueue of the same type: %v", err)
	}
	rows, err := q.Claim(bctx, 10, time.Minute)
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim beside an open enqueue of the same type: %d rows, %v; want the 2 committed", len(rows), err)
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (outbox.Stats{"pending": {"shard": 1}, "processing": {"shard": 2}}); !reflect.DeepEqual(st, want) {
		t.Fatalf("Stats = %v, want %v", st, want)
	}
}

// On PostgreSQL the sweep folds the count shards of database backends that
// have ended into shard 0, and the sums stay those of the table.
func TestSweepFoldsCountShardsOfEndedBackends(t *testing.T) {
	if storetest.Dialect() != sqldb.Postgres {
		t.Skip("count shards per database backend: PostgreSQL only (SQLite counts in one shard)")
	}
	t.Parallel()
	ctx := context.Background()
	loc := storetest.Location(t)
	db := openDB(t, loc, "")
	gone, err := storetest.OpenAt(ctx, loc, storetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// One backend for the handle, so every count it writes is in pid's shard.
	gone.Write.SetMaxOpenConns(1)
	var pid int
	if err := gone.Write.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	gq := outbox.NewQueue(gone.Write, outbox.QueueOptions{Read: gone.Read})
	for range 3 {
		enqueueOn(t, gone, outbox.Event{Type: "fold"}, outbox.Event{Type: "other"})
	}
	if rows, err := gq.Claim(ctx, 2, time.Minute); err != nil || len(rows) != 2 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	if c := countRows(t, db, `SELECT COUNT(*) FROM event_queue_counts WHERE shard = ?`, pid); c == 0 {
		t.Fatalf("no counts in the shard of backend %d", pid)
	}
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the closed handle's backend to end", func() bool {
		return countRows(t, db, `SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ?`, pid) == 0
	})
	q := outbox.NewQueue(db.Write, outbox.QueueOptions{Read: db.Read})
	before, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Sweep(ctx, time.UnixMilli(1), time.UnixMilli(1)); err != nil {
		t.Fatal(err)
	}
	if c := countRows(t, db, `SELECT COUNT(*) FROM event_queue_counts WHERE shard = ?`, pid); c != 0 {
		t.Fatalf("%d count rows left in the shard of ended backend %d", c, pid)
	}
	after, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := outbox.Stats{"pending": {"fold": 2, "other": 2}, "processing": {"fold": 1, "other": 1}}
	if !reflect.DeepEqual(before, want) || !reflect.DeepEqual(after, want) {
		t.Fatalf("Stats before the fold %v, after %v; want %v", before, after, want)
	}
}

// The counts of new rows that enqueues append (migration 0020), and deltas
// however they came (a store copy brings the source's), are summed by Stats
// and folded by FoldCounts into the table without changing a sum, while
// writers on other connections enqueue and claim and other folds run: at
// the end the counts are the rows', and nothing is left to fold.
func TestFoldCountsKeepsTheSums(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	loc := storetest.Location(t)
	db := openDB(t, loc, "")
	q := outbox.NewQueue(db.Write, outbox.QueueOptions{Read: db.Read})
	enqueueOn(t, db, outbox.Event{Type: "a"}, outbox.Event{Type: "b"})
	if n := countRows(t, db, `SELECT COUNT(*) FROM event_queue_count_deltas WHERE status = 'pending'`); n != 2 {
		t.Fatalf("%d deltas after an enqueue of two types, want one per type", n)
	}
	if err := q.FoldCounts(ctx); err != nil {
		t.Fatal(err)
	}
	// Deltas as a copy may bring them: one pending "a" moves out of the
	// table again.
	for _, s := range []string{
		`INSERT INTO event_queue_count_deltas (status, type, n) VALUES ('pending', 'a', 1)`,
		`UPDATE event_queue_counts SET n = n - 1 WHERE (status, type, shard) =
			(SELECT status, type, shard FROM event_queue_counts WHERE status = 'pending' AND type = 'a' AND n > 0 ORDER BY shard LIMIT 1)`,
	} {
		if _, err := db.Write.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	want := outbox.Stats{"pending": {"a": 1, "b": 1}}
	if st, err := q.Stats(ctx); err != nil || !reflect.DeepEqual(st, want) {
		t.Fatalf("Stats with deltas = %v, %v; want %v", st, err, want)
	}
	if err := q.FoldCounts(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(ctx); err != nil || !reflect.DeepEqual(st, want) {
		t.Fatalf("Stats after the fold = %v, %v; want %v", st, err, want)
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM event_queue_count_deltas`); n != 0 {
		t.Fatalf("%d deltas left after the fold", n)
	}

	// Writers on handles of their own, and two folders, at once. Every
	// handle is opened before any of them writes: opening probes that the
	// file is writable, which waits out the busy timeout behind writers
	// that are already running, and a loaded machine may overrun it.
	var wdbs, fdbs []*sqldb.DB
	for range 3 {
		wdbs = append(wdbs, openDB(t, loc, ""))
	}
	for range 2 {
		fdbs = append(fdbs, openDB(t, loc, ""))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w, wdb := range wdbs {
		wg.Go(func() {
			for i := range 40 {
				evs := []outbox.Event{{Type: "a"}}
				if i%4 == 0 {
					for j := range 70 { // a full multi-row insert and more
						evs = append(evs, outbox.Event{Type: "b", ID: outbox.ChildID(fmt.Sprint(w, i), fmt.Sprint(j))})
					}
				}
				if err := wdb.Tx(ctx, func(tx *sql.Tx) error { return outbox.Enqueue(ctx, tx, evs...) }); err != nil {
					errs <- err
					return
				}
				if i%10 == 0 {
					wq := outbox.NewQueue(wdb.Write, outbox.QueueOptions{Read: wdb.Read})
					if _, err := wq.Claim(ctx, 5, time.Minute); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	for _, fdb := range fdbs {
		fq := outbox.NewQueue(fdb.Write, outbox.QueueOptions{Read: fdb.Read})
		wg.Go(func() {
			for range 30 {
				if err := fq.FoldCounts(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rows := outbox.Stats{}
	rs, err := db.Read.Query(`SELECT status, type, COUNT(*) FROM event_queue GROUP BY status, type`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var status, typ string
		var n int64
		if err := rs.Scan(&status, &typ, &n); err != nil {
			t.Fatal(err)
		}
		if rows[status] == nil {
			rows[status] = map[string]int64{}
		}
		rows[status][typ] = n
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	rs.Close()
	if st, err := q.Stats(ctx); err != nil || !reflect.DeepEqual(st, rows) {
		t.Fatalf("Stats after the writers = %v, %v; the rows are %v", st, err, rows)
	}
	if err := q.FoldCounts(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db, `SELECT COUNT(*) FROM event_queue_count_deltas`); n != 0 {
		t.Fatalf("%d deltas left after the last fold", n)
	}
	if st, err := q.Stats(ctx); err != nil || !reflect.DeepEqual(st, rows) {
		t.Fatalf("Stats after the last fold = %v, %v; the rows are %v", st, err, rows)
	}
}
