package natsbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-ap/courier/outbox"
)

// Queue is what the relay needs of the outbox table: claim due rows with a
// lease, and settle the claimed rows: mark published rows done, put rows
// back without spending an attempt, and dead-letter a row the broker can
// never take. *outbox.Queue satisfies it.
type Queue interface {
	Claim(ctx context.Context, limit int, lease time.Duration) ([]outbox.Row, error)
	Settle(ctx context.Context, settlements ...outbox.Settlement) (int, error)
}

// idClaimer is a Queue that can claim rows by id in its write transaction
// and read them afterwards (*outbox.Queue can). The relay then reads the
// claimed rows on a goroutine of their own, so the one writer does nothing
// but change statuses.
type idClaimer interface {
	SettleAndClaimIDs(ctx context.Context, limit int, lease time.Duration, settlements ...outbox.Settlement) (outbox.Claimed, int, error)
	Load(ctx context.Context, c outbox.Claimed) ([]outbox.Row, error)
}

// claim is what one relay write claimed: the rows, or (with an idClaimer)
// their ids, to be loaded before publishing.
type claim struct {
	rows []outbox.Row
	ids  outbox.Claimed
}

func (c claim) size() int { return len(c.rows) + len(c.ids.IDs) }

// placeholders stands for the rows of c.ids not loaded: enough of each row
// (id and owner token) to settle it.
func (c claim) placeholders(loaded []outbox.Row) []outbox.Row {
	have := make(map[int64]bool, len(loaded))
	for _, r := range loaded {
		have[r.ID] = true
	}
	var out []outbox.Row
	for _, id := range c.ids.IDs {
		if !have[id] {
			out = append(out, outbox.Row{ID: id, Status: outbox.StatusProcessing, ClaimedAt: c.ids.Token})
		}
	}
	return out
}

// relayPipeline is how many published batches may wait for their acks while
// the next batch is claimed and published: the relay keeps up to
// relayPipeline+1 batches claimed and unsettled.
const relayPipeline = 3

// settleTimeout bounds the database work of one relay write (settling
// batches and claiming the next), including at shutdown when the run
// context has already ended.
const settleTimeout = 30 * time.Second

// batch is a claimed set of rows on its way to the broker. The claiming
// loop fills the first part; the ack waiter fills the outcome.
type batch struct {
	rows []outbox.Row
	// futs[i] is the pending ack of rows[i] (JetStream mode), nil when its
	// publish failed at once with errs[i].
	futs []jetstream.PubAckFuture
	errs []error
	// flushErr is the core-mode outcome of the whole batch.
	flushErr error
	sent     time.Time

	// The outcome: rows the broker holds, rows it can never take, rows to
	// publish again later and the last error that made them so.
	done    []outbox.Row
	dead    []outbox.Settlement
	retry   []outbox.Row
	lastErr error
	// unloaded are claimed rows that could not be read (a database
	// error): put back, due now, without touching the broker.
	unloaded []outbox.Row
}

// relayState is the relay's pause after broker failures. Only the claiming
// loop touches it.
type relayState struct {
	pause      time.Duration // current pause; zero while the broker answers
	pauseUntil time.Time
	failures   int
	noStream   bool // the last failure said no stream captures the subjects
}

// relayRun is one run of the relay. Three goroutines form a pipeline, so
// the database's work and the broker's overlap: the claiming loop owns the
// database side (each write settles the batches whose acks are in and
// claims the next batch, in one transaction), a publisher publishes claimed
// batches, and an ack waiter collects their acks and hands them back to the
// loop.
type relayRun struct {
	b  *Bus
	nc *nats.Conn
	js jetstream.JetStream
	st relayState

	claimed  chan claim  // claimed, to publish
	resolved chan *batch // acks in (or timed out), to settle
	inflight int         // batches claimed and not yet settled

	pending  []outbox.Settlement // outcomes of resolved batches, to write
	done     int                 // rows of pending that were published
	deferred int                 // rows of pending deferred for a broker failure

	failures     int       // writes that failed in a row
	failingSince time.Time // when the first of them failed
}

