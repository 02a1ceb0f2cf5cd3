package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-ap/courier/outbox"
)

// Queue is what the relay needs of the outbox table: claim due rows with a
// lease, mark published rows done, put rows back without spending an
// attempt, and dead-letter a row the broker can never take. *outbox.Queue
// satisfies it.
type Queue interface {
	Claim(ctx context.Context, limit int, lease time.Duration) ([]outbox.Row, error)
	Complete(ctx context.Context, rows ...outbox.Row) (int, error)
	Defer(ctx context.Context, until time.Time, rows ...outbox.Row) (int, error)
	Release(ctx context.Context, rows ...outbox.Row) (int, error)
	Settle(ctx context.Context, settlements ...outbox.Settlement) (int, error)
}

// relayPipeline is how many published batches may wait for their acks while
// the next batch is claimed and published.
const relayPipeline = 2

// settleTimeout bounds the database work of settling a batch, including at
// shutdown when the run context has already ended.
const settleTimeout = 30 * time.Second

// batch is a claimed set of rows on its way to the broker.
type batch struct {
	rows []outbox.Row
	// futs[i] is the pending ack of rows[i] (JetStream mode), nil when its
	// publish failed at once with errs[i].
	futs []jetstream.PubAckFuture
	errs []error
	// flushErr is the core-mode outcome of the whole batch.
	flushErr error
	sent     time.Time
}

// relayState is the relay's pause after broker failures, shared by the
// claiming loop and the settling goroutine.
type relayState struct {
	mu         sync.Mutex
	pause      time.Duration // current pause; zero while the broker answers
	pauseUntil time.Time
	failures   int
	noStream   bool // the last failure said no stream captures the subjects
}

// relay runs the relay until ctx ends: claim, publish, and settle once the
// acks are in. On shutdown it settles what it published and releases the
// rest, so nothing stays claimed.
func (b *Bus) relay(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	relaySt := &relayState{}
	settled := make(chan *batch, relayPipeline-1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for bt := range settled {
			b.settleBatch(ctx, relaySt, bt)
		}
	})
	defer func() {
		close(settled)
		wg.Wait()
	}()

	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if b.cfg.Beat != nil {
			b.cfg.Beat()
		}
		if d := relaySt.remaining(); d > 0 {
			if !b.sleep(ctx, d) {
				return nil
			}
			if js != nil && relaySt.takeNoStream() {
				// The stream was deleted under us: set it up again.
				if err := b.reconcile(ctx, js); err != nil {
					b.log.WarnContext(ctx, "relay could not set up the stream again", "stream", b.cfg.Stream, "err", err)
				}
			}
			continue
		}
		if st := nc.Status(); st != nats.CONNECTED {
			// Publishing now would only fill the reconnect buffer.
			b.pauseRelay(ctx, relaySt, 0, fmt.Errorf("connection is %s", st))
			continue
		}
		rows, err := b.queue.Claim(ctx, b.cfg.BatchSize, b.cfg.Lease)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			b.log.WarnContext(ctx, "relay claim failed", "err", err)
			if !b.sleep(ctx, b.cfg.PollInterval) {
				return nil
			}
			continue
		}
		if len(rows) == 0 {
			poll.Reset(b.cfg.PollInterval)
			select {
			case <-ctx.Done():
				return nil
			case <-b.wake:
			case <-poll.C:
			}
			continue
		}
		var bt *batch
		if js != nil {
			bt = b.publishJetStream(js, rows)
		} else {
			bt = b.publishCore(nc, rows)
		}
		settled <- bt // blocks while relayPipeline batches wait for acks
	}
}

// publishJetStream publishes rows asynchronously, each with its Nats-Msg-Id.
func (b *Bus) publishJetStream(js jetstream.JetStream, rows []outbox.Row) *batch {
	bt := &batch{rows: rows, futs: make([]jetstream.PubAckFuture, len(rows)), errs: make([]error, len(rows)), sent: time.Now()}
	for i, r := range rows {
		m := encode(b.cfg.SubjectPrefix, r.Event)
		f, err := js.PublishMsgAsync(m,
			jetstream.WithMsgID(msgID(r.ID, r.Event.ID)),
			jetstream.WithExpectStream(b.cfg.Stream),
			jetstream.WithStallWait(b.cfg.PublishTimeout))
		bt.futs[i], bt.errs[i] = f, err
	}
	return bt
}

