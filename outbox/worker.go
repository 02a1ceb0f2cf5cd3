package outbox

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// WorkerConfig configures the db bus worker (EVENT_BUS_BACKEND=db).
type WorkerConfig struct {
	// DB is the writer, sqldb.DB.Write: on SQLite a *sql.DB whose
	// transactions begin with a write lock (BEGIN IMMEDIATE), on PostgreSQL
	// the pool. Required.
	DB *sql.DB
	// Read is a read pool for the queue's queries (default DB).
	Read *sql.DB
	// Registry holds the handlers. Required.
	Registry *Registry
	// Concurrency is how many events are handled at once (default 16).
	Concurrency int
	// BatchSize is the most rows claimed in one transaction (default 256,
	// the relay's batch, at most 1000). At most Concurrency+2*BatchSize
	// claimed rows wait for a handler or run in one at any time, and the
	// claimer claims when a whole batch of them is free (or maxClaimWait
	// after its last claim, whatever is free then); rows handled wait for
	// their settle in a queue as long (and the group being settled), so
	// the claims of a batch go on while the previous batch is settled.
	// Each claim and settle costs its transaction's round trips and commit
	// whatever its size: a no-op backlog drained on PostgreSQL at
	// 0.88-0.89 of River's rate with batches of 100 and 1.00-1.17 with 256
	// (BenchmarkPostgresBesideRiver).
	BatchSize int
	// MaxAttempts is how many attempts an event gets before it is
	// dead-lettered (default 10).
	MaxAttempts int
	// Lease is how long a claimed row may stay 'processing' before another
	// claim takes it back (default 600 s). Reclaiming spends no attempt.
	Lease time.Duration
	// LedgerLease is how long a ledger claim protects a running handler
	// (default 1800 s).
	LedgerLease time.Duration
	// LedgerRetention is how long ledger rows are kept (default 30 days).
	LedgerRetention time.Duration
	// DoneRetention is how long done outbox rows are kept (default 7 days).
	// Keep it below LedgerRetention: a row's event id stops deduplicating
	// enqueues once the row is gone, and the ledger then still skips done
	// handlers.
	DoneRetention time.Duration
	// PollInterval is how often an idle worker looks for due rows (default
	// 1 s); Notify wakes it at once. Polling is the fallback whenever no
	// wake-up comes: an enqueue in another process on SQLite, or on
	// PostgreSQL behind a transaction-mode pooler, which carries no
	// notifications.
	PollInterval time.Duration
	// SweepInterval is how often retention is applied (default 10 min).
	SweepInterval time.Duration
	// ShutdownGrace is how long running handlers may go on after Run's
	// context ends before their context is cancelled (default 10 s).
	ShutdownGrace time.Duration
	// Now is the clock of every time written to the database (default
	// time.Now). Waiting uses real timers.
	Now func() time.Time
	// Logger receives the worker's logs (nil discards).
	Logger *slog.Logger
	// Observer receives counts for metrics (nil observes nothing).
	Observer *Observer
}

// Defaults of WorkerConfig.
const (
	DefaultConcurrency     = 16
	DefaultBatchSize       = 256
	DefaultLease           = 600 * time.Second
	DefaultLedgerRetention = 30 * 24 * time.Hour
	DefaultDoneRetention   = 7 * 24 * time.Hour
	DefaultPollInterval    = time.Second
	DefaultSweepInterval   = 10 * time.Minute
	// DefaultCountFoldInterval is the Sweeper's fold of appended counts.
	DefaultCountFoldInterval = 5 * time.Second
	DefaultShutdownGrace     = 10 * time.Second
	maxBatchSize             = 1000
	maxCompletionGroup       = 512
	// maxClaimWait is the longest the claimer waits for a whole batch of
	// free slots before it claims fewer rows.
	maxClaimWait = 50 * time.Millisecond
	// A settle waits for settleWait at most, and only while its group is
	// short of minSettleGroup jobs (Worker.complete).
	settleWait     = 20 * time.Millisecond
	minSettleGroup = 64
	settleTimeout  = 30 * time.Second
)