// relay runs the relay until ctx ends: claim, publish, and settle once the
// acks are in. On shutdown it settles what it published and releases the
// rest, so nothing stays claimed.
func (b *Bus) relay(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	window := relayPipeline + 1
	r := &relayRun{b: b, nc: nc, js: js,
		claimed: make(chan claim, window), resolved: make(chan *batch, window)}
	// The channels hold window batches each, and at most window batches
	// are in flight, so neither the loader, the publisher nor the waiter
	// ever blocks on a send.
	loaded := make(chan *batch, window)
	published := make(chan *batch, window)
	var wg sync.WaitGroup
	wg.Go(func() {
		// Reads the claimed rows (from the read pool), so that the next
		// batch is read while this one is published.
		defer close(loaded)
		for c := range r.claimed {
			rows, unloaded := b.load(ctx, c)
			loaded <- &batch{rows: rows, unloaded: unloaded}
		}
	})
	wg.Go(func() {
		defer close(published)
		for bt := range loaded {
			switch {
			case len(bt.rows) == 0:
			case js != nil:
				b.publishJetStream(js, bt)
			default:
				b.publishCore(nc, bt)
			}
			published <- bt
		}
	})
	wg.Go(func() {
		for bt := range published {
			b.awaitAcks(ctx, bt)
			r.resolved <- bt
		}
	})
	defer func() {
		close(r.claimed)
		r.drain(ctx)
		wg.Wait()
	}()

	for {
		if ctx.Err() != nil {
			return nil
		}
		if b.cfg.Beat != nil {
			b.cfg.Beat()
		}
		r.collect(ctx)
		limit := 0
		if r.inflight < window && r.canClaim(ctx) {
			limit = b.cfg.BatchSize
		}
		if r.failures > 0 && len(r.pending) > 0 {
			limit = 0 // after a failed write, settle alone first
		}
		wrote := false
		var c claim
		if limit > 0 || len(r.pending) > 0 {
			var err error
			if c, err = r.write(ctx, limit); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				r.wait(ctx, b.cfg.PollInterval, false)
				continue
			}
			wrote = true
		}
		switch {
		case c.size() > 0:
			if ctx.Err() != nil {
				// Claimed as the run ended: put them back, due now.
				rows := append(c.rows, c.placeholders(nil)...)
				r.pending = append(r.pending, outbox.SettleAll(rows, outbox.Result{Outcome: outbox.Released, Next: b.cfg.Now()})...)
				return nil
			}
			r.inflight++
			r.claimed <- c
		case wrote && limit == 0:
			// Only settled: look again at once.
		case limit > 0:
			// Nothing was due: wait for new rows.
			r.wait(ctx, b.cfg.PollInterval, true)
		default:
			// Pausing, or every batch in flight: wait for one to resolve.
			d := r.st.remaining()
			if d <= 0 {
				d = b.cfg.PauseMax
			}
			r.wait(ctx, d, false)
		}
	}
}

// canClaim reports whether the relay may claim now: it is not pausing after
// broker failures and the connection is up. After a pause caused by a
// missing stream it sets the stream up again first.
func (r *relayRun) canClaim(ctx context.Context) bool {
	if r.st.remaining() > 0 {
		return false
	}
	if r.js != nil && r.st.noStream {
		r.st.noStream = false
		// The stream was deleted under us: set it up again.
		if err := r.b.reconcile(ctx, r.js); err != nil {
			r.b.log.WarnContext(ctx, "relay could not set up the stream again", "stream", r.b.cfg.Stream, "err", err)
		}
	}
	if st := r.nc.Status(); st != nats.CONNECTED {
		// Publishing now would only fill the reconnect buffer.
		r.b.pauseRelay(ctx, &r.st, 0, fmt.Errorf("connection is %s", st))
		return false
	}
	return true
}

// wait blocks until a batch resolves, d passes, the connection comes back,
// or (when idle) Notify is called, or ctx ends. Every wait is bounded by
// PauseMax so the loop beats.
func (r *relayRun) wait(ctx context.Context, d time.Duration, idle bool) {
	var resolved <-chan *batch
	if r.inflight > 0 {
		resolved = r.resolved
	}
	var wake <-chan struct{}
	if idle {
		wake = r.b.wake
	}
	t := time.NewTimer(min(d, r.b.cfg.PauseMax))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case bt := <-resolved:
		r.absorb(ctx, bt)
	case <-wake:
	case <-r.b.backCh():
	case <-t.C:
	}
}

