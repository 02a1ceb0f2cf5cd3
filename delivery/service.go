package delivery

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/store"
)

// EventPost is the outbox event type of one delivery: a Post payload, with
// Target set to the inbox's host.
const EventPost = "delivery.post"

// Handler names, the processed-events ledger keys: keep them stable.
const (
	// HandlerFanout handles activitypub.EventOutgoing events.
	HandlerFanout = "delivery.fanout"
	// HandlerPost handles EventPost events.
	HandlerPost = "delivery.post"
)

// Sentinel errors.
var (
	// ErrNotDeterministic: an outgoing event carries an activity whose id
	// is not the one derived from the event's id and the activity's type.
	ErrNotDeterministic = errors.New("delivery: activity id is not derived from its event")
	// ErrPayload: an event payload cannot be decoded.
	ErrPayload = errors.New("delivery: malformed event payload")
	// ErrNotLocal: the activity's actor is not a local actor.
	ErrNotLocal = errors.New("delivery: actor is not a local actor")
	// ErrHostUnavailable: a delivery was parked longer than Config.ParkMax
	// while its host was unavailable.
	ErrHostUnavailable = errors.New("delivery: host unavailable")
	// ErrTargetGone: the target of a channel's event is gone for good
	// (see Channel.Request); the event is dropped.
	ErrTargetGone = errors.New("delivery: target gone")
	// ErrUnknownHost: an admin operation named a host courier has no state
	// for.
	ErrUnknownHost = errors.New("delivery: unknown host")
)

// PermanentError is a delivery that no retry can fix: the remote answered
// 410, another 4xx or a redirect, or courier refused to connect.
type PermanentError struct {
	// Status is the HTTP status (0 when no response arrived).
	Status int
	// Reason says why, without bodies or signatures.
	Reason string
}

func (e *PermanentError) Error() string { return "delivery: permanent failure: " + e.Reason }

// TransientError is a failed delivery that is retried on the outbox backoff.
type TransientError struct {
	// Status is the HTTP status (0 when no response arrived).
	Status int
	// Reason says why, without bodies or signatures.
	Reason string
}

func (e *TransientError) Error() string { return "delivery: " + e.Reason }

// ObjectFetcher fetches a remote document by id: its body and the URL it
// was finally served from.
type ObjectFetcher interface {
	Fetch(ctx context.Context, url string) ([]byte, string, error)
}

// ActorResolver resolves remote actors by id; activitypub.Resolver
// implements it (a TTL cache over signed fetches, refetching on expiry).
type ActorResolver interface {
	Actor(ctx context.Context, id string) (*activitypub.Actor, error)
}