// def sets a zero duration to its default.
func def(d *time.Duration, v time.Duration) {
	if *d == 0 {
		*d = v
	}
}

func (c WorkerConfig) withDefaults() WorkerConfig {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	def(&c.Lease, DefaultLease)
	def(&c.LedgerLease, DefaultLedgerLease)
	def(&c.LedgerRetention, DefaultLedgerRetention)
	def(&c.DoneRetention, DefaultDoneRetention)
	def(&c.PollInterval, DefaultPollInterval)
	def(&c.SweepInterval, DefaultSweepInterval)
	def(&c.ShutdownGrace, DefaultShutdownGrace)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c WorkerConfig) validate() error {
	switch {
	case c.DB == nil:
		return errors.New("outbox: worker: DB is required")
	case c.Registry == nil:
		return errors.New("outbox: worker: Registry is required")
	case c.Concurrency < 1:
		return fmt.Errorf("outbox: worker: Concurrency must be at least 1, not %d", c.Concurrency)
	case c.BatchSize < 1 || c.BatchSize > maxBatchSize:
		return fmt.Errorf("outbox: worker: BatchSize must be 1 to %d, not %d", maxBatchSize, c.BatchSize)
	case c.Lease < 100*time.Millisecond:
		return fmt.Errorf("outbox: worker: Lease must be at least 100ms, not %s", c.Lease)
	case c.PollInterval < time.Millisecond:
		return fmt.Errorf("outbox: worker: PollInterval must be at least 1ms, not %s", c.PollInterval)
	case c.LedgerRetention < c.LedgerLease:
		return fmt.Errorf("outbox: worker: LedgerRetention (%s) must not be shorter than LedgerLease (%s)",
			c.LedgerRetention, c.LedgerLease)
	case c.DoneRetention < 0 || c.SweepInterval < 0 || c.ShutdownGrace < 0:
		return errors.New("outbox: worker: DoneRetention, SweepInterval and ShutdownGrace must not be negative")
	}
	return nil
}

// ErrRunning is returned by Run when the worker is already running.
var ErrRunning = errors.New("outbox: worker is already running")

// Worker is the db bus: it claims due rows of the outbox in batches, runs them
// through the Runner on a bounded pool, and settles the rows and their ledger
// claims in grouped transactions.
//
// Pipeline: one claimer claims up to BatchSize due rows and their ledger
// entries in one transaction; Concurrency goroutines run handlers, each event
// on its own, so a slow handler holds up nothing but its own slot; one
// completer commits finished events (ledger mark or release, row update) in
// groups, one transaction per group of whatever has finished. A row's slot
// is freed once it is handled, so the claimer claims the next rows while the
// completer settles these: on PostgreSQL the two transactions run side by
// side.
//
// Handlers see WithAttempt; Progress is a no-op on this bus (a row's lease
// and its ledger claims are fixed at claim time, so handlers must finish
// well within Lease and LedgerLease).
type Worker struct {
	cfg     WorkerConfig
	runner  *Runner
	queue   *Queue
	log     *slog.Logger
	wake    chan struct{}
	running atomic.Bool
}

// NewWorker returns a worker. It does not touch the database. Wire Notify to
// sqldb.DB.OnWrite: on PostgreSQL a DB opened with Listen runs its hooks for
// enqueues of other processes too.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r, err := NewRunner(RunnerConfig{
		DB: cfg.DB, Registry: cfg.Registry, MaxAttempts: cfg.MaxAttempts, LedgerLease: cfg.LedgerLease,
		Now: cfg.Now, Logger: cfg.Logger, Observer: cfg.Observer,
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: worker: %w", err)
	}
	q := NewQueue(cfg.DB, QueueOptions{Read: cfg.Read, Now: cfg.Now})
	q.tok = &r.tokens
	return &Worker{cfg: cfg, runner: r, queue: q, log: cfg.Logger, wake: make(chan struct{}, 1)}, nil
}

