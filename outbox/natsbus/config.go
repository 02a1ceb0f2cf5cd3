package natsbus

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-ap/courier/outbox"
)

// Mode selects how events travel through NATS.
type Mode string

const (
	// ModeJetStream (the default) publishes to a JetStream stream with the
	// event id as Nats-Msg-Id and consumes through a durable pull consumer:
	// broker dedup, redelivery with backoff, max deliveries, advisories.
	ModeJetStream Mode = "jetstream"
	// ModeCore uses plain NATS publish and queue subscribe: fire and forget,
	// no redelivery, no broker dedup; only the ledger prevents double
	// handling. See OPERATING.md.
	ModeCore Mode = "core"
)

// ParseMode parses a NATS_MODE value; the empty string is ModeJetStream.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "", ModeJetStream:
		return ModeJetStream, nil
	case ModeCore:
		return ModeCore, nil
	default:
		return "", fmt.Errorf("natsbus: mode %q: want %q or %q", s, ModeJetStream, ModeCore)
	}
}

// ValidateURL checks a NATS_URL value: one or more comma-separated server
// URLs with scheme nats, tls, ws or wss (a bare host:port means nats://), a
// host and, when given, a numeric port. It does not connect. Its errors never
// repeat credentials found in the URL.
func ValidateURL(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("natsbus: empty NATS URL")
	}
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return fmt.Errorf("natsbus: NATS URL entry %d is empty", i+1)
		}
		raw := part
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // url.Error repeats the whole URL
			}
			return fmt.Errorf("natsbus: NATS URL entry %d: %w", i+1, err)
		}
		shown := redactURL(part)
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("natsbus: NATS URL %q: scheme %q is not nats, tls, ws or wss", shown, u.Scheme)
		}
		if u.Hostname() == "" {
			return fmt.Errorf("natsbus: NATS URL %q: no host", shown)
		}
		if p := u.Port(); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n <= 0 || n > 65535 {
				return fmt.Errorf("natsbus: NATS URL %q: bad port %q", shown, p)
			}
		} else if _, _, err := net.SplitHostPort(u.Host); err == nil {
			return fmt.Errorf("natsbus: NATS URL %q: empty port", shown)
		}
	}
	return nil
}

// Runner runs an event through all its handlers under the processed-events
// ledger and returns the one verdict the bus applies. *outbox.Runner
// satisfies it.
type Runner interface {
	Run(ctx context.Context, ev outbox.Event, attempt int) outbox.Result
}

// Defaults of Config.
const (
	DefaultURL             = "nats://127.0.0.1:4222"
	DefaultStream          = "COURIER_EVENTS"
	DefaultSubjectPrefix   = "courier.events"
	DefaultConsumer        = "courier-worker"
	DefaultAdvisoryStream  = "COURIER_ADVISORIES"
	DefaultAdvisoryDurable = "courier-advisory-recorder"
	DefaultQueueGroup      = "courier-workers"
	DefaultMaxAttempts     = outbox.DefaultMaxAttempts
	DefaultAckWait         = 5 * time.Minute
	DefaultStreamMaxAge    = 7 * 24 * time.Hour
	DefaultBatchSize       = 256
	DefaultMaxInFlight     = 1024
	DefaultPublishTimeout  = 10 * time.Second
	DefaultPollInterval    = time.Second
	DefaultPauseMin        = 500 * time.Millisecond
	DefaultPauseMax        = 30 * time.Second
	DefaultLease           = outbox.DefaultLease
	DefaultConcurrency     = 8
	DefaultShutdownGrace   = 10 * time.Second
	DefaultReconnectWait   = 2 * time.Second
	DefaultReplayPoll      = 2 * time.Second

	// DuplicateWindow is the events stream's duplicate_window: longer than
	// the relay's retry horizon, as the decision record requires.
	DuplicateWindow = time.Hour
)

