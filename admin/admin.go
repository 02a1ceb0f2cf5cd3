// Package admin is courier's operator surface: the admin HTTP API under
// /admin/ and the `courier admin` command that talks to it.
//
// The API shows what the delivery pipeline is doing and repairs what is
// stuck: outbox events by status (pending, processing, stuck past their
// lease, dead-lettered), type, target host and age; one event in full with
// its ledger rows and delivery attempts; retry and discard of dead-lettered
// events; the JetStream messages the consumer gave up on and their replay;
// the delivery status of one activity inbox by inbox; remote hosts with
// their health and the per-host controls pause, resume, retry now, drain and
// reset; the delivery attempts of the last hour, minute by minute; and
// domain blocks.
//
// Every request needs `Authorization: Bearer <token>`; the token is compared
// in constant time. With no token configured the API is off and every
// /admin/ path answers 404 saying so. Every answer is JSON; errors are
// {"error": "..."} with a status chosen by one function from the error's
// code (see Code).
//
// The API reads and changes the outbox only through outbox.Queue, and the
// other components through the small interfaces declared here (Store, Hosts,
// Deliveries, JetStream), which cmd wires to the real ones.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/limit"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/outbox/natsbus"
	"github.com/courier-ap/courier/store"
)

// Store is what the API needs of the domain repository; *store.Store
// satisfies it. Unknown domains and activities are reported with errors for
// which store.ErrorCode returns store.ENOTFOUND.
type Store interface {
	DomainBlocks(ctx context.Context) ([]store.DomainBlock, error)
	AddDomainBlock(ctx context.Context, domain, reason string) error
	RemoveDomainBlock(ctx context.Context, domain string) error
	ActivityByLocalID(ctx context.Context, id string) (*store.Activity, error)
}

// Relays is what the relay endpoints need; *store.Store implements it.
type Relays interface {
	Relays(ctx context.Context) ([]store.Relay, error)
	AddRelay(ctx context.Context, rawURL string) (*store.Relay, error)
	RemoveRelay(ctx context.Context, rawURL string) (*store.Relay, error)
}

// JetStream is what the API needs of the JetStream bus's exhausted-message
// records. NewJetStream returns the implementation over the courier
// database (the server never talks to NATS; a worker performs replays).
type JetStream interface {
	// ListExhausted lists recorded exhausted messages, newest first.
	ListExhausted(ctx context.Context, f natsbus.ExhaustedFilter) ([]natsbus.Exhausted, error)
	// Replay asks for the exhausted message with record id to be published
	// again; an unknown id is an error matching natsbus.ErrNotFound.
	Replay(ctx context.Context, id int64) error
	// ReplayEvent is Replay for the latest record of an event; it returns
	// that record's id.
	ReplayEvent(ctx context.Context, eventID string) (int64, error)
}

