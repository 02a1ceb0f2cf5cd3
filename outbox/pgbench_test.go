package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// Sizes of BenchmarkPostgresBesideRiver: commits per chunk, alternating
// chunks per kind, concurrent producers (the pool's default size), and the
// backlog the no-op runs drain.
const (
	pgBenchChunk     = 300
	pgBenchRounds    = 10
	pgBenchProducers = 16
	pgBenchBacklog   = 20000
	// pgBenchDrainRounds is how many times each no-op backlog is drained.
	pgBenchDrainRounds = 3
)

const pgBenchBody = `{"type":"Note","content":"hello fediverse"}`

// riverNoop is the job of River's side: the same body as courier's event.
type riverNoop struct {
	Body string `json:"body"`
}

func (riverNoop) Kind() string { return "noop" }

type riverNoopWorker struct {
	river.WorkerDefaults[riverNoop]
}

func (riverNoopWorker) Work(context.Context, *river.Job[riverNoop]) error { return nil }

// BenchmarkPostgresBesideRiver measures courier's outbox on one throwaway
// PostgreSQL (synchronous commit on, as installed) beside River
// (github.com/riverqueue/river with its pgx driver) doing the same work on
// the same server in the same run, and reports ratios against the server's
// own limit measured in the same run:
//
//   - raw_tx/s: one-row commits (an INSERT of a data row per transaction,
//     through courier's database/sql pool; raw_pgx_tx/s through a pgx pool,
//     River's);
//   - enqueue/raw: courier's transactional enqueue (the data row and its
//     event per transaction) over raw_tx/s; river_enqueue/raw_pgx the same
//     with River's InsertTx;
//   - raw_, enqueue_ and event_row_machine_us/tx: the machine's CPU time
//     (all cores, /proc/stat) per transaction of each kind, which the
//     server, the producers and the kernel spend alike;
//   - event_row/raw: the data row and an outbox row inserted by hand, with
//     the columns Enqueue writes and sent with the COMMIT as Enqueue's is,
//     but without Enqueue's checks and its count (migration 0020): the
//     cost of the row and its indexes alone, the floor of any enqueue into
//     this table;
//   - noop_events/s: a backlog of events drained by one db worker at its
//     production defaults with a no-op handler (ledger claim and mark
//     included); river_noop_jobs/s the same backlog drained by River's
//     client (MaxWorkers 2000, other settings its defaults); noop/river
//     their ratio;
//   - two_workers/one: the backlog drained by two workers on two pools of
//     their own (as two processes would be) over one; beside it the share
//     of the machine's CPU time busy during the one worker's drain
//     (one_worker_machine_busy, from /proc/stat) and the ceiling that
//     leaves two (two_workers_ceiling, its inverse): on a machine whose
//     cores the server, the producers and the workers share, what one
//     worker leaves idle is all a second can use.
//
// Commits are measured in alternating chunks, and the backlogs drained in
// alternating rounds, each in turned order every other round, so that
// every kind sees the same machine. The work is fixed in size; run it once:
//
//	COURIER_TEST_STORE=postgres go test ./outbox/ -run '^$' -bench BenchmarkPostgresBesideRiver -benchtime 1x
func BenchmarkPostgresBesideRiver(b *testing.B) {
	if storetest.Dialect() != sqldb.Postgres {
		b.Skip("PostgreSQL beside River: run with COURIER_TEST_STORE=postgres")
	}
	ctx := context.Background()
	loc := storetest.Location(b)
	db := storetest.Open(b, loc, storetest.Options{})
	if _, err := db.Write.Exec(benchDataTable(db)); err != nil {
		b.Fatal(err)
	}
	pcfg, err := pgxpool.ParseConfig(loc)
	if err != nil {
		b.Fatal(err)
	}
	pcfg.MaxConns = pgBenchProducers
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	newRiver := func() *river.Client[pgx.Tx] {
		workers := river.NewWorkers()
		river.AddWorker(workers, riverNoopWorker{})
		rc, err := river.NewClient(driver, &river.Config{
			// River fetches at most MaxWorkers jobs per FetchCooldown (100
			// ms): 100 workers would cap it at 1,000 jobs/s. 2,000 leave it
			// uncapped here.
			Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2000}},
			Workers: workers,
		})
		if err != nil {
			b.Fatal(err)
		}
		return rc
	}
	rc := newRiver()

	kinds := []struct {
		name string
		tx   func() error
	}{
		{"raw", func() error {
			return db.Tx(ctx, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO bench_data (body) VALUES (?)`, pgBenchBody)
				return err
			})
		}},
		{"enqueue", func() error {
			return db.Tx(ctx, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO bench_data (body) VALUES (?)`, pgBenchBody); err != nil {
					return err
				}
				return outbox.Enqueue(ctx, tx, outbox.Event{Type: "bench.noop", Payload: []byte(pgBenchBody)})
			})
		}},
		{"event_row", func() error {
			return db.Tx(ctx, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO bench_data (body) VALUES (?)`, pgBenchBody); err != nil {
					return err
				}
				t := time.Now().UnixMilli()
				_, err := tx.ExecContext(ctx, sqldb.Deferred+`INSERT INTO event_queue
					(event_id, type, target, payload, status, attempts, next_attempt_at, occurred_at, created_at, updated_at, lane)
					VALUES (?, ?, NULL, ?, 'pending', 0, ?, ?, ?, ?, 0)`,
					uuid.NewString(), "bench.noop", pgBenchBody, t, t, t, t)
				return err
			})
		}},
		{"raw_pgx", func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO bench_data (body) VALUES ($1)`, pgBenchBody)
				return err
			})
		}},
		{"river_enqueue", func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO bench_data (body) VALUES ($1)`, pgBenchBody); err != nil {
					return err
				}
				_, err := rc.InsertTx(ctx, tx, riverNoop{Body: pgBenchBody}, nil)
				return err
			})
		}},
	}
	elapsed := make([]time.Duration, len(kinds))
	busy := make([]float64, len(kinds)) // the machine's busy CPU time, in /proc/stat's ticks
	for r := range pgBenchRounds {
		for j := range kinds {
			i := turned(r, j, len(kinds))
			k := kinds[i]
			before := machineCPU()
			d, err := pgBenchCommits(pgBenchChunk, k.tx)
			if err != nil {
				b.Fatalf("%s: %v", k.name, err)
			}
			elapsed[i] += d
			ticks, _ := before.since()
			busy[i] += ticks
		}
	}
	rate := func(i int) float64 { return float64(pgBenchRounds*pgBenchChunk) / elapsed[i].Seconds() }
	// cpu is the machine's CPU time per transaction of kind i in µs (the
	// server's, the producers' and the kernel's alike), zero where
	// /proc/stat cannot be read.
	cpu := func(i int) float64 { return busy[i] / clockTicks / float64(pgBenchRounds*pgBenchChunk) * 1e6 }
	raw, enq, row, rawPgx, riverEnq := rate(0), rate(1), rate(2), rate(3), rate(4)

	// No-op backlogs: courier's on databases of their own, River's on its
	// tables emptied of the previous jobs, by a new client each time. The
	// drains alternate, so that a drift of the shared machine's speed
	// reaches each kind alike; each rate is its rounds' events over their
	// time.
	if _, err := pool.Exec(ctx, `DELETE FROM river_job`); err != nil {
		b.Fatal(err)
	}
	drains := []struct {
		run        func() (time.Duration, float64)
		took, busy float64
	}{
		{run: func() (time.Duration, float64) { return pgBenchDrain(b, 1) }},
		{run: func() (time.Duration, float64) { return pgBenchDrain(b, 2) }},
		{run: func() (time.Duration, float64) {
			d, busy := pgBenchRiverDrain(b, newRiver())
			if _, err := pool.Exec(ctx, `DELETE FROM river_job`); err != nil {
				b.Fatal(err)
			}
			return d, busy
		}},
	}
	for r := range pgBenchDrainRounds {
		for j := range drains {
			k := &drains[turned(r, j, len(drains))]
			d, busy := k.run()
			k.took += d.Seconds()
			k.busy += busy * d.Seconds()
		}
	}
	drained := func(i int) (rate, busy float64) {
		return pgBenchDrainRounds * pgBenchBacklog / drains[i].took, drains[i].busy / drains[i].took
	}
	one, oneBusy := drained(0)
	two, _ := drained(1)
	riverNoopRate, riverBusy := drained(2)

	b.ReportMetric(raw, "raw_tx/s")
	b.ReportMetric(enq, "enqueue_tx/s")
	b.ReportMetric(enq/raw, "enqueue/raw")
	b.ReportMetric(row/raw, "event_row/raw")
	if cpu(0) > 0 {
		b.ReportMetric(cpu(0), "raw_machine_us/tx")
		b.ReportMetric(cpu(1), "enqueue_machine_us/tx")
		b.ReportMetric(cpu(2), "event_row_machine_us/tx")
	}
	b.ReportMetric(rawPgx, "raw_pgx_tx/s")
	b.ReportMetric(riverEnq, "river_enqueue_tx/s")
	b.ReportMetric(riverEnq/rawPgx, "river_enqueue/raw_pgx")
	b.ReportMetric(one, "noop_events/s")
	b.ReportMetric(riverNoopRate, "river_noop_jobs/s")
	b.ReportMetric(one/riverNoopRate, "noop/river")
	b.ReportMetric(two/one, "two_workers/one")
	if oneBusy > 0 {
		// What the cores left to a second worker: with the machine busy
		// for a fraction f of the one worker's drain, two can at most
		// drain 1/f times as fast.
		b.ReportMetric(oneBusy, "one_worker_machine_busy")
		b.ReportMetric(1/oneBusy, "two_workers_ceiling")
		b.ReportMetric(riverBusy, "river_noop_machine_busy")
	}
	b.Logf("GOMAXPROCS %d; the server, the producers and the workers share the machine's cores", runtime.GOMAXPROCS(0))
}

// turned is the j-th of n kinds to measure in round r: in the given order,
// and in the turned order every other round, since a kind measured right
// after another read about 5 % slower, whichever kind it was.
func turned(r, j, n int) int {
	if r%2 == 1 {
		return n - 1 - j
	}
	return j
}

// pgBenchCommits runs n transactions of tx on pgBenchProducers goroutines
// and returns the time they took.
func pgBenchCommits(n int, tx func() error) (time.Duration, error) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		fail error
	)
	start := time.Now()
	for range pgBenchProducers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := tx(); err != nil {
					mu.Lock()
					fail = err
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), fail
}

// pgBenchDrain fills a new database with pgBenchBacklog events and returns
// the time that workers db workers (at the production defaults, each on a
// pool of its own) take to drain them with a no-op handler, and the share
// of the machine's CPU time that was busy meanwhile (zero where /proc/stat
// cannot be read).
func pgBenchDrain(b *testing.B, workers int) (time.Duration, float64) {
	ctx := context.Background()
	loc := storetest.Location(b)
	db := storetest.Open(b, loc, storetest.Options{})
	for i := 0; i < pgBenchBacklog; i += 500 {
		evs := make([]outbox.Event, 500)
		for j := range evs {
			evs[j] = outbox.Event{Type: "bench.noop", Payload: []byte(pgBenchBody)}
		}
		if err := db.Tx(ctx, func(tx *sql.Tx) error { return outbox.Enqueue(ctx, tx, evs...) }); err != nil {
			b.Fatal(err)
		}
	}
	var settled atomic.Int64
	all := make(chan struct{})
	reg := outbox.NewRegistry()
	reg.Handle("bench.noop", "noop", func(context.Context, outbox.Event) error { return nil })
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	pools := make([]*sqldb.DB, workers)
	for i := range pools {
		pools[i] = storetest.Open(b, loc, storetest.Options{})
	}
	cpu0 := machineCPU()
	start := time.Now()
	for _, p := range pools {
		w, err := outbox.NewWorker(outbox.WorkerConfig{
			DB: p.Write, Read: p.Read, Registry: reg,
			Observer: &outbox.Observer{Settled: func(string, outbox.Outcome) {
				if settled.Add(1) == pgBenchBacklog {
					close(all)
				}
			}},
		})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { _ = w.Run(wctx) })
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d events settled in 5 min", settled.Load(), pgBenchBacklog)
	}
	d := time.Since(start)
	busy := cpu0.busySince()
	cancel()
	wg.Wait()
	var done int
	if err := db.Read.QueryRow(`SELECT COUNT(*) FROM event_queue WHERE status = 'done'`).Scan(&done); err != nil || done != pgBenchBacklog {
		b.Fatalf("%d rows done (%v), want %d", done, err, pgBenchBacklog)
	}
	return d, busy
}

// pgBenchRiverDrain inserts pgBenchBacklog jobs and returns the time
// River's client takes to complete them, and the machine's busy share
// meanwhile.
func pgBenchRiverDrain(b *testing.B, rc *river.Client[pgx.Tx]) (time.Duration, float64) {
	ctx := context.Background()
	for i := 0; i < pgBenchBacklog; i += 1000 {
		params := make([]river.InsertManyParams, 1000)
		for j := range params {
			params[j] = river.InsertManyParams{Args: riverNoop{Body: pgBenchBody}}
		}
		if _, err := rc.InsertManyFast(ctx, params); err != nil {
			b.Fatal(err)
		}
	}
	events, unsubscribe := rc.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: pgBenchBacklog + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted},
	})
	defer unsubscribe()
	cpu0 := machineCPU()
	start := time.Now()
	if err := rc.Start(ctx); err != nil {
		b.Fatal(err)
	}
	timeout := time.After(5 * time.Minute)
	for n := 0; n < pgBenchBacklog; {
		select {
		case <-events:
			n++
		case <-timeout:
			b.Fatalf("River completed %d of %d jobs in 5 min", n, pgBenchBacklog)
		}
	}
	d := time.Since(start)
	busy := cpu0.busySince()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := rc.Stop(sctx); err != nil {
		b.Fatal(fmt.Errorf("stop River: %w", err))
	}
	return d, busy
}

// cpuTimes are the machine's CPU times from /proc/stat: all of them, and
// those of the idle and iowait states.
type cpuTimes struct{ total, idle float64 }

// machineCPU reads the machine's CPU times; zero when /proc/stat cannot be
// read (not Linux).
func machineCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	for i, v := range f[1:] {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return cpuTimes{}
		}
		if i >= 8 { // guest times are counted in user already
			break
		}
		t.total += n
		if i == 3 || i == 4 { // idle, iowait
			t.idle += n
		}
	}
	return t
}

// clockTicks is /proc/stat's unit, USER_HZ ticks a second (100 on every
// Linux architecture courier builds for).
const clockTicks = 100

// since returns the machine's busy and total CPU time since t was read, in
// /proc/stat's ticks summed over its cores; zeros when it could not be read.
func (t cpuTimes) since() (busy, total float64) {
	now := machineCPU()
	if t.total == 0 || now.total <= t.total {
		return 0, 0
	}
	total = now.total - t.total
	return total - (now.idle - t.idle), total
}

// busySince returns the share of the machine's CPU time that was busy since
// t was read; zero when it could not be read.
func (t cpuTimes) busySince() float64 {
	busy, total := t.since()
	if total == 0 {
		return 0
	}
	return busy / total
}