// Config configures a Service. Zero durations and counts take the
// documented defaults.
type Config struct {
	// DB is courier's database. Required.
	DB *sqldb.DB
	// Store is the social repository (actors, followers, blocks,
	// activities). Required.
	Store *store.Store
	// Resolver resolves named remote recipients. Required.
	Resolver ActorResolver
	// Objects fetches remote objects (signed GET), so that a Like or
	// Announce of an object courier has not stored reaches its author.
	// *activitypub.Fetcher implements it. Nil: such reactions go only
	// where their addressing says.
	Objects ObjectFetcher
	// LocalInbox records the activities of local actors for the local
	// actors they reach (local.go); inbox.Local implements it. Nil: the
	// fan-out of an activity with local recipients fails.
	LocalInbox LocalInbox
	// BaseURL is the instance's public origin, e.g. https://courier.example.
	// Required; activity ids are derived under it.
	BaseURL string
	// Client sends the POSTs. Default: activitypub.NewClient with
	// AllowPrivate and the timeouts below (it checks every dialed address).
	// Whatever client is given, redirects are never followed.
	Client *http.Client
	// AllowPrivate permits delivering to loopback, private and link-local
	// addresses (--allow-private-addresses). Default false. Only used for
	// the default Client.
	AllowPrivate bool
	// Timeout bounds one POST, response included (default 30 s).
	Timeout time.Duration
	// DialTimeout bounds connecting (default 5 s).
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the response headers
	// (default 20 s).
	ResponseHeaderTimeout time.Duration
	// Version is courier's version for the User-Agent (default "dev").
	Version string
	// UserAgent is sent with every POST (default
	// "courier/{Version} (+{BaseURL})").
	UserAgent string
	// UnavailableAfter is how long a host must keep failing before it is
	// marked unavailable and its deliveries are parked (default 10 min).
	// Keep it below the outbox's retry horizon (about 20 min for 10
	// attempts), or deliveries dead-letter before their host is parked.
	UnavailableAfter time.Duration
	// ProbeInterval is the first wait between probes of an unavailable host
	// (default 1 min); it doubles after each failed probe up to
	// ProbeMaxInterval (default 1 h).
	ProbeInterval    time.Duration
	ProbeMaxInterval time.Duration
	// ParkMax is how long a delivery may stay parked before it is
	// dead-lettered (default 7 days). Dead-lettered deliveries stay in the
	// outbox and can be retried by an operator.
	ParkMax time.Duration
	// ParkRecheck is how long a parked delivery sleeps before it looks at
	// its host again (default 30 min); a recovering host releases it at
	// once regardless.
	ParkRecheck time.Duration
	// PerHostConcurrency bounds concurrent POSTs to one host (default 4),
	// shared among the processes that deliver from one database (see
	// Announce); a host that is failing gets one. Within it, a
	// delivery that finds the host's POSTs in flight on every connection
	// the host has waits for one of them (reusing its connection) and
	// starts one beside them only once the newest has gone unanswered for
	// SlotWait/5: a host's concurrency ramps up only when its deliveries
	// queue or it answers slowly.
	PerHostConcurrency int
	// SlotWait is how long a delivery waits for a free slot of its host
	// (default 500 ms) before deferring itself by about SlotDefer
	// (default 5 s) without spending an attempt.
	SlotWait  time.Duration
	SlotDefer time.Duration
	// HandOff is how long a delivery's handler waits for the answer of its
	// POST (default 250 ms). A host that has not answered by then no longer
	// holds the handler: the POST goes on by itself (see MaxInFlight), its
	// row waits without spending an attempt, and the host's other
	// deliveries wait for its answer. Waiting on remote hosts then costs
	// sockets and memory, not the worker's handler slots.
	HandOff time.Duration
	// MaxInFlight bounds the POSTs in the air in this process (default
	// 4096); a delivery that finds them all taken comes back after about
	// SlotDefer without spending an attempt.
	MaxInFlight int
	// BulkFanout is the most inboxes a fan-out may reach and keep its
	// deliveries in the interactive lane (default 100); the deliveries of
	// a larger one go in outbox.LaneBulk, claimed after interactive work
	// (an Accept, a reply, a direct message, another actor's small post).
	BulkFanout int
	// RetryAfterMax clamps a remote's Retry-After (default 6 h).
	RetryAfterMax time.Duration
	// MaxResponseBody is how much of a response body is read (default
	// 4 KiB); the rest is discarded with the connection.
	MaxResponseBody int64
	// Retention is how long attempt records and delivery rows are kept
	// (default 30 days).
	Retention time.Duration
	// HostCacheTTL is how long the signature scheme a host takes is
	// trusted in memory before it is read again (default 10 s). Host
	// health is read again by a delivery unless this process saw the host
	// healthy less than a second before (see Health).
	HostCacheTTL time.Duration
	// KeyCacheTTL is how long a parsed actor key is reused before the
	// actor row is read again (default 30 s), so a rotated key is picked up.
	KeyCacheTTL time.Duration
	// Channels are the kinds of delivery target other packages add beside
	// remote inboxes (Channel; package app/webhook's endpoints are one):
	// Register handles their events. None by default.
	Channels []Channel
	// Outcomes is told of the settled deliveries of local activities
	// (the application's notifications of them). Nil: nothing is told.
	Outcomes Outcomes
	// MaxAttempts is the outbox's attempts before dead-lettering (default
	// outbox.DefaultMaxAttempts; keep it the worker's): a delivery that
	// fails on its last attempt is settled dead for Outcomes.
	MaxAttempts int
	// Logger receives the service's logs (nil discards).
	Logger *slog.Logger
	// Metrics records attempts to remote inboxes and parking (nil records
	// nothing).
	Metrics *metrics.Delivery
	// Now is the clock of every stored time, Date header and health
	// decision (default time.Now).
	Now func() time.Time

	// unordered turns the order per object off (no order key written, no
	// gate read): only for the benchmark that measures what order costs
	// (export_test.go's Unordered).
	unordered bool
}