// Notify wakes an idle worker to look for due rows now. It never blocks;
// wire it to sqldb.DB.OnWrite so a local enqueue is handled at once.
func (w *Worker) Notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Sweep applies retention once: ledger rows older than LedgerRetention and
// done rows older than DoneRetention are deleted. Run sweeps every
// SweepInterval with a Sweeper beside its claims.
func (w *Worker) Sweep(ctx context.Context) (SweepResult, error) {
	now := w.cfg.Now()
	return w.queue.Sweep(ctx, now.Add(-w.cfg.LedgerRetention), now.Add(-w.cfg.DoneRetention))
}

// job is one claimed row on its way through the pool.
type job struct {
	row Row
	d   delivery
	res Result
	ops []ledgerOp
}

// handOut holds the claimed rows no handler has taken yet, by lane. A
// handler takes an interactive row before any bulk row, so that an Accept
// claimed after a bulk backlog's rows does not wait behind the ones in hand
// (the claim already orders the rows it takes; BulkShare of each claim
// still goes to bulk rows, and the claimer claims only when a batch's worth
// of rows has been handled, so bulk rows in hand keep moving).
type handOut struct {
	interactive, bulk chan *job
}

// newHandOut makes a handOut for up to n rows in each lane.
func newHandOut(n int) handOut {
	return handOut{interactive: make(chan *job, n), bulk: make(chan *job, n)}
}

// put hands j out in its lane.
func (h handOut) put(j *job) {
	if j.row.Event.Lane == LaneBulk {
		h.bulk <- j
		return
	}
	h.interactive <- j
}

// close ends the hand-out: next returns what is left, then false.
func (h handOut) close() {
	close(h.interactive)
	close(h.bulk)
}

// next waits for a row, interactive first; false when both lanes are
// closed and empty.
func (h handOut) next() (*job, bool) {
	interactive, bulk := h.interactive, h.bulk
	for interactive != nil || bulk != nil {
		select {
		case j, ok := <-interactive:
			if ok {
				return j, true
			}
			interactive = nil
			continue
		default:
		}
		select {
		case j, ok := <-interactive:
			if ok {
				return j, true
			}
			interactive = nil
		case j, ok := <-bulk:
			if ok {
				return j, true
			}
			bulk = nil
		}
	}
	return nil, false
}

// Run works until ctx ends, then stops claiming, lets running handlers go on
// for up to ShutdownGrace (then cancels their context), puts every claimed
// row that did not finish back to pending without spending an attempt, and
// returns nil once all its goroutines have ended. It returns an error only
// when it cannot start.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer w.running.Store(false)

	// The claimer holds up to two batches beside the handlers' rows, so
	// that it claims whole batches while a batch is still in hand.
	maxInflight := w.cfg.Concurrency + 2*w.cfg.BatchSize
	slots := make(chan struct{}, maxInflight) // one per claimed row not yet handled
	freed := make(chan struct{}, 1)
	jobs := newHandOut(maxInflight)
	results := make(chan *job, maxInflight)
	// Handlers run under hctx, which outlives ctx by ShutdownGrace.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()

	var pool sync.WaitGroup
	for range w.cfg.Concurrency {
		pool.Go(func() {
			for {
				j, ok := jobs.next()
				if !ok {
					return
				}
				if ctx.Err() != nil {
					j.res, j.ops = Result{Outcome: Released, Next: w.cfg.Now()}, releaseAll(&j.d)
				} else {
					j.res, j.ops = w.runner.execute(ctx, hctx, &j.d)
				}
				// Handed to the completer: the claimer may claim in its
				// place while it is settled.
				results <- j
				<-slots
				select {
				case freed <- struct{}{}:
				default:
				}
			}
		})
	}
	var done sync.WaitGroup
	done.Go(func() { w.complete(ctx, results, func() int { return len(slots) }) })
	stopGrace := make(chan struct{})
	done.Go(func() {
		select {
		case <-stopGrace:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(w.cfg.ShutdownGrace)
		defer t.Stop()
		select {
		case <-t.C:
			w.log.Warn("outbox: shutdown grace over; cancelling running handlers", "delay", w.cfg.ShutdownGrace)
			hcancel()
		case <-stopGrace:
		}
	})

	done.Go(func() {
		sweeper := Sweeper{Queue: w.queue, LedgerRetention: w.cfg.LedgerRetention, DoneRetention: w.cfg.DoneRetention,
			Interval: w.cfg.SweepInterval, Now: w.cfg.Now, Logger: w.log}
		_ = sweeper.Run(ctx)
	})
	w.claimLoop(ctx, jobs, slots, freed)
	jobs.close()
	pool.Wait()
	close(stopGrace)
	close(results)
	done.Wait()
	return nil
}

