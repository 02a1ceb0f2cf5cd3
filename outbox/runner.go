package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Outcome is what became of one delivery of an event, as a bus must apply it.
type Outcome uint8

// The outcomes of a delivery.
const (
	// Succeeded: every handler is done. The db bus marks the row done; the
	// JetStream consumer acks.
	Succeeded Outcome = iota + 1
	// Failed: at least one handler failed; an attempt is spent and the event
	// must run again at Result.Next. The db bus reschedules the row; the
	// JetStream consumer naks with delay Result.Next - now.
	Failed
	// Deferred: the event must run again at Result.Next without spending an
	// attempt (a handler asked for it, or a fresh ledger claim is held by
	// another delivery until then).
	Deferred
	// Dead: the event will never succeed (a permanent error, or the last
	// allowed attempt failed). The db bus dead-letters the row with
	// Result.Err; the JetStream consumer terminates the message.
	Dead
	// Released: the delivery was interrupted by shutdown (its context ended
	// while a handler ran). Nothing is spent; the event runs again as soon as
	// possible.
	Released
)

func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Deferred:
		return "deferred"
	case Dead:
		return "dead"
	case Released:
		return "released"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Result is the one verdict of a delivery of an event to all its handlers.
type Result struct {
	Outcome Outcome
	// Next is when to run the event again (Failed, Deferred; for Released
	// the time the delivery ended).
	Next time.Time
	// Err is the failure: for Failed the errors of the failed handlers, for
	// Dead the error the event is dead-lettered with. Nil otherwise.
	Err error
	// Reason says why a Deferred event waits.
	Reason string
}

// Ledger claim results, as counted by Observer.LedgerClaimed.
const (
	ClaimClaimed       = "claimed"        // a new in_progress row
	ClaimTakenOver     = "taken_over"     // an expired claim of a dead delivery was taken over
	ClaimHeldElsewhere = "held_elsewhere" // a fresh claim is held by another delivery
	ClaimAlreadyDone   = "already_done"   // the handler already succeeded for this event
)

// Per-handler outcomes, as counted by Observer.Handled.
const (
	HandledSuccess       = "success"
	HandledFailure       = "failure"
	HandledPermanent     = "permanent"
	HandledDeferred      = "deferred"
	HandledSkippedDone   = "skipped_done"
	HandledHeldElsewhere = "held_elsewhere"
	HandledLedgerError   = "ledger_error"
	HandledInterrupted   = "interrupted"
)

// Observer receives what the outbox counts, for metrics. Every field is
// optional and a nil *Observer observes nothing. The functions are called
// from many goroutines and must not block.
type Observer struct {
	// Handled is called once per handler and delivery with one of the
	// Handled* outcomes; d is the handler's run time (zero when it did not
	// run).
	Handled func(eventType, handler, outcome string, d time.Duration)
	// LedgerClaimed is called once per ledger claim with one of the Claim*
	// results.
	LedgerClaimed func(handler, result string)
	// Settled is called once per delivery with its outcome.
	Settled func(eventType string, outcome Outcome)
	// DeadLettered is called when an event is dead-lettered.
	DeadLettered func(eventType string)
	// Claimed is called by the db worker with the number of rows it claimed
	// in one batch (including reclaimed ones).
	Claimed func(n int)
	// Enqueued is called for every event a handler inserts into the outbox
	// (a fan-out's children, an Accept), through WithEnqueueObserver.
	Enqueued func(eventType string, n int)
	// Alive is called by the db worker on every turn of its claim loop,
	// busy or idle, so a liveness check can tell the loop still turns.
	Alive func()
}

func (o *Observer) handled(typ, h, outcome string, d time.Duration) {
	if o != nil && o.Handled != nil {
		o.Handled(typ, h, outcome, d)
	}
}

func (o *Observer) ledgerClaimed(h, result string) {
	if o != nil && o.LedgerClaimed != nil {
		o.LedgerClaimed(h, result)
	}
}

func (o *Observer) settled(typ string, out Outcome) {
	if o == nil {
		return
	}
	if o.Settled != nil {
		o.Settled(typ, out)
	}
	if out == Dead && o.DeadLettered != nil {
		o.DeadLettered(typ)
	}
}