// Defaults of Config.
const (
	DefaultTimeout               = 30 * time.Second
	DefaultDialTimeout           = 5 * time.Second
	DefaultResponseHeaderTimeout = 20 * time.Second
	DefaultUnavailableAfter      = 10 * time.Minute
	DefaultProbeInterval         = time.Minute
	DefaultProbeMaxInterval      = time.Hour
	DefaultParkMax               = 7 * 24 * time.Hour
	DefaultParkRecheck           = 30 * time.Minute
	DefaultPerHostConcurrency    = 4
	DefaultSlotWait              = 500 * time.Millisecond
	DefaultSlotDefer             = 5 * time.Second
	DefaultRetryAfterMax         = 6 * time.Hour
	DefaultHandOff               = 250 * time.Millisecond
	DefaultMaxInFlight           = 4096
	DefaultBulkFanout            = 100
	DefaultMaxResponseBody       = 4 << 10
	DefaultRetention             = 30 * 24 * time.Hour
	DefaultHostCacheTTL          = 10 * time.Second
	DefaultKeyCacheTTL           = 30 * time.Second
)

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Timeout, DefaultTimeout)
	def(&c.DialTimeout, DefaultDialTimeout)
	def(&c.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	def(&c.UnavailableAfter, DefaultUnavailableAfter)
	def(&c.ProbeInterval, DefaultProbeInterval)
	def(&c.ProbeMaxInterval, DefaultProbeMaxInterval)
	def(&c.ParkMax, DefaultParkMax)
	def(&c.ParkRecheck, DefaultParkRecheck)
	def(&c.SlotWait, DefaultSlotWait)
	def(&c.SlotDefer, DefaultSlotDefer)
	def(&c.RetryAfterMax, DefaultRetryAfterMax)
	def(&c.HandOff, DefaultHandOff)
	if c.BulkFanout == 0 {
		c.BulkFanout = DefaultBulkFanout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = outbox.DefaultMaxAttempts
	}
	def(&c.Retention, DefaultRetention)
	def(&c.HostCacheTTL, DefaultHostCacheTTL)
	def(&c.KeyCacheTTL, DefaultKeyCacheTTL)
	if c.PerHostConcurrency == 0 {
		c.PerHostConcurrency = DefaultPerHostConcurrency
	}
	if c.MaxResponseBody == 0 {
		c.MaxResponseBody = DefaultMaxResponseBody
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.UserAgent == "" {
		c.UserAgent = fmt.Sprintf("courier/%s (+%s)", c.Version, c.BaseURL)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.DB == nil:
		return errors.New("delivery: DB is required")
	case c.Store == nil:
		return errors.New("delivery: Store is required")
	case c.Resolver == nil:
		return errors.New("delivery: Resolver is required")
	case !strings.HasPrefix(c.BaseURL, "http://") && !strings.HasPrefix(c.BaseURL, "https://"):
		return fmt.Errorf("delivery: BaseURL %q is not an http(s) URL", c.BaseURL)
	case c.PerHostConcurrency < 1:
		return fmt.Errorf("delivery: PerHostConcurrency must be at least 1, not %d", c.PerHostConcurrency)
	case c.BulkFanout < 0:
		return fmt.Errorf("delivery: BulkFanout must not be negative, not %d", c.BulkFanout)
	case c.MaxInFlight < 1:
		return fmt.Errorf("delivery: MaxInFlight must be at least 1, not %d", c.MaxInFlight)
	case c.MaxResponseBody < 0:
		return errors.New("delivery: MaxResponseBody must not be negative")
	case c.Retention < c.ParkMax:
		return fmt.Errorf("delivery: Retention (%s) must not be shorter than ParkMax (%s)", c.Retention, c.ParkMax)
	case c.ProbeMaxInterval < c.ProbeInterval:
		return fmt.Errorf("delivery: ProbeMaxInterval (%s) must not be shorter than ProbeInterval (%s)",
			c.ProbeMaxInterval, c.ProbeInterval)
	}
	if err := validateChannels(c.Channels); err != nil {
		return err
	}
	for name, d := range map[string]time.Duration{
		"Timeout": c.Timeout, "DialTimeout": c.DialTimeout, "ResponseHeaderTimeout": c.ResponseHeaderTimeout,
		"UnavailableAfter": c.UnavailableAfter, "ProbeInterval": c.ProbeInterval, "ParkMax": c.ParkMax,
		"ParkRecheck": c.ParkRecheck, "SlotWait": c.SlotWait, "SlotDefer": c.SlotDefer,
		"RetryAfterMax": c.RetryAfterMax, "HandOff": c.HandOff, "Retention": c.Retention, "HostCacheTTL": c.HostCacheTTL,
		"KeyCacheTTL": c.KeyCacheTTL,
	} {
		if d < 0 {
			return fmt.Errorf("delivery: %s must not be negative, not %s", name, d)
		}
	}
	return nil
}

// Service is the delivery worker's state: handlers, host health, the
// attempt recorder. Create one per process with New, Register its handlers
// on the outbox registry and run it with Run.
type Service struct {
	cfg    Config
	log    *slog.Logger
	db     *sqldb.DB
	store  *store.Store
	uris   store.URIs
	client *http.Client
	// channels are Config.Channels, each with its client.
	channels []*channel
	queue    *outbox.Queue
	health   *Health
	rec      *recorder
	keys     *keyCache
	slots    *slotSet
	// schemes: which signature scheme each host accepts (scheme.go).
	schemes *Schemes
	// flights are the POSTs in the air.
	flights *flights
	// peers: the processes that deliver, sharing per-host concurrency
	// (processes.go).
	peers *peers
	// order: the deliveries waiting here for an earlier one, and the
	// reads of the order check (order.go).
	order                                orderWaiters
	orderSelf, orderBefore, fanoutBefore *readStmt

	docsMu sync.Mutex
	docs   map[string][]byte // activity id -> stored bytes
}

// New returns a Service. It does not touch the network or the database.
func New(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The default client, and the base of each channel's.
	opts := activitypub.ClientOptions{
		AllowPrivate:          cfg.AllowPrivate,
		Timeout:               cfg.Timeout,
		DialTimeout:           cfg.DialTimeout,
		TLSHandshakeTimeout:   cfg.DialTimeout,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		MaxConnsPerHost:       cfg.PerHostConcurrency,
		UserAgent:             cfg.UserAgent,
	}
	client := cfg.Client
	if client == nil {
		client = activitypub.NewClient(opts)
	}
	c := *client // never follow a redirect with the old signature
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if c.Timeout == 0 {
		c.Timeout = cfg.Timeout
	}
	s := &Service{
		cfg:      cfg,
		log:      cfg.Logger,
		db:       cfg.DB,
		store:    cfg.Store,
		uris:     store.NewURIs(cfg.BaseURL),
		client:   &c,
		channels: newChannels(cfg, opts),
		queue:    outbox.NewQueue(cfg.DB.Write, outbox.QueueOptions{Read: cfg.DB.Read, Now: cfg.Now}),
		keys:     &keyCache{ttl: cfg.KeyCacheTTL, m: map[string]keyEntry{}},
		slots:    newSlotSet(cfg.SlotWait / rampDivisor),
		flights:  newFlights(cfg.MaxInFlight, runtime.GOMAXPROCS(0)),
		docs:     map[string][]byte{},
		peers:    newPeers(),
	}
	s.rec = newRecorder(cfg.DB, cfg.Logger)
	s.health = newHealth(s)
	s.schemes = newSchemes(cfg.DB, cfg.Now, cfg.HostCacheTTL, cfg.Logger)
	s.orderSelf = newReadStmt(cfg.DB.Read, sqlOrderSelf, cfg.Logger)
	s.orderBefore = newReadStmt(cfg.DB.Read, sqlOrderBefore, cfg.Logger)
	s.fanoutBefore = newReadStmt(cfg.DB.Read, sqlFanoutBefore, cfg.Logger)
	return s, nil
}

// Register registers the fan-out, forward and post handlers on reg under
// their stable names (HandlerFanout for activitypub.EventOutgoing,
// HandlerForward for activitypub.EventForward, HandlerPost for EventPost),
// and each channel's handler for its events.
func (s *Service) Register(reg *outbox.Registry) {
	reg.Handle(activitypub.EventOutgoing, HandlerFanout, s.fanoutSettled)
	reg.Handle(activitypub.EventForward, HandlerForward, s.forwardSettled)
	reg.Handle(EventPost, HandlerPost, s.deliverSettled)
	for _, c := range s.channels {
		reg.Handle(c.EventType(), c.Handler(), func(ctx context.Context, ev outbox.Event) error {
			return s.deliverChannel(ctx, c, ev)
		})
	}
}

// Health returns the host health state, for the admin API and the inbox
// (SignOfLife).
func (s *Service) Health() *Health { return s.health }

// sweepInterval is how often Run applies Retention.
const sweepInterval = 10 * time.Minute

// Run writes attempt records and host state in batches, releases the
// deliveries of recovered hosts a second time (see Health), and applies
// retention until ctx ends, then writes what is left and returns nil once
// its goroutines have ended. Handlers work without Run, but their records
// then wait in a bounded buffer and are written one by one when it is full.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	// The recorder outlives the flights, which record what they land.
	recCtx, stopRec := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRec()
	wg.Go(func() { s.rec.run(recCtx) })
	wg.Go(func() {
		s.runFlights(ctx)
		stopRec()
	})
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.health.releaseAgain(ctx)
			}
		}
	})
	wg.Go(func() {
		t := time.NewTicker(sweepInterval)
		defer t.Stop()
		for {
			if n, err := s.sweep(ctx); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "delivery: retention sweep failed", "err", err)
			} else if n > 0 {
				s.log.InfoContext(ctx, "delivery: retention sweep", "rows", n)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	wg.Wait()
	return nil
}

func (s *Service) now() time.Time { return s.cfg.Now() }

// keyCache keeps parsed actor keys for KeyCacheTTL.
type keyCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]keyEntry
}