// claimLoop claims rows until ctx ends. It waits, without polling faster
// than PollInterval, when nothing is due or the pool is full.
func (w *Worker) claimLoop(ctx context.Context, jobs handOut, slots chan struct{}, freed <-chan struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	// wait sleeps up to d, or until ctx ends or ch has a signal.
	wait := func(d time.Duration, ch <-chan struct{}) {
		timer.Reset(d)
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-ch:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
	<-timer.C
	failures := 0
	var lastClaim time.Time
	for ctx.Err() == nil {
		if o := w.cfg.Observer; o != nil && o.Alive != nil {
			o.Alive()
		}
		// The claimer waits until a whole batch is free, which leaves the
		// handlers a batch and their own rows to run meanwhile, or until
		// maxClaimWait has passed since its last claim: claiming the few
		// rows each handler frees would spend a commit per handful of
		// rows, which a store with millisecond commits (PostgreSQL) cannot
		// afford (claiming when half a batch was free, from a pool one
		// batch deep, made a backlog's claims 60-100 rows and a no-op
		// drain on PostgreSQL 10-17 % slower), and waiting for a whole
		// batch of slow handlers would keep a row that just became due,
		// an Accept, waiting as long.
		free := cap(slots) - len(slots)
		if free == 0 {
			wait(w.cfg.PollInterval, freed)
			continue
		}
		if since := time.Since(lastClaim); free < w.cfg.BatchSize && since < maxClaimWait {
			wait(maxClaimWait-since, freed)
			continue
		}
		n := min(free, w.cfg.BatchSize)
		got, err := w.claim(ctx, n)
		lastClaim = time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			delay := min(w.cfg.PollInterval<<min(failures, 6), 30*time.Second)
			w.log.Warn("outbox: claim failed", "err", err, "delay", delay)
			wait(delay, nil)
			continue
		}
		failures = 0
		for _, j := range got {
			slots <- struct{}{}
			jobs.put(j)
		}
		if len(got) == n {
			continue // more may be due
		}
		wait(w.cfg.PollInterval, w.wake)
	}
}