func (o *Observer) claimed(n int) {
	if o != nil && o.Claimed != nil && n > 0 {
		o.Claimed(n)
	}
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// DB is the writer, sqldb.DB.Write: on SQLite a *sql.DB whose
	// transactions begin with a write lock (BEGIN IMMEDIATE), on PostgreSQL
	// the pool (the ledger's writes are conditional, so claims that run side
	// by side never both win). Required.
	DB *sql.DB
	// Registry holds the handlers. Required.
	Registry *Registry
	// MaxAttempts is how many attempts an event gets before it is
	// dead-lettered (default 10; EVENT_QUEUE_MAX_ATTEMPTS).
	MaxAttempts int
	// LedgerLease is how long a ledger claim protects a running handler;
	// an older claim is taken over (default 1800 s). Handlers must finish
	// well within it.
	LedgerLease time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives the runner's logs (nil discards).
	Logger *slog.Logger
	// Observer receives counts for metrics (nil observes nothing).
	Observer *Observer
}

// MinDefer is the shortest deferral: an event deferred to a time sooner than
// MinDefer from now (or in the past) waits MinDefer, so a handler that keeps
// deferring cannot make a bus spin without spending attempts.
const MinDefer = time.Second

// Defaults of RunnerConfig and WorkerConfig.
const (
	DefaultMaxAttempts = 10
	DefaultLedgerLease = 1800 * time.Second
)

func (c RunnerConfig) withDefaults() RunnerConfig {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.LedgerLease == 0 {
		c.LedgerLease = DefaultLedgerLease
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c RunnerConfig) validate() error {
	switch {
	case c.DB == nil:
		return errors.New("outbox: runner: DB is required")
	case c.Registry == nil:
		return errors.New("outbox: runner: Registry is required")
	case c.MaxAttempts < 1:
		return fmt.Errorf("outbox: runner: MaxAttempts must be at least 1, not %d", c.MaxAttempts)
	case c.LedgerLease < time.Second:
		return fmt.Errorf("outbox: runner: LedgerLease must be at least 1s, not %s", c.LedgerLease)
	}
	return nil
}

// Runner runs one event through all its handlers under the processed-events
// ledger. Both buses use it: the db worker for each claimed row, the JetStream
// consumer for each message. It is safe for concurrent use; create one per
// process and database, because it issues the ledger's owner tokens (claim
// times in milliseconds, strictly increasing within the Runner, so two claims
// in the same millisecond never share a token).
type Runner struct {
	cfg    RunnerConfig
	log    *slog.Logger
	obs    *Observer
	tokens tokenClock
	commit *committer
}

// NewRunner returns a Runner. It does not touch the database.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	commit, err := newCommitter(cfg.DB, 256)
	if err != nil {
		return nil, err
	}
	return &Runner{
		cfg:    cfg,
		log:    cfg.Logger,
		obs:    cfg.Observer,
		commit: commit,
	}, nil
}

// MaxAttempts is the configured number of attempts before dead-lettering
// (the JetStream consumer's max_deliver).
func (r *Runner) MaxAttempts() int { return r.cfg.MaxAttempts }

