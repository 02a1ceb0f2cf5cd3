package natsbus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-ap/courier/outbox"
)

// maxReasonLen bounds the reason sent with Term (it travels in the
// terminated advisory and is recorded).
const maxReasonLen = 256

// consume runs the JetStream consumer until ctx ends: Concurrency workers
// take messages from one pull iterator and run them through the Runner.
// When the iterator fails (the consumer was deleted, the connection closed)
// it is recreated after a growing pause.
func (b *Bus) consume(ctx context.Context, js jetstream.JetStream) error {
	hctx, stop := b.handlerContext(ctx)
	work := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range b.cfg.Concurrency {
		wg.Go(func() {
			for m := range work {
				b.handleMsg(hctx, m)
			}
		})
	}
	defer func() {
		close(work)
		wg.Wait()
		stop()
	}()
	return b.restart(ctx, func(ctx context.Context) error { return b.pull(ctx, js, work) },
		"jetstream consumer stopped; restarting", "stream", b.cfg.Stream, "consumer", b.cfg.Consumer)
}

// restart runs fn until ctx ends: each time fn returns before then, msg is
// logged (with attrs, the pause and fn's error) and fn runs again after a
// pause that grows from PauseMin to PauseMax, and starts again from PauseMin
// once a run lasted longer than PauseMax.
func (b *Bus) restart(ctx context.Context, fn func(context.Context) error, msg string, attrs ...any) error {
	log := b.log.With(attrs...)
	pause := b.cfg.PauseMin
	for {
		started := time.Now()
		err := fn(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(started) > b.cfg.PauseMax {
			pause = b.cfg.PauseMin // it ran a good while: a fresh failure
		}
		log.WarnContext(ctx, msg, "delay", pause, "err", err)
		if !b.sleep(ctx, pause) {
			return nil
		}
		pause = min(pause*2, b.cfg.PauseMax)
	}
}

// handlerContext returns the context handlers run under: it outlives ctx by
// ShutdownGrace, so running handlers may finish at shutdown. stop releases
// it once the handlers have returned.
func (b *Bus) handlerContext(ctx context.Context) (hctx context.Context, stop func()) {
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var timer *time.Timer
	unregister := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(b.cfg.ShutdownGrace, cancel)
	})
	return hctx, func() {
		unregister()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// pull feeds work from one Messages iterator until ctx ends or the
// iterator fails. At shutdown the messages the client had buffered are
// nak'ed so another worker gets them at once instead of after AckWait.
func (b *Bus) pull(ctx context.Context, js jetstream.JetStream, work chan<- jetstream.Msg) error {
	it, err := b.messages(ctx, js, "consumer", b.cfg.Stream, b.cfg.Consumer, b.cfg.Concurrency)
	if err != nil {
		return err
	}
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				b.drain(it)
				return nil
			}
			it.Stop()
			return err
		}
		select {
		case work <- m:
		case <-ctx.Done():
			_ = m.Nak()
			b.drain(it)
			return nil
		}
	}
}

// messages opens a pull iterator, fetching up to batch messages at once, on
// the durable consumer name of stream. When the consumer or its stream is
// gone it sets the streams and consumers up again first; what names the
// consumer in that error.
func (b *Bus) messages(ctx context.Context, js jetstream.JetStream, what, stream, name string, batch int) (jetstream.MessagesContext, error) {
	cons, err := js.Consumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		if rerr := b.reconcile(ctx, js); rerr != nil {
			return nil, fmt.Errorf("recreate %s: %w", what, rerr)
		}
		cons, err = js.Consumer(ctx, stream, name)
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s > %s: %w", stream, name, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(batch))
	if err != nil {
		return nil, fmt.Errorf("consumer %s > %s: messages: %w", stream, name, err)
	}
	return it, nil
}

// drain stops it and naks the messages it still buffers (bounded).
func (b *Bus) drain(it jetstream.MessagesContext) {
	it.Drain()
	for range 2 * b.cfg.Concurrency {
		m, err := it.Next(jetstream.NextMaxWait(time.Second))
		if err != nil {
			break
		}
		_ = m.Nak()
	}
	it.Stop()
}