// claim claims up to n due rows and their ledger entries in one transaction,
// with the queue's prepared statements.
func (w *Worker) claim(ctx context.Context, n int) ([]*job, error) {
	w.queue.prepare(ctx)
	var jobs []*job
	err := inCachedTx(ctx, w.cfg.DB, w.queue.cache, func(s *stmts) error {
		now := w.cfg.Now()
		token := w.runner.tokens.next(now)
		rows, err := claimRows(s, w.queue.sql, token, now, n, w.cfg.Lease)
		if err != nil {
			return err
		}
		// The ledger of the whole batch is claimed in a few statements.
		var (
			wants []ledgerWant
			of    []*job // the job of each want
		)
		for _, row := range rows {
			j := &job{row: row, d: delivery{ev: row.Event, attempt: row.Attempt()}}
			hs := w.cfg.Registry.Handlers(row.Event.Type)
			if row.Event.ID == "" || len(hs) == 0 {
				j.d.claims = noLedger(hs)
			} else {
				wants = append(wants, ledgerWant{eventID: row.Event.ID, hs: hs})
				of = append(of, j)
			}
			jobs = append(jobs, j)
		}
		if len(wants) == 0 {
			return nil
		}
		claims, readErrs, err := w.runner.claimLedgers(s, wants, token)
		if err != nil {
			return err
		}
		for i, j := range of {
			j.d.claims, j.d.claimErr = claims[i], readErrs[i]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	w.runner.obs.claimed(len(jobs))
	for _, j := range jobs {
		w.runner.observeClaims(ctx, j.row.Event.ID, j.d.claims)
	}
	return jobs, nil
}

// releaseAll releases every claim a delivery holds (it never ran).
func releaseAll(d *delivery) []ledgerOp {
	var ops []ledgerOp
	for _, c := range d.claims {
		if c.result == ClaimClaimed || c.result == ClaimTakenOver {
			ops = append(ops, ledgerOp{eventID: d.ev.ID, handler: c.h.Name, token: c.token})
		}
	}
	return ops
}

// complete commits finished jobs in groups until results is closed. A
// group is what finished while the last one was being settled; when that is
// fewer than minSettleGroup jobs and handlers still hold rows (held > 0), it
// waits for more until settleWait after its first job. Each settle is a
// transaction whose commit costs the same whatever its size (SQLite writes
// every page it touched to the WAL: the ledger's, the rows', their
// indexes'; PostgreSQL a round trip and a flush): a fan-out's deliveries,
// each finishing on its own, were settled 14 to a transaction (744 commits
// for 10,000 deliveries at the production defaults), 49 with the wait (204).
// Nothing waits on a settle: a row is marked only after its handlers ran,
// and the wait is short beside the lease that guards the row meanwhile.
func (w *Worker) complete(ctx context.Context, results <-chan *job, held func() int) {
	group := make([]*job, 0, maxCompletionGroup)
	timer := time.NewTimer(settleWait)
	timer.Stop()
	for j := range results {
		group = append(group[:0], j)
		timer.Reset(settleWait)
	fill:
		for len(group) < maxCompletionGroup {
			var ok bool
			select {
			case j, ok = <-results:
			default:
				if len(group) >= minSettleGroup || held() == 0 {
					break fill
				}
				select {
				case j, ok = <-results:
				case <-timer.C:
					break fill
				}
			}
			if !ok {
				break fill
			}
			group = append(group, j)
		}
		timer.Stop()
		w.settle(ctx, group)
	}
}

// settle writes the outcome of a group of jobs in one transaction, or one
// transaction per job when the group fails, with the queue's prepared
// statements. A job whose write fails keeps its row 'processing'; the lease
// brings it back.
func (w *Worker) settle(ctx context.Context, group []*job) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	w.queue.prepare(sctx)
	// The ledger marks of a group are written a statement per claim and
	// handler, and its rows' completions a statement per claim (settleRows),
	// in the order of their claims and ids so that consecutive rows are
	// completed as a range.
	slices.SortFunc(group, func(a, b *job) int {
		return cmp.Or(a.row.ClaimedAt.Compare(b.row.ClaimedAt), cmp.Compare(a.row.ID, b.row.ID))
	})
	all := func(s *stmts, group []*job) error {
		var ops []ledgerOp
		sts := make([]Settlement, len(group))
		for i, j := range group {
			ops = append(ops, j.ops...)
			sts[i] = Settlement{Row: j.row, Result: j.res}
		}
		if err := w.runner.settleLedgers(s, ops); err != nil {
			return err
		}
		n, err := settleRows(s, w.queue.sql, w.cfg.Now(), sts)
		if err != nil {
			return err
		}
		if n < len(group) {
			w.log.Info("outbox: rows were reclaimed before they were settled", "rows", len(group)-n,
				"first_event_id", group[0].row.Event.ID)
		}
		return nil
	}
	err := inCachedTx(sctx, w.cfg.DB, w.queue.cache, func(s *stmts) error { return all(s, group) })
	if err != nil && len(group) > 1 {
		for i, j := range group {
			if err := inCachedTx(sctx, w.cfg.DB, w.queue.cache, func(s *stmts) error { return all(s, group[i:i+1]) }); err != nil {
				w.log.Error("outbox: settle failed; the row returns after its lease", "event_id", j.row.Event.ID,
					"row", j.row.ID, "err", err)
			} else {
				w.runner.obs.settled(j.row.Event.Type, j.res.Outcome)
			}
		}
		return
	}
	if err != nil {
		w.log.Error("outbox: settle failed; the row returns after its lease", "event_id", group[0].row.Event.ID,
			"row", group[0].row.ID, "err", err)
		return
	}
	for _, j := range group {
		w.runner.obs.settled(j.row.Event.Type, j.res.Outcome)
	}
}