// Config configures a Bus. Every field documents its default; the zero value
// of a field means that default.
type Config struct {
	// URL is NATS_URL: one or more comma-separated server URLs.
	// Default DefaultURL.
	URL string
	// Mode is NATS_MODE. Default ModeJetStream.
	Mode Mode
	// Name is the connection name the server shows (default "courier-worker").
	Name string

	// Stream is the events stream. Default DefaultStream.
	Stream string
	// SubjectPrefix is the subject root; an event of type T is published on
	// <SubjectPrefix>.<T> and the stream captures <SubjectPrefix>.>.
	// Default DefaultSubjectPrefix.
	SubjectPrefix string
	// Consumer is the durable pull consumer every worker process shares.
	// Default DefaultConsumer.
	Consumer string
	// AdvisoryStream captures the consumer's max-deliveries and
	// terminated advisories so none is lost while every worker is down.
	// Default DefaultAdvisoryStream.
	AdvisoryStream string
	// AdvisoryDurable is the durable consumer of AdvisoryStream.
	// Default DefaultAdvisoryDurable.
	AdvisoryDurable string
	// QueueGroup is the core-mode queue group. Default DefaultQueueGroup.
	QueueGroup string
	// StreamMaxAge bounds how long a message stays in a stream this bus
	// creates; an exhausted message can be replayed from the stream until
	// then (and from its outbox row after). It must be at least
	// DuplicateWindow. Only used on creation. Default DefaultStreamMaxAge.
	StreamMaxAge time.Duration

	// MaxAttempts is EVENT_QUEUE_MAX_ATTEMPTS, the consumer's max_deliver.
	// Default: the Runner's MaxAttempts() when it has that method, else
	// DefaultMaxAttempts. Keep it equal to the Runner's.
	MaxAttempts int
	// AckWait is the consumer's ack_wait: it must cover the slowest handler
	// between two outbox.Progress calls. Default DefaultAckWait.
	AckWait time.Duration
	// Backoff is the delay after the n-th failed delivery (NakWithDelay),
	// raised to a handler's Retry-After. Default: the Runner's schedule
	// (outbox.Backoff, with Retry-After and deferral lower bounds).
	Backoff func(attempt int) time.Duration

	// DB is the writer connection (sqldb.DB.Write) holding event_queue and
	// jetstream_exhausted. Required.
	DB *sql.DB
	// Read is a read pool on the same database (sqldb.DB.Read): the
	// default Queue reads the rows the relay claimed from it, off the
	// writer. Default DB.
	Read *sql.DB
	// Queue claims and settles outbox rows for the relay.
	// Default: outbox.NewQueue(DB) with Read and Now.
	Queue Queue
	// Runner runs the handlers of an event through the ledger. Required
	// for the consumer (Run); the relay alone (RunRelay) does not need it.
	Runner Runner

	// BatchSize is how many rows the relay claims at once.
	// Default DefaultBatchSize.
	BatchSize int
	// MaxInFlight bounds unacknowledged asynchronous publishes; it must
	// hold three batches (one publishing, two waiting for acks).
	// Default DefaultMaxInFlight.
	MaxInFlight int
	// PublishTimeout is how long the relay waits for a publish ack before
	// treating the outcome as unknown (the row is retried with the same
	// id). Default DefaultPublishTimeout.
	PublishTimeout time.Duration
	// PollInterval is how often an idle relay looks for due rows; Notify
	// wakes it sooner. Default DefaultPollInterval.
	PollInterval time.Duration
	// PauseMin and PauseMax bound the growing pauses while the broker is
	// unreachable or refuses: the relay's (and the deferral of the rows it
	// claimed), and those between set-up and consumer restarts.
	// Defaults DefaultPauseMin and DefaultPauseMax.
	PauseMin, PauseMax time.Duration
	// Lease is how long a claimed row stays claimed before another relay
	// may reclaim it. Default DefaultLease (600 s).
	Lease time.Duration

	// Concurrency is how many handlers one process runs at once.
	// Default DefaultConcurrency.
	Concurrency int
	// ShutdownGrace is how long running handlers may finish after the
	// context of Run ends before their context is cancelled.
	// Default DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// ReconnectWait is the pause between reconnect attempts (with jitter).
	// Default DefaultReconnectWait.
	ReconnectWait time.Duration
	// ReplayPoll is how often the worker looks for replays requested
	// through Replay. Default DefaultReplayPoll.
	ReplayPoll time.Duration

	// Gauges receives the relay's paused state and lag for Prometheus
	// (*metrics.Relay implements it). Nil records nothing.
	Gauges RelayGauges

	// Beat, when set, is called on every turn of the relay loop (at least
	// every PauseMax while the relay runs), for a liveness check. It must
	// not block.
	Beat func()

	// Logger receives the bus's logs. Nil discards.
	Logger *slog.Logger
	// Registerer receives the bus's metrics. Nil means no metrics.
	Registerer prometheus.Registerer
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defd := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defi := func(i *int, v int) {
		if *i <= 0 {
			*i = v
		}
	}
	def(&c.URL, DefaultURL)
	if c.Mode == "" {
		c.Mode = ModeJetStream
	}
	def(&c.Name, "courier-worker")
	def(&c.Stream, DefaultStream)
	def(&c.SubjectPrefix, DefaultSubjectPrefix)
	def(&c.Consumer, DefaultConsumer)
	def(&c.AdvisoryStream, DefaultAdvisoryStream)
	def(&c.AdvisoryDurable, DefaultAdvisoryDurable)
	def(&c.QueueGroup, DefaultQueueGroup)
	defd(&c.StreamMaxAge, DefaultStreamMaxAge)
	if c.MaxAttempts <= 0 {
		if r, ok := c.Runner.(interface{ MaxAttempts() int }); ok && r.MaxAttempts() > 0 {
			c.MaxAttempts = r.MaxAttempts()
		} else {
			c.MaxAttempts = DefaultMaxAttempts
		}
	}
	defd(&c.AckWait, DefaultAckWait)
	defi(&c.BatchSize, DefaultBatchSize)
	defi(&c.MaxInFlight, DefaultMaxInFlight)
	defd(&c.PublishTimeout, DefaultPublishTimeout)
	defd(&c.PollInterval, DefaultPollInterval)
	defd(&c.PauseMin, DefaultPauseMin)
	defd(&c.PauseMax, DefaultPauseMax)
	defd(&c.Lease, DefaultLease)
	defi(&c.Concurrency, DefaultConcurrency)
	defd(&c.ShutdownGrace, DefaultShutdownGrace)
	defd(&c.ReconnectWait, DefaultReconnectWait)
	defd(&c.ReplayPoll, DefaultReplayPoll)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return err
	}
	if err := ValidateURL(c.URL); err != nil {
		return err
	}
	if c.DB == nil {
		return errors.New("natsbus: config: DB is required")
	}
	for _, n := range []struct{ what, v string }{
		{"stream", c.Stream}, {"advisory stream", c.AdvisoryStream},
		{"consumer", c.Consumer}, {"advisory durable", c.AdvisoryDurable},
	} {
		if strings.ContainsAny(n.v, " \t\r\n.*>/\\") {
			return fmt.Errorf("natsbus: config: %s name %q contains a space, '.', '*', '>', '/' or '\\'", n.what, n.v)
		}
	}
	if !validSubject(c.SubjectPrefix) {
		return fmt.Errorf("natsbus: config: subject prefix %q is not a literal NATS subject", c.SubjectPrefix)
	}
	if c.StreamMaxAge < DuplicateWindow {
		return fmt.Errorf("natsbus: config: stream max age %s is shorter than the %s duplicate window", c.StreamMaxAge, DuplicateWindow)
	}
	if c.PauseMax < c.PauseMin {
		return fmt.Errorf("natsbus: config: pause max %s below pause min %s", c.PauseMax, c.PauseMin)
	}
	if n := (relayPipeline + 1) * c.BatchSize; n > c.MaxInFlight {
		return fmt.Errorf("natsbus: config: max in flight %d below the %d publishes the relay keeps going (%d batches of %d)",
			c.MaxInFlight, n, relayPipeline+1, c.BatchSize)
	}
	return nil
}

// validSubject reports whether s is a literal subject: dot-separated
// non-empty tokens without wildcards or whitespace.
func validSubject(s string) bool {
	if s == "" {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || strings.ContainsAny(tok, " \t\r\n*>") {
			return false
		}
	}
	return true
}

// RelayGauges receives the relay's state: paused while the broker is
// unreachable, and the lag of its latest batch (how long its oldest row had
// been due when it was published; 0 when nothing was due).
type RelayGauges interface {
	SetPaused(paused bool)
	SetLag(d time.Duration)
}