type keyEntry struct {
	signer activitypub.Signer
	pem    string
	at     time.Time
}

// maxCachedKeys bounds the key cache; when full it is cleared.
const maxCachedKeys = 1000

// signer returns the signing identity of the local actor actorURI.
func (s *Service) signer(ctx context.Context, actorURI string) (activitypub.Signer, error) {
	k := s.keys
	k.mu.Lock()
	e, ok := k.m[actorURI]
	k.mu.Unlock()
	if ok && time.Since(e.at) < k.ttl {
		return e.signer, nil
	}
	a, err := s.store.ActorByURI(ctx, actorURI)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return activitypub.Signer{}, fmt.Errorf("%w: %s", ErrNotLocal, actorURI)
		}
		return activitypub.Signer{}, fmt.Errorf("delivery: load actor %s: %w", actorURI, err)
	}
	if !ok || e.pem != a.PrivateKeyPEM {
		var key *rsa.PrivateKey
		if key, err = activitypub.ParsePrivateKeyPEM(a.PrivateKeyPEM); err != nil {
			return activitypub.Signer{}, fmt.Errorf("delivery: key of %s: %w", actorURI, err)
		}
		e = keyEntry{signer: activitypub.Signer{KeyID: activitypub.KeyID(a.URI), Key: key,
			Ed25519KeyID: activitypub.Ed25519KeyID(a.URI), Ed25519: a.Ed25519Key}, pem: a.PrivateKeyPEM}
	}
	e.at = time.Now()
	k.mu.Lock()
	if len(k.m) >= maxCachedKeys {
		clear(k.m)
	}
	k.m[actorURI] = e
	k.mu.Unlock()
	return e.signer, nil
}