// handleMsg runs one message through the Runner and applies the verdict.
func (b *Bus) handleMsg(ctx context.Context, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		b.log.WarnContext(ctx, "jetstream message without metadata; terminated", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	// The attempt number counts the deliveries of this message on top of
	// what the event spent before a hand-back republished it.
	attempt := spentAttempts(m.Headers()) + int(meta.NumDelivered)
	ev, err := decode(m.Headers(), m.Data())
	if err != nil {
		b.log.ErrorContext(ctx, "jetstream message is not a courier event; terminated", "subject", m.Subject(),
			"stream_seq", meta.Sequence.Stream, "err", err)
		_ = b.term(m, "courier: "+err.Error())
		return
	}
	p := &progress{msg: m, every: max(b.cfg.AckWait/10, 10*time.Millisecond), last: time.Now()}
	res := b.cfg.Runner.Run(outbox.WithProgress(ctx, p.signal), ev, attempt)
	b.metrics.delivered(res.Outcome)
	b.settleMsg(ctx, m, meta, ev, attempt, res)
}

// settleMsg applies a Runner verdict to a message:
//
//   - Succeeded acks;
//   - Failed naks with the backoff of the delivery count;
//   - Deferred hands the event back to the outbox, due at Result.Next,
//     and acks (a nak with delay would count toward max_deliver, and a host
//     parked for days would exhaust the message); when the row cannot take
//     it back yet, it naks with the delay;
//   - Released (shutdown) naks for immediate redelivery;
//   - Dead with a permanent error terminates the message, which the
//     terminated advisory records as dead.
//
// On the final delivery (NumDelivered = MaxAttempts) anything but success
// logs "event exhausted max deliveries" at error level and naks without
// delay, so the server gives up at once and sends the max-deliveries
// advisory.
func (b *Bus) settleMsg(ctx context.Context, m jetstream.Msg, meta *jetstream.MsgMetadata, ev outbox.Event, attempt int, res outbox.Result) {
	final := int(meta.NumDelivered) >= b.cfg.MaxAttempts
	var perm *outbox.PermanentError
	var err error
	switch {
	case res.Outcome == outbox.Succeeded:
		err = m.Ack()
	case res.Outcome == outbox.Deferred && b.handBack(ctx, ev, res.Next):
		b.log.DebugContext(ctx, "event deferred: handed back to the outbox", "event_id", ev.ID,
			"attempt", attempt, "until", res.Next, "reason", res.Reason)
		err = m.Ack()
	case res.Outcome == outbox.Dead && errors.As(res.Err, &perm):
		b.log.WarnContext(ctx, "jetstream message terminated: permanent failure", "event_id", ev.ID,
			"type", ev.Type, "attempt", attempt, "stream_seq", meta.Sequence.Stream, "err", res.Err)
		err = b.term(m, errString(res.Err))
	case final:
		b.log.ErrorContext(ctx, "event exhausted max deliveries", "event_id", ev.ID, "type", ev.Type,
			"attempt", attempt, "max_deliver", b.cfg.MaxAttempts, "stream_seq", meta.Sequence.Stream,
			"outcome", res.Outcome.String(), "err", res.Err)
		err = m.Nak()
	case res.Outcome == outbox.Dead:
		// The Runner allows fewer attempts than max_deliver: its verdict
		// stands, and the terminated advisory records it.
		b.log.WarnContext(ctx, "jetstream message terminated: runner attempts exhausted before max_deliver",
			"event_id", ev.ID, "type", ev.Type, "attempt", attempt, "max_deliver", b.cfg.MaxAttempts)
		err = b.term(m, "attempts exhausted: "+errString(res.Err))
	case res.Outcome == outbox.Released:
		err = m.Nak()
	case res.Outcome == outbox.Deferred:
		d := res.Next.Sub(b.cfg.Now())
		b.log.DebugContext(ctx, "event deferred", "event_id", ev.ID, "attempt", attempt, "delay", d,
			"reason", res.Reason)
		err = nakAfter(m, d)
	default: // Failed
		b.recordFailure(ctx, ev, res.Err)
		d := b.retryDelay(res, attempt)
		b.log.InfoContext(ctx, "event failed; redelivery scheduled", "event_id", ev.ID, "type", ev.Type,
			"attempt", attempt, "delay", d, "err", res.Err)
		err = nakAfter(m, d)
	}
	if err != nil {
		// The message comes back after AckWait; the ledger makes that safe.
		b.log.DebugContext(ctx, "jetstream settle failed", "event_id", ev.ID, "outcome", res.Outcome.String(),
			"err", err)
	}
}

// rowKeeper is the optional part of a Queue that keeps a published event's
// row current (outbox.Queue has it): a deferred event is handed back to the
// outbox, and failures are counted on the row.
type rowKeeper interface {
	HandBack(ctx context.Context, eventID string, until time.Time) (bool, error)
	RecordFailure(ctx context.Context, eventID string, failure error) error
}

// handBack returns a deferred event to the outbox, due at until; false when
// it cannot (no event id, a Queue without HandBack, no row, or a write
// error), and the caller naks.
func (b *Bus) handBack(ctx context.Context, ev outbox.Event, until time.Time) bool {
	rk, ok := b.queue.(rowKeeper)
	if !ok || ev.ID == "" {
		return false
	}
	done, err := rk.HandBack(ctx, ev.ID, until)
	if err != nil {
		b.log.WarnContext(ctx, "could not hand a deferred event back to the outbox; nak with delay",
			"event_id", ev.ID, "err", err)
		return false
	}
	return done
}

// recordFailure counts a failed delivery on the event's row, so that the
// count survives a hand-back and operators see the last error.
func (b *Bus) recordFailure(ctx context.Context, ev outbox.Event, failure error) {
	rk, ok := b.queue.(rowKeeper)
	if !ok || ev.ID == "" {
		return
	}
	if err := rk.RecordFailure(ctx, ev.ID, failure); err != nil {
		b.log.WarnContext(ctx, "could not record a failed delivery on the outbox row", "event_id", ev.ID, "err", err)
	}
}

// retryDelay is the nak delay after a failed delivery: Config.Backoff (if
// set) raised to a handler's Retry-After, else the Runner's own schedule.
func (b *Bus) retryDelay(res outbox.Result, attempt int) time.Duration {
	if b.cfg.Backoff == nil {
		if d := res.Next.Sub(b.cfg.Now()); d > 0 {
			return d
		}
		return outbox.Backoff(attempt)
	}
	d := b.cfg.Backoff(attempt)
	var ra *outbox.RetryAfterError
	if errors.As(res.Err, &ra) && ra.After > d {
		d = ra.After
	}
	return d
}

// term terminates m, with reason where the server supports it: servers
// before 2.10.4 ignore a terminate with a reason, which would leave the
// message to be redelivered.
func (b *Bus) term(m jetstream.Msg, reason string) error {
	b.mu.Lock()
	nc := b.nc
	b.mu.Unlock()
	if nc != nil && serverAtLeast(nc.ConnectedServerVersion(), 2, 10, 4) {
		return m.TermWithReason(truncate(reason, maxReasonLen))
	}
	return m.Term()
}

// serverAtLeast reports whether a server version "X.Y.Z[-suffix]" is at
// least major.minor.patch; an unreadable version is not.
func serverAtLeast(version string, major, minor, patch int) bool {
	version, _, _ = strings.Cut(version, "-")
	parts := strings.SplitN(version, ".", 3)
	if len(parts) != 3 {
		return false
	}
	want := [3]int{major, minor, patch}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return false
		}
		if n != want[i] {
			return n > want[i]
		}
	}
	return true
}