// collect takes every resolved batch without waiting.
func (r *relayRun) collect(ctx context.Context) {
	for r.inflight > 0 {
		select {
		case bt := <-r.resolved:
			r.absorb(ctx, bt)
		default:
			return
		}
	}
}

// absorb turns a resolved batch into settlements to write: done for the
// acknowledged rows, dead for those the broker can never take, and for the
// rest a deferral with the relay's growing pause (a release, due now, when
// the run is ending).
func (r *relayRun) absorb(ctx context.Context, bt *batch) {
	r.inflight--
	if len(bt.unloaded) > 0 {
		r.pending = append(r.pending, outbox.SettleAll(bt.unloaded, outbox.Result{Outcome: outbox.Released, Next: r.b.cfg.Now()})...)
	}
	for _, row := range bt.done {
		r.pending = append(r.pending, outbox.Settlement{Row: row, Result: outbox.Result{Outcome: outbox.Succeeded}})
	}
	r.done += len(bt.done)
	r.pending = append(r.pending, bt.dead...)
	if len(bt.retry) == 0 {
		if len(bt.done) > 0 {
			r.b.resumeRelay(ctx, &r.st)
		}
		return
	}
	if ctx.Err() != nil {
		r.pending = append(r.pending, outbox.SettleAll(bt.retry, outbox.Result{Outcome: outbox.Released, Next: r.b.cfg.Now()})...)
		return
	}
	if errors.Is(bt.lastErr, jetstream.ErrNoStreamResponse) || errors.Is(bt.lastErr, jetstream.ErrStreamNotFound) {
		r.st.noStream = true
	}
	pause := r.b.pauseRelay(ctx, &r.st, len(bt.retry), bt.lastErr)
	r.pending = append(r.pending, outbox.SettleAll(bt.retry, outbox.Result{Outcome: outbox.Deferred, Next: r.b.cfg.Now().Add(pause)})...)
	r.deferred += len(bt.retry)
}

// write settles the pending outcomes and claims up to limit rows, in one
// transaction when the queue can. A failed write keeps the outcomes for the
// next one (the database may be locked by another process for a while);
// once they have failed for a lease they are dropped, since another relay
// may have claimed their rows again by then, and the rows come back when
// their lease expires (the broker drops the repeated publishes).
func (r *relayRun) write(ctx context.Context, limit int) (claim, error) {
	wctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	c, err := r.settleAndClaim(wctx, limit)
	if err == nil {
		if r.failures > 0 {
			r.b.log.InfoContext(ctx, "relay writes again", "failures", r.failures)
		}
		r.failures, r.failingSince = 0, time.Time{}
		return c, nil
	}
	if ctx.Err() != nil {
		return claim{}, err // shutting down: drain writes what is pending
	}
	now := r.b.cfg.Now()
	if r.failures == 0 {
		r.failingSince = now
	}
	r.failures++
	if len(r.pending) > 0 && now.Sub(r.failingSince) >= r.b.cfg.Lease {
		r.b.log.WarnContext(ctx, "relay could not settle rows within their lease; their lease will expire",
			"rows", len(r.pending), "failures", r.failures, "err", err)
		r.reset()
		r.failures, r.failingSince = 0, time.Time{}
		return claim{}, err
	}
	r.b.log.Log(ctx, failureLevel(r.failures), "relay could not settle and claim rows; retrying", "rows", len(r.pending),
		"failures", r.failures, "err", err)
	return claim{}, err
}

