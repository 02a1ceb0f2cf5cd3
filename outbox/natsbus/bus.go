// Package natsbus is the NATS backend of the outbox (EVENT_BUS_BACKEND=nats).
//
// The server only inserts outbox rows and never connects to NATS. The worker
// runs a Bus, which has three parts:
//
//   - the relay claims due outbox rows in batches, publishes each to
//     JetStream asynchronously with Nats-Msg-Id set to the event id, and marks
//     a row done only once its publish is acknowledged (a duplicate ack
//     counts). When the broker is unreachable or times out it defers the
//     claimed rows with a growing pause, spending no attempt;
//   - the consumer pulls from a durable consumer shared by every worker
//     process and runs each message through the outbox Runner (the ledger):
//     success acks, failure naks with the backoff of its delivery count, a
//     deferral naks with the delay until then, a permanent failure
//     terminates the message;
//   - the advisory recorder consumes a stream that captures the consumer's
//     max-deliveries and terminated advisories, counts them and records them
//     in jetstream_exhausted, and performs the replays requested there
//     (ListExhausted, Replay).
//
// In core mode (ModeCore) the relay publishes with plain NATS and the
// consumer is a queue subscription: no broker dedup and no redelivery, only
// the ledger. OPERATING.md says what each mode guarantees.
package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/courier-ap/courier/outbox"
)

// ErrNotReady is wrapped by Ready while the bus is not connected or its
// streams are not set up.
var ErrNotReady = errors.New("natsbus: not ready")

// ErrRunning is returned by a Run method called while the bus already runs.
var ErrRunning = errors.New("natsbus: bus already running")

// Bus relays outbox rows to NATS and consumes them. Create it with New and
// start it with Run (or RunRelay); it is not reusable while running.
type Bus struct {
	cfg     Config
	log     *slog.Logger
	queue   Queue
	rows    *outbox.Queue // reads the outbox rows of replays
	metrics *busMetrics
	running atomic.Bool

	wake chan struct{} // Notify: new rows may be due

	mu       sync.Mutex
	nc       *nats.Conn
	setupErr error         // nil once streams and consumers are set up
	back     chan struct{} // closed (and replaced) when the connection comes back
}

// New validates cfg and returns a Bus. It does not connect.
func New(cfg Config) (*Bus, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rows := outbox.NewQueue(cfg.DB, outbox.QueueOptions{Read: cfg.Read, Now: cfg.Now})
	q := cfg.Queue
	if q == nil {
		q = rows
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	if r, ok := cfg.Runner.(interface{ MaxAttempts() int }); ok && r.MaxAttempts() != cfg.MaxAttempts {
		cfg.Logger.Warn("runner and consumer allow different attempts; keep them equal (EVENT_QUEUE_MAX_ATTEMPTS)",
			"runner_max_attempts", r.MaxAttempts(), "max_deliver", cfg.MaxAttempts)
	}
	return &Bus{
		cfg:      cfg,
		log:      cfg.Logger,
		queue:    q,
		rows:     rows,
		metrics:  m,
		wake:     make(chan struct{}, 1),
		back:     make(chan struct{}),
		setupErr: fmt.Errorf("%w: not started", ErrNotReady),
	}, nil
}

// Notify wakes the relay to look for due rows now. It never blocks; wire it
// to sqldb.DB.OnWrite when the worker shares the process with writers.
func (b *Bus) Notify() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Ready reports whether the bus can relay and consume: nil once it is
// connected and its streams and consumers are set up, an error wrapping
// ErrNotReady otherwise. cmd puts it behind /readyz.
func (b *Bus) Ready() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.setupErr != nil {
		return b.setupErr
	}
	if b.nc == nil {
		return fmt.Errorf("%w: not connected", ErrNotReady)
	}
	if st := b.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("%w: connection to %s is %s", ErrNotReady, redactURL(b.cfg.URL), st)
	}
	return nil
}

// Run runs the relay, the consumer and (in JetStream mode) the advisory
// recorder until ctx ends, then returns after every goroutine has ended. It
// returns nil after a clean shutdown; a broker that is down is waited out,
// not returned.
func (b *Bus) Run(ctx context.Context) error {
	return b.run(ctx, true)
}

// RunRelay runs only the relay: outbox rows to NATS.
func (b *Bus) RunRelay(ctx context.Context) error { return b.run(ctx, false) }