// Run delivers ev to every handler registered for its type, as its
// attempt-th (1-based) delivery, and returns the one verdict the bus applies.
//
// For each handler it first claims (ev.ID, handler) in the ledger, in one
// write transaction shared with concurrent callers: a handler already done is
// skipped, a fresh claim held by another delivery defers the event to that
// claim's expiry, an expired claim is taken over. The claimed handlers run one
// after another with ctx carrying WithAttempt(attempt) (and any Progress
// function ctx already carries, such as a JetStream InProgress). Then the
// ledger is settled in one transaction: success marks the claim done, anything
// else releases it, both conditioned on the claim's owner token. An event
// without an id (a row from a foreign writer) runs every handler without the
// ledger.
//
// A ledger read error skips the handlers and is a Failed delivery. Run never
// panics on a panicking handler: the panic is a failure. When ctx ends while a
// handler runs and the handler fails, the result is Released. Run never
// returns an error of its own: when a ledger write fails after the handlers
// ran, the claims are left to expire and the handlers' verdict is returned.
func (r *Runner) Run(ctx context.Context, ev Event, attempt int) Result {
	hs := r.cfg.Registry.Handlers(ev.Type)
	d := delivery{ev: ev, attempt: attempt}
	if ev.ID == "" || len(hs) == 0 {
		d.claims = noLedger(hs)
	} else {
		token := r.tokens.next(r.cfg.Now())
		err := r.commit.Do(context.WithoutCancel(ctx), func(s *stmts) error {
			var err error
			d.claims, d.claimErr, err = r.claimLedger(s, ev.ID, hs, token)
			return err
		})
		if err != nil {
			d.claims, d.claimErr = nil, err
		}
		r.observeClaims(ctx, ev.ID, d.claims)
	}
	res, ops := r.execute(ctx, ctx, &d)
	if len(ops) > 0 {
		if err := r.commit.Do(context.WithoutCancel(ctx), func(s *stmts) error {
			return r.settleLedger(s, ops)
		}); err != nil {
			r.log.WarnContext(ctx, "outbox: ledger settle failed; claims will expire",
				"event_id", ev.ID, "err", err)
		}
	}
	r.obs.settled(ev.Type, res.Outcome)
	return res
}

// delivery is one event on its way through the runner.
type delivery struct {
	ev       Event
	attempt  int
	claims   []claim
	claimErr error
}

// claim is one handler's ledger claim for an event.
type claim struct {
	h      NamedHandler
	result string    // Claim*; empty when the ledger is not used
	token  int64     // owner token of a claimed/taken-over claim
	until  time.Time // expiry of a claim held elsewhere
	from   int64     // owner token of the claim that was taken over
}

func noLedger(hs []NamedHandler) []claim {
	cs := make([]claim, len(hs))
	for i, h := range hs {
		cs[i] = claim{h: h}
	}
	return cs
}

// ledgerOp settles one claim: done marks it done, otherwise it is released.
type ledgerOp struct {
	eventID string
	handler string
	token   int64
	done    bool
}