// settleAndClaim is one relay write: the pending outcomes, then the claim.
// It clears the pending outcomes once they are written.
func (r *relayRun) settleAndClaim(ctx context.Context, limit int) (claim, error) {
	q := r.b.queue
	if ic, ok := q.(idClaimer); ok {
		c, _, err := ic.SettleAndClaimIDs(ctx, limit, r.b.cfg.Lease, r.pending...)
		if err != nil {
			return claim{}, err
		}
		r.settled()
		r.lag(c.OldestDue, limit) // zero when nothing was due
		return claim{ids: c}, nil
	}
	if len(r.pending) > 0 {
		if _, err := q.Settle(ctx, r.pending...); err != nil {
			return claim{}, err
		}
		r.settled()
	}
	if limit <= 0 {
		return claim{}, nil
	}
	rows, err := q.Claim(ctx, limit, r.b.cfg.Lease)
	if err == nil {
		r.lag(oldestDue(rows), limit)
	}
	return claim{rows: rows}, err
}

// oldestDue is the earliest NextAttemptAt of rows (zero for none).
func oldestDue(rows []outbox.Row) time.Time {
	var t time.Time
	for _, row := range rows {
		if t.IsZero() || row.NextAttemptAt.Before(t) {
			t = row.NextAttemptAt
		}
	}
	return t
}

// load reads the rows of c that are not read yet (an idClaimer's claim) and
// returns them with placeholders for those it could not read. A load that
// fails is logged; its rows go back, due now.
func (b *Bus) load(ctx context.Context, c claim) (rows, unloaded []outbox.Row) {
	if len(c.ids.IDs) == 0 {
		return c.rows, nil
	}
	ic := b.queue.(idClaimer) // only an idClaimer's claim has ids
	// Rows claimed just before shutdown are still published, so the load
	// outlives the run's context (bounded on its own).
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	rows, err := ic.Load(lctx, c.ids)
	if err != nil {
		b.log.WarnContext(ctx, "relay could not read the rows it claimed; putting them back",
			"rows", len(c.ids.IDs), "err", err)
		return nil, c.placeholders(nil)
	}
	if len(rows) < len(c.ids.IDs) {
		// Not held by this claim any more: settling them changes nothing.
		return rows, c.placeholders(rows)
	}
	return rows, nil
}

// lag reports how long the oldest of the rows just claimed had been due
// (oldest is its due time); a claim that found nothing due (zero oldest)
// reports 0. A turn that claimed nothing because the pipeline was full
// (limit 0) reports nothing.
func (r *relayRun) lag(oldest time.Time, limit int) {
	g := r.b.cfg.Gauges
	if g == nil || limit <= 0 {
		return
	}
	var d time.Duration
	if !oldest.IsZero() {
		d = max(0, r.b.cfg.Now().Sub(oldest))
	}
	g.SetLag(d)
}

// settled counts the written outcomes and clears them.
func (r *relayRun) settled() {
	r.b.metrics.published(r.done)
	r.b.metrics.deferred(r.deferred)
	r.reset()
}

func (r *relayRun) reset() {
	clear(r.pending) // drop the rows' payloads
	r.pending, r.done, r.deferred = r.pending[:0], 0, 0
}