// publishCore publishes rows with plain NATS and flushes: the flush's round
// trip proves the server read them, which is all core NATS can say.
func (b *Bus) publishCore(nc *nats.Conn, rows []outbox.Row) *batch {
	bt := &batch{rows: rows, errs: make([]error, len(rows)), sent: time.Now()}
	for i, r := range rows {
		m := encode(b.cfg.SubjectPrefix, r.Event)
		m.Header.Set(jetstream.MsgIDHeader, msgID(r.ID, r.Event.ID))
		bt.errs[i] = nc.PublishMsg(m)
	}
	bt.flushErr = nc.FlushTimeout(b.cfg.PublishTimeout)
	return bt
}

// settleBatch waits for the batch's acks (bounded by PublishTimeout), marks
// the acknowledged rows done, dead-letters rows the broker can never take,
// and defers the rest with the relay's growing pause.
func (b *Bus) settleBatch(ctx context.Context, st *relayState, bt *batch) {
	var done, retry []outbox.Row
	var dead []outbox.Settlement
	var lastErr error
	// One deadline for the whole batch; once it passed, acks not yet in
	// are unknown outcomes.
	wctx, wcancel := context.WithDeadline(context.Background(), bt.sent.Add(b.cfg.PublishTimeout+time.Second))
	defer wcancel()
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
			done = append(done, r)
		case unpublishable(err):
			dead = append(dead, outbox.Settlement{Row: r, Result: outbox.Result{
				Outcome: outbox.Dead, Err: fmt.Errorf("natsbus: publish: %w", err)}})
			b.log.ErrorContext(ctx, "event can never be published; dead-lettered", "event_id", r.Event.ID,
				"type", r.Event.Type, "err", err)
		default:
			retry = append(retry, r)
			lastErr = err
		}
	}

	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if len(done) > 0 {
		if _, err := b.queue.Complete(dctx, done...); err != nil {
			// The rows stay claimed; once the lease expires they are
			// republished with the same ids and the broker drops them.
			b.log.WarnContext(ctx, "relay could not mark published rows done", "rows", len(done), "err", err)
		} else {
			b.metrics.published(len(done))
		}
	}
	if len(dead) > 0 {
		if _, err := b.queue.Settle(dctx, dead...); err != nil {
			b.log.WarnContext(ctx, "relay could not dead-letter rows", "rows", len(dead), "err", err)
		}
	}
	if len(retry) == 0 {
		b.resumeRelay(ctx, st)
		return
	}
	if ctx.Err() != nil {
		// Shutting down: put the rows back for the next relay, due now.
		if _, err := b.queue.Release(dctx, retry...); err != nil {
			b.log.WarnContext(ctx, "relay could not release rows at shutdown; their lease will expire",
				"rows", len(retry), "err", err)
		}
		return
	}
	if errors.Is(lastErr, jetstream.ErrNoStreamResponse) || errors.Is(lastErr, jetstream.ErrStreamNotFound) {
		st.mu.Lock()
		st.noStream = true
		st.mu.Unlock()
	}
	until := b.pauseRelay(ctx, st, len(retry), lastErr)
	if _, err := b.queue.Defer(dctx, b.cfg.Now().Add(until), retry...); err != nil {
		b.log.WarnContext(ctx, "relay could not defer rows; their lease will expire", "rows", len(retry), "err", err)
	}
	b.metrics.deferred(len(retry))
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pause == 0 {
		return 0
	}
	return time.Until(s.pauseUntil)
}

// takeNoStream reports and clears the missing-stream flag.
func (s *relayState) takeNoStream() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.noStream
	s.noStream = false
	return v
}

// pauseRelay grows the relay's pause after a broker failure and returns it.
// rows is how many rows were deferred (for the log).
func (b *Bus) pauseRelay(ctx context.Context, s *relayState, rows int, err error) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pause == 0 {
		s.pause = b.cfg.PauseMin
	} else {
		s.pause = min(s.pause*2, b.cfg.PauseMax)
	}
	s.pauseUntil = time.Now().Add(s.pause)
	s.failures++
	level := slog.LevelWarn
	if s.failures > 1 && s.failures%10 != 0 {
		level = slog.LevelDebug
	}
	b.log.Log(ctx, level, "nats unreachable; relay paused, rows deferred without spending an attempt",
		"delay", s.pause, "rows", rows, "failures", s.failures, "err", err)
	return s.pause
}

// resumeRelay ends a pause after a batch went through.
func (b *Bus) resumeRelay(ctx context.Context, s *relayState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failures > 0 {
		b.log.InfoContext(ctx, "nats reachable again; relay resumed", "failures", s.failures)
	}
	s.pause, s.failures = 0, 0
}