func nakAfter(m jetstream.Msg, d time.Duration) error {
	if d <= 0 {
		return m.Nak()
	}
	return m.NakWithDelay(d)
}

// progress turns outbox.Progress calls into InProgress acks, at most one per
// interval, so a chatty handler does not flood the server.
type progress struct {
	msg   jetstream.Msg
	every time.Duration
	mu    sync.Mutex
	last  time.Time
}

func (p *progress) signal() {
	now := time.Now()
	p.mu.Lock()
	if now.Sub(p.last) < p.every {
		p.mu.Unlock()
		return
	}
	p.last = now
	p.mu.Unlock()
	_ = p.msg.InProgress()
}

// subscribeCore joins the core-mode queue group shared by every worker
// process. run subscribes before the relay starts, so that in one process
// nothing is published before someone listens.
func (b *Bus) subscribeCore(nc *nats.Conn) (*nats.Subscription, chan *nats.Msg, error) {
	ch := make(chan *nats.Msg, 4*b.cfg.Concurrency)
	sub, err := nc.ChanQueueSubscribe(b.cfg.SubjectPrefix+".>", b.cfg.QueueGroup, ch)
	if err != nil {
		return nil, nil, fmt.Errorf("natsbus: subscribe %s.>: %w", b.cfg.SubjectPrefix, err)
	}
	return sub, ch, nil
}

// consumeCore runs the core-mode consumer until ctx ends: each message of
// the subscription runs once through the Runner. Core NATS cannot redeliver,
// so a failure is logged and the event is not retried (the ledger still
// prevents double handling).
func (b *Bus) consumeCore(ctx context.Context, sub *nats.Subscription, ch chan *nats.Msg) error {
	hctx, stop := b.handlerContext(ctx)
	defer stop()
	var wg sync.WaitGroup
	for range b.cfg.Concurrency {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-ch:
					b.handleCore(hctx, m)
				}
			}
		})
	}
	<-ctx.Done()
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		b.log.DebugContext(ctx, "core unsubscribe failed", "err", err)
	}
	wg.Wait()
	if n := len(ch); n > 0 {
		b.log.WarnContext(ctx, "core mode: events received but not handled at shutdown are lost", "events", n)
	}
	return nil
}

func (b *Bus) handleCore(ctx context.Context, m *nats.Msg) {
	ev, err := decode(m.Header, m.Data)
	if err != nil {
		b.log.ErrorContext(ctx, "core message is not a courier event; dropped", "subject", m.Subject, "err", err)
		return
	}
	res := b.cfg.Runner.Run(ctx, ev, 1)
	b.metrics.delivered(res.Outcome)
	if res.Outcome != outbox.Succeeded {
		b.log.ErrorContext(ctx, "core mode: event not handled and not retried (no redelivery in core mode)",
			"event_id", ev.ID, "type", ev.Type, "outcome", res.Outcome.String(), "err", res.Err)
	}
}

func errString(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