// Config configures the admin API. The zero value of each optional field
// means its documented default.
type Config struct {
	// Token is the bearer token (COURIER_ADMIN_TOKEN). Empty turns the API
	// off: every /admin/ path answers 404 saying the admin API is disabled.
	Token string
	// Queue is the outbox. Required when Token is set.
	Queue *outbox.Queue
	// Store holds domain blocks and activities. Required when Token is set.
	Store Store
	// Hosts is remote host health and the per-host controls. Nil: the host
	// endpoints answer 409 saying host health is not available.
	Hosts Hosts
	// Signatures is the per-host signature schemes. Nil: the signature
	// endpoints answer 409 saying they are not available.
	Signatures Signatures
	// Deliveries is the per-inbox delivery record. Nil: the activity
	// endpoint answers 409 and event details carry no delivery attempts.
	Deliveries Deliveries
	// Relays holds the relay subscriptions. Nil: the relay endpoints answer
	// 409 saying relays are not available.
	Relays Relays
	// JetStream is the exhausted-message record of the JetStream bus
	// (NewJetStream). Nil when the bus is db or NATS_MODE=core: the
	// JetStream endpoints then answer 409 saying so.
	JetStream JetStream
	// Webhooks keeps the webhook endpoints (*webhook.Service). Nil: the
	// webhook endpoints answer 409 saying webhooks are not available.
	Webhooks Webhooks
	// Rates counts recent delivery attempts (NewDeliveryRates). Nil: the
	// throughput endpoint answers 409.
	Rates Rates
	// Lease is the outbox claim lease: a row claimed longer ago is stuck.
	// Default outbox.DefaultLease (600 s); keep it equal to the worker's.
	Lease time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives one info line per state-changing action (what and how
	// many) and internal errors. Nil discards.
	Logger *slog.Logger
	// Inbound is the inbox's per-remote-host view. Nil: /admin/inbound
	// answers 409 saying it is not available.
	Inbound Inbound
	// Processes lists the processes that deliver, shown in /admin/stats.
	// Nil: the stats carry none.
	Processes Processes
	// AllowPrivateAddresses is shown in /admin/stats: the server reaches
	// loopback and private addresses (COURIER_ALLOW_PRIVATE_ADDRESSES).
	AllowPrivateAddresses bool
	// Failures throttles failed token attempts per client address; share
	// one with the other bearer-token surfaces. Nil: a throttle of the API's
	// own with limit's defaults.
	Failures *limit.Failures
}

func (c Config) withDefaults() Config {
	if c.Lease == 0 {
		c.Lease = outbox.DefaultLease
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Failures == nil {
		c.Failures = limit.NewFailures(c.Now)
	}
	return c
}

func (c Config) validate() error {
	if c.Token == "" {
		return nil
	}
	switch {
	case c.Queue == nil:
		return errors.New("admin: config: Queue is required")
	case c.Store == nil:
		return errors.New("admin: config: Store is required")
	case c.Lease < time.Second:
		return fmt.Errorf("admin: config: Lease must be at least 1s, not %s", c.Lease)
	case strings.TrimSpace(c.Token) != c.Token:
		return errors.New("admin: config: Token has leading or trailing white space")
	case len(c.Token) < MinTokenLen:
		return fmt.Errorf("admin: config: Token has %d characters, at least %d are needed; %s", len(c.Token), MinTokenLen, TokenAdvice)
	}
	return nil
}

// MinTokenLen is the shortest admin token accepted: a guessable token is
// an open door, throttled or not.
const MinTokenLen = 32

// TokenAdvice says how to make a good admin token.
const TokenAdvice = "make one with: openssl rand -hex 32"

// API is the admin HTTP API. Create it with New and mount it with Register.
type API struct {
	cfg       Config
	log       *slog.Logger
	queue     *outbox.Queue
	tokenHash [sha256.Size]byte
	router    *mux.Router
}

// New validates cfg and returns the API. It does not touch the database.
func New(cfg Config) (*API, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &API{cfg: cfg, log: cfg.Logger, queue: cfg.Queue}
	if cfg.Token != "" {
		a.tokenHash = sha256.Sum256([]byte(cfg.Token))
	}
	a.router = a.routes()
	return a, nil
}

// Enabled reports whether the API is on (a token is configured).
func (a *API) Enabled() bool { return a.cfg.Token != "" }

// Register mounts the API on r at /admin and everything under /admin/.
func (a *API) Register(r *mux.Router) {
	r.Path("/admin").Handler(a)
	r.PathPrefix("/admin/").Handler(a)
}

// ServeHTTP answers one admin request: 404 when the API is off, 401 without
// the right bearer token, else the route's answer.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if !a.Enabled() {
		writeError(w, r, a.log, errorf(EDISABLED,
			"the admin API is disabled: start the server with --admin-token or COURIER_ADMIN_TOKEN"))
		return
	}
	if wait := a.cfg.Failures.Wait(r.RemoteAddr); wait > 0 {
		w.Header().Set("Retry-After", limit.RetryAfter(wait))
		writeError(w, r, a.log, errorf(ETHROTTLED,
			"too many failed token attempts from this address; retry in %s", limit.RetryAfter(wait)+"s"))
		return
	}
	if !a.authorized(r) {
		a.cfg.Failures.Failed(r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="courier admin"`)
		a.log.InfoContext(r.Context(), "admin: request refused: missing or wrong bearer token",
			"method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		writeError(w, r, a.log, errorf(EUNAUTHORIZED, "missing or wrong admin bearer token"))
		return
	}
	a.router.ServeHTTP(w, r)
}

// authorized compares the request's bearer token with the configured one in
// constant time (both hashed first, so neither length leaks).
func (a *API) authorized(r *http.Request) bool {
	tok, ok := httpedge.Bearer(r)
	if !ok {
		return false
	}
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], a.tokenHash[:]) == 1
}

// routes builds the router of the API; ServeHTTP runs it after the token
// check, so no route is reachable unauthenticated.
func (a *API) routes() *mux.Router {
	r := mux.NewRouter()
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		writeError(w, req, a.log, errorf(ENOTFOUND, "no admin endpoint %s", req.URL.Path))
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		writeError(w, req, a.log, errorf(EMETHOD, "%s is not allowed on %s", req.Method, req.URL.Path))
	})
	get, post, del := http.MethodGet, http.MethodPost, http.MethodDelete
	handle := func(path string, fn func(http.ResponseWriter, *http.Request) error, methods ...string) {
		r.Handle(path, a.endpoint(fn)).Methods(methods...)
	}
	handle("/admin", a.index, get)
	handle("/admin/", a.index, get)
	handle("/admin/stats", a.stats, get)
	handle("/admin/throughput", a.throughput, get)
	handle("/admin/events", a.listEvents, get)
	handle("/admin/events/retry", a.retryEvents, post)
	handle("/admin/events/{id}", a.getEvent, get)
	handle("/admin/events/{id}/retry", a.retryEvent, post)
	handle("/admin/events/{id}/discard", a.discardEvent, post)
	handle("/admin/events/{id}/replay", a.replayEvent, post)
	handle("/admin/jetstream/exhausted", a.listExhausted, get)
	handle("/admin/jetstream/exhausted/{id}/replay", a.replayExhausted, post)
	handle("/admin/activities/{id}", a.activityDeliveries, get)
	handle("/admin/hosts", a.listHosts, get)
	handle("/admin/inbound", a.inboundHosts, get)
	handle("/admin/hosts/{host}", a.withHost(a.getHost), get)
	handle("/admin/hosts/{host}/pause", a.withHost(a.pauseHost), post)
	handle("/admin/hosts/{host}/resume", a.withHost(a.hostAction(resumeAction)), post)
	handle("/admin/hosts/{host}/retry", a.withHost(a.hostAction(retryAction)), post)
	handle("/admin/hosts/{host}/drain", a.withHost(a.drainHost), post)
	handle("/admin/hosts/{host}/reset", a.withHost(a.hostAction(resetAction)), post)
	handle("/admin/signatures", a.listSignatures, get)
	handle("/admin/signatures/{host}", a.getSignature, get)
	handle("/admin/signatures/{host}", a.forgetSignature, del)
	handle("/admin/domain-blocks", a.listBlocks, get)
	handle("/admin/domain-blocks", a.addBlock, post)
	handle("/admin/domain-blocks/{domain}", a.removeBlock, del)
	handle("/admin/relays", a.listRelays, get)
	handle("/admin/relays", a.addRelay, post)
	handle("/admin/relays", a.removeRelay, del)
	handle("/admin/webhooks", a.listWebhooks, get)
	handle("/admin/webhooks", a.addWebhook, post)
	handle("/admin/webhooks/{id}", a.getWebhook, get)
	handle("/admin/webhooks/{id}", a.removeWebhook, del)
	handle("/admin/webhooks/{id}/rotate", a.rotateWebhook, post)
	handle("/admin/webhooks/{id}/test", a.testWebhook, post)
	return r
}

// endpoint adapts a handler that returns an error: the error is written
// with writeError, and POST bodies are bounded.
func (a *API) endpoint(fn func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		}
		if err := fn(w, r); err != nil {
			writeError(w, r, a.log, err)
		}
	})
}

// maxBodyBytes bounds request bodies.
const maxBodyBytes = 64 << 10

// Endpoint documents one route for the index.
type Endpoint struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	What   string `json:"what"`
}

// Endpoints lists the API's routes, as GET /admin/ shows them.
var Endpoints = []Endpoint{
	{"GET", "/admin/stats", "outbox counts by status and type, and stuck rows"},
	{"GET", "/admin/throughput", "delivery attempts of the last hour, minute by minute (delivered, failed)"},
	{"GET", "/admin/events?status=&type=&host=&older_than=&limit=&cursor=", "list outbox events (status: pending, processing, stuck, dead_lettered, done)"},
	{"GET", "/admin/events/{id}", "one event in full: payload, attempts, last error, ledger rows, delivery attempts"},
	{"POST", "/admin/events/{id}/retry", "put a dead-lettered event back to pending with its attempts reset"},
	{"POST", "/admin/events/retry?type=&host=&older_than=&limit=&dry_run=", "retry the dead-lettered events matching a filter"},
	{"POST", "/admin/events/{id}/discard", "delete a pending or dead-lettered event"},
	{"POST", "/admin/events/{id}/replay", "replay the latest exhausted JetStream message of an event"},
	{"GET", "/admin/jetstream/exhausted?event_id=&reason=&limit=&cursor=", "JetStream messages the consumer gave up on"},
	{"POST", "/admin/jetstream/exhausted/{id}/replay", "replay one exhausted JetStream message"},
	{"GET", "/admin/activities/{id}?limit=&cursor=", "delivery status of one local activity, inbox by inbox"},
	{"GET", "/admin/hosts?cursor=&limit=", "remote hosts with their health and delivery counts"},
	{"GET", "/admin/hosts/{host}", "one host's health and counts"},
	{"POST", "/admin/hosts/{host}/pause", "stop delivering to a host (deliveries wait, spending no attempts)"},
	{"POST", "/admin/hosts/{host}/resume", "end a pause"},
	{"POST", "/admin/hosts/{host}/retry", "make the host's waiting deliveries due now"},
	{"POST", "/admin/hosts/{host}/drain?confirm={host}", "discard the host's pending deliveries (without confirm: how many)"},
	{"POST", "/admin/hosts/{host}/reset", "forget the host's failure history"},
	{"GET", "/admin/signatures?cursor=&limit=", "the signature schemes (RFC 9421, Ed25519) each host was learnt to accept"},
	{"GET", "/admin/signatures/{host}", "one host's signature schemes and the order deliveries try them in"},
	{"DELETE", "/admin/signatures/{host}", "forget a host's signature schemes (draft-cavage first again)"},
	{"GET", "/admin/inbound", "remote hosts' inbound requests, ignored and throttled ones, and their budgets"},
	{"GET", "/admin/domain-blocks", "blocked domains"},
	{"POST", "/admin/domain-blocks", `block a domain: {"domain": "...", "reason": "..."}`},
	{"DELETE", "/admin/domain-blocks/{domain}", "unblock a domain"},
	{"GET", "/admin/relays", "relay subscriptions with their state (pending, accepted, rejected)"},
	{"POST", "/admin/relays", `subscribe to a relay: {"url": ".../inbox" (Mastodon style) or the relay actor (LitePub)}`},
	{"DELETE", "/admin/relays", `unsubscribe: {"url": "..."} (sends the Undo)`},
	{"GET", "/admin/webhooks", "webhook endpoints with their health and delivery counts"},
	{"POST", "/admin/webhooks", `add a webhook endpoint: {"url": "...", "actor": "NAME", "events": ["activity.create", ...]}; answers its secret, shown only then`},
	{"GET", "/admin/webhooks/{id}", "one webhook endpoint with its health"},
	{"DELETE", "/admin/webhooks/{id}", "remove a webhook endpoint (its queued events are dropped)"},
	{"POST", "/admin/webhooks/{id}/rotate", "a new secret, shown only then; the old one keeps signing for a grace period (24 h)"},
	{"POST", "/admin/webhooks/{id}/test", "enqueue a webhook.test event to the endpoint"},
}

func (a *API) index(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]any{"endpoints": Endpoints})
}