// drain ends a run: it waits for the batches in flight (each bounded by its
// ack deadline), and settles them and whatever else is pending, with its own
// deadline since ctx has ended.
func (r *relayRun) drain(ctx context.Context) {
	for r.inflight > 0 {
		r.absorb(ctx, <-r.resolved)
	}
	if len(r.pending) == 0 {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if _, err := r.settleAndClaim(dctx, 0); err != nil {
		r.b.log.WarnContext(ctx, "relay could not settle rows at shutdown; their lease will expire",
			"rows", len(r.pending), "err", err)
	}
}

// publishJetStream publishes the batch's rows asynchronously, each with its
// Nats-Msg-Id.
func (b *Bus) publishJetStream(js jetstream.JetStream, bt *batch) {
	bt.futs, bt.errs, bt.sent = make([]jetstream.PubAckFuture, len(bt.rows)), make([]error, len(bt.rows)), time.Now()
	for i, r := range bt.rows {
		m := encodeRow(b.cfg.SubjectPrefix, r)
		f, err := js.PublishMsgAsync(m,
			jetstream.WithMsgID(rowMsgID(r)),
			jetstream.WithExpectStream(b.cfg.Stream),
			jetstream.WithStallWait(b.cfg.PublishTimeout))
		bt.futs[i], bt.errs[i] = f, err
	}
}

// publishCore publishes the batch's rows with plain NATS and flushes: the
// flush's round trip proves the server read them, which is all core NATS
// can say.
func (b *Bus) publishCore(nc *nats.Conn, bt *batch) {
	bt.errs, bt.sent = make([]error, len(bt.rows)), time.Now()
	for i, r := range bt.rows {
		m := encodeRow(b.cfg.SubjectPrefix, r)
		m.Header.Set(jetstream.MsgIDHeader, rowMsgID(r))
		bt.errs[i] = nc.PublishMsg(m)
	}
	bt.flushErr = nc.FlushTimeout(b.cfg.PublishTimeout)
}

// awaitAcks waits for the batch's acks (bounded by PublishTimeout) and sorts
// its rows: acknowledged, unpublishable (logged here, as the decision is
// taken), and to be published again.
func (b *Bus) awaitAcks(ctx context.Context, bt *batch) {
	// One deadline for the whole batch; once it passed, acks not yet in
	// are unknown outcomes.
	wctx, wcancel := context.WithDeadline(context.Background(), bt.sent.Add(b.cfg.PublishTimeout+time.Second))
	defer wcancel()
	// The acknowledged rows are compacted in place: done[k] is written
	// only after rows[k..] were read.
	bt.done = bt.rows[:0]
	for i, r := range bt.rows {
		err := bt.errs[i]
		if err == nil && bt.futs != nil {
			err = waitAck(wctx, bt.futs[i])
		}
		if err == nil && bt.futs == nil {
			err = bt.flushErr
		}
		switch {
		case err == nil:
			bt.done = append(bt.done, r)
		case unpublishable(err):
			bt.dead = append(bt.dead, outbox.Settlement{Row: r, Result: outbox.Result{
				Outcome: outbox.Dead, Err: fmt.Errorf("natsbus: publish: %w", err)}})
			b.log.ErrorContext(ctx, "event can never be published; dead-lettered", "event_id", r.Event.ID,
				"type", r.Event.Type, "err", err)
		default:
			bt.retry = append(bt.retry, r)
			bt.lastErr = err
		}
	}
	bt.rows, bt.futs, bt.errs = nil, nil, nil
}

// waitAck waits for one publish ack. A duplicate ack counts as acknowledged:
// the broker already holds the message.
func waitAck(ctx context.Context, f jetstream.PubAckFuture) error {
	select { // an answer already in wins over a passed deadline
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	default:
	}
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-ctx.Done():
		return jetstream.ErrAsyncPublishTimeout
	}
}

// unpublishable reports whether a publish error can never go away by
// retrying: the message is larger than the server or stream accepts.
func unpublishable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return true
	}
	return errors.Is(err, nats.ErrMaxPayload)
}

// remaining is how long the relay must still pause.
func (s *relayState) remaining() time.Duration {
	if s.pause == 0 {
		return 0
	}
	return time.Until(s.pauseUntil)
}

// pauseRelay grows the relay's pause after a broker failure and returns it.
// rows is how many rows were deferred (for the log).
func (b *Bus) pauseRelay(ctx context.Context, s *relayState, rows int, err error) time.Duration {
	if s.pause == 0 {
		s.pause = b.cfg.PauseMin
	} else {
		s.pause = min(s.pause*2, b.cfg.PauseMax)
	}
	s.pauseUntil = time.Now().Add(s.pause)
	if b.cfg.Gauges != nil {
		b.cfg.Gauges.SetPaused(true)
	}
	s.failures++
	b.log.Log(ctx, failureLevel(s.failures), "nats unreachable; relay paused, rows deferred without spending an attempt",
		"delay", s.pause, "rows", rows, "failures", s.failures, "err", err)
	return s.pause
}

// resumeRelay ends a pause after a batch went through.
func (b *Bus) resumeRelay(ctx context.Context, s *relayState) {
	if s.failures > 0 {
		b.log.InfoContext(ctx, "nats reachable again; relay resumed", "failures", s.failures)
	}
	s.pause, s.failures = 0, 0
	if b.cfg.Gauges != nil {
		b.cfg.Gauges.SetPaused(false)
	}
}