// execute runs the claimed handlers of d under hctx (the context handlers
// see) and combines their outcomes. ctx is only for logging.
func (r *Runner) execute(ctx, hctx context.Context, d *delivery) (Result, []ledgerOp) {
	ev := d.ev
	now := r.cfg.Now()
	if d.claimErr != nil {
		for _, h := range r.cfg.Registry.Handlers(ev.Type) {
			r.obs.handled(ev.Type, h.Name, HandledLedgerError, 0)
		}
		r.log.WarnContext(ctx, "outbox: ledger read failed; handlers skipped",
			"event_id", ev.ID, "attempt", d.attempt, "err", d.claimErr)
		// Claims written before the read failed are released.
		return r.fail(ctx, ev, d.attempt, now, fmt.Errorf("outbox: ledger: %w", d.claimErr), time.Time{}), releaseAll(d)
	}
	if len(d.claims) == 0 {
		r.log.DebugContext(ctx, "outbox: no handler for event type", "event_id", ev.ID, "type", ev.Type)
	}
	hctx = WithAttempt(hctx, d.attempt)
	if o := r.obs; o != nil && o.Enqueued != nil {
		hctx = WithEnqueueObserver(hctx, o.Enqueued)
	}
	var (
		ops         []ledgerOp
		failures    []error
		permanent   error
		deferUntil  time.Time
		deferReason string
		retryAfter  time.Duration
		interrupted bool
	)
	deferTo := func(t time.Time, reason string) {
		if t.After(deferUntil) {
			deferUntil, deferReason = t, reason
		}
	}
	for _, c := range d.claims {
		name := c.h.Name
		switch c.result {
		case ClaimAlreadyDone:
			r.obs.handled(ev.Type, name, HandledSkippedDone, 0)
			continue
		case ClaimHeldElsewhere:
			r.obs.handled(ev.Type, name, HandledHeldElsewhere, 0)
			deferTo(c.until, "ledger claim of "+name+" held elsewhere")
			continue
		}
		if hctx.Err() != nil { // shutting down: do not start another handler
			r.obs.handled(ev.Type, name, HandledInterrupted, 0)
			interrupted = true
			if c.result != "" {
				ops = append(ops, ledgerOp{eventID: ev.ID, handler: name, token: c.token})
			}
			continue
		}
		start := time.Now()
		err := call(hctx, c.h.Handler, ev)
		took := time.Since(start)
		ledgered := c.result != ""
		if err == nil {
			r.obs.handled(ev.Type, name, HandledSuccess, took)
			if ledgered {
				ops = append(ops, ledgerOp{eventID: ev.ID, handler: name, token: c.token, done: true})
			}
			continue
		}
		if ledgered {
			ops = append(ops, ledgerOp{eventID: ev.ID, handler: name, token: c.token})
		}
		var perm *PermanentError
		var def *DeferError
		var ra *RetryAfterError
		switch {
		case errors.As(err, &perm):
			r.obs.handled(ev.Type, name, HandledPermanent, took)
			if permanent == nil {
				permanent = fmt.Errorf("%s: %w", name, err)
			}
		case errors.As(err, &def):
			r.obs.handled(ev.Type, name, HandledDeferred, took)
			deferTo(def.Until, name+": "+def.Reason)
		case hctx.Err() != nil:
			r.obs.handled(ev.Type, name, HandledInterrupted, took)
			interrupted = true
		default:
			r.obs.handled(ev.Type, name, HandledFailure, took)
			failures = append(failures, fmt.Errorf("%s: %w", name, err))
			if errors.As(err, &ra) && ra.After > retryAfter {
				retryAfter = ra.After
			}
			r.log.InfoContext(ctx, "outbox: handler failed", "event_id", ev.ID, "handler", name,
				"attempt", d.attempt, "err", err)
		}
	}
	now = r.cfg.Now()
	switch {
	case permanent != nil:
		r.log.ErrorContext(ctx, "outbox: event dead-lettered: permanent error", "event_id", ev.ID,
			"type", ev.Type, "attempt", d.attempt, "err", permanent)
		return Result{Outcome: Dead, Err: permanent}, ops
	case len(failures) > 0:
		next := time.Time{}
		if retryAfter > 0 {
			next = now.Add(retryAfter)
		}
		if deferUntil.After(next) {
			next = deferUntil
		}
		return r.fail(ctx, ev, d.attempt, now, errors.Join(failures...), next), ops
	case interrupted:
		return Result{Outcome: Released, Next: now}, ops
	case !deferUntil.IsZero():
		if floor := now.Add(MinDefer); deferUntil.Before(floor) {
			deferUntil = floor // a deferral into the past must not spin
		}
		return Result{Outcome: Deferred, Next: deferUntil, Reason: deferReason}, ops
	}
	return Result{Outcome: Succeeded}, ops
}

// fail turns a failed attempt into Failed, or Dead on the last attempt.
// notBefore is a lower bound on the next attempt (Retry-After, a deferral).
func (r *Runner) fail(ctx context.Context, ev Event, attempt int, now time.Time, err error, notBefore time.Time) Result {
	if attempt >= r.cfg.MaxAttempts {
		r.log.ErrorContext(ctx, "outbox: event dead-lettered: attempts exhausted", "event_id", ev.ID,
			"type", ev.Type, "attempt", attempt, "err", err)
		return Result{Outcome: Dead, Err: err}
	}
	next := now.Add(Backoff(attempt))
	if notBefore.After(next) {
		next = notBefore
	}
	return Result{Outcome: Failed, Next: next, Err: err}
}

// call runs h, turning a panic into an error.
func call(ctx context.Context, h Handler, ev Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("outbox: handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return h(ctx, ev)
}

// tokenClock issues owner tokens: Unix milliseconds from now, strictly
// increasing, so that two claims made in the same millisecond differ. Under a
// sustained rate of more than one claim transaction per millisecond the
// tokens run ahead of the clock by a few milliseconds, which only delays a
// takeover by as much.
type tokenClock struct {
	mu   sync.Mutex
	last int64
}

func (t *tokenClock) next(now time.Time) int64 {
	ms := now.UnixMilli()
	t.mu.Lock()
	defer t.mu.Unlock()
	if ms <= t.last {
		ms = t.last + 1
	}
	t.last = ms
	return ms
}