// run runs the relay and, when consume is set, the consumer and (in
// JetStream mode) the advisory recorder and the replayer.
func (b *Bus) run(ctx context.Context, consume bool) error {
	if !b.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer b.running.Store(false)
	if consume && b.cfg.Runner == nil {
		return errors.New("natsbus: config: Runner is required to consume")
	}
	nc, err := b.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	b.mu.Lock()
	b.nc = nc
	b.setupErr = fmt.Errorf("%w: setting up", ErrNotReady)
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.nc = nil
		b.setupErr = fmt.Errorf("%w: stopped", ErrNotReady)
		b.mu.Unlock()
	}()

	var js jetstream.JetStream
	if b.cfg.Mode == ModeJetStream {
		js, err = jetstream.New(nc,
			jetstream.WithPublishAsyncMaxPending(b.cfg.MaxInFlight),
			jetstream.WithPublishAsyncTimeout(b.cfg.PublishTimeout),
			jetstream.WithDefaultTimeout(b.cfg.PublishTimeout))
		if err != nil {
			return fmt.Errorf("natsbus: jetstream: %w", err)
		}
		defer js.CleanupPublisher()
		if !b.setup(ctx, js) {
			return nil // ctx ended before the broker could be set up
		}
	}
	b.mu.Lock()
	b.setupErr = nil
	b.mu.Unlock()
	b.log.InfoContext(ctx, "nats bus started", "mode", string(b.cfg.Mode), "stream", b.cfg.Stream,
		"consumer", b.cfg.Consumer)

	var (
		coreSub *nats.Subscription
		coreCh  chan *nats.Msg
	)
	if js == nil && consume {
		if coreSub, coreCh, err = b.subscribeCore(nc); err != nil {
			return err
		}
	}
	// Each part returns nil when ctx ends; an error from one stops the
	// others and is returned once all have ended.
	g, gctx := errgroup.WithContext(ctx)
	part := func(name string, fn func(context.Context) error) {
		g.Go(func() error {
			if err := fn(gctx); err != nil && ctx.Err() == nil {
				return fmt.Errorf("natsbus: %s: %w", name, err)
			}
			return nil
		})
	}
	part("relay", func(ctx context.Context) error { return b.relay(ctx, nc, js) })
	switch {
	case !consume:
	case js != nil:
		part("consumer", func(ctx context.Context) error { return b.consume(ctx, js) })
		part("advisory recorder", func(ctx context.Context) error { return b.recordAdvisories(ctx, js) })
		part("replayer", func(ctx context.Context) error { return b.replayLoop(ctx, js) })
	default:
		part("consumer", func(ctx context.Context) error { return b.consumeCore(ctx, coreSub, coreCh) })
	}
	return g.Wait()
}

// connect dials NATS. It does not wait for the server: with
// RetryOnFailedConnect the connection keeps trying in the background and
// Ready reports it. Only a configuration error (a bad URL, TLS settings)
// fails here.
func (b *Bus) connect() (*nats.Conn, error) {
	log := b.log
	var failedTries atomic.Int64
	nc, err := nats.Connect(b.cfg.URL,
		nats.Name(b.cfg.Name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(b.cfg.ReconnectWait),
		nats.ReconnectJitter(b.cfg.ReconnectWait/4, b.cfg.ReconnectWait/4),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if !c.IsClosed() {
				log.Warn("nats disconnected; reconnecting", "err", err)
			}
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if n := failedTries.Add(1); failureLevel(int(n)) == slog.LevelWarn {
				log.Warn("nats unreachable; still trying", "url", redactURL(b.cfg.URL), "failures", n, "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			failedTries.Store(0)
			log.Info("nats reconnected", "server", c.ConnectedUrlRedacted())
			b.signalBack()
		}),
		nats.ConnectHandler(func(c *nats.Conn) {
			failedTries.Store(0)
			log.Info("nats connected", "server", c.ConnectedUrlRedacted())
			b.signalBack()
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("nats async error", "subject", subj, "err", err)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("natsbus: connect %s: %w", redactURL(b.cfg.URL), err)
	}
	return nc, nil
}

// setup creates or reconciles the streams and consumers, retrying with a
// growing pause while the broker is unreachable or refuses. It reports
// false when ctx ended first.
func (b *Bus) setup(ctx context.Context, js jetstream.JetStream) bool {
	pause := b.cfg.PauseMin
	for attempt := 1; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, b.cfg.PublishTimeout)
		err := b.reconcile(sctx, js)
		cancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		b.mu.Lock()
		b.setupErr = fmt.Errorf("%w: set up JetStream: %w", ErrNotReady, err)
		b.mu.Unlock()
		level := failureLevel(attempt)
		if level == slog.LevelWarn && errors.Is(err, errUnusable) {
			level = slog.LevelError // retrying cannot fix it: an operator must
		}
		b.log.Log(ctx, level, "jetstream setup failed; retrying", "attempt", attempt, "delay", pause, "err", err)
		if !b.sleep(ctx, pause) {
			return false
		}
		pause = min(pause*2, b.cfg.PauseMax)
	}
}

// failureLevel is the level of the line logged on the n-th failure in a
// row: warn on the first and every tenth, debug between, so a long outage
// logs one line per ten failures.
func failureLevel(n int) slog.Level {
	if n > 1 && n%10 != 0 {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// signalBack wakes everything waiting for the connection to come back.
func (b *Bus) signalBack() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.back)
	b.back = make(chan struct{})
}

// backCh returns a channel closed when the connection next comes back.
func (b *Bus) backCh() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.back
}

// sleep waits d or until the connection comes back; false when ctx ended.
func (b *Bus) sleep(ctx context.Context, d time.Duration) bool {
	back := b.backCh()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-back:
	}
	return true
}

// redactURL drops the user information (credentials, tokens) from a NATS
// URL list, so it can be logged and shown on /readyz.
func redactURL(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		raw := p
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil {
			parts[i] = "(unparsable URL)"
			continue
		}
		if u.User != nil {
			u.User = url.User("redacted")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
