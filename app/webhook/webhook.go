// Package webhook sends a local actor's application what concerns the
// actor, as Standard Webhooks (https://www.standardwebhooks.com): signed
// JSON POSTs to the endpoints the operator added.
//
// Each webhook event is an outbox event of type EventPost,
// enqueued with outbox.Enqueue in the transaction of the change it reports
// (Hook, for an item of a local actor's inbox view; Settled, for the
// settled delivery of an actor's own activity, in the transaction that
// records it), one per endpoint, with a
// deterministic id (outbox.ChildID of what it reports and the endpoint),
// so a change recorded twice enqueues nothing new. Its Target is the
// endpoint's host key (HostKey, "webhook-<id>.invalid"). Service is a
// delivery.Channel: the delivery service sends these events through the
// machinery of a delivery to a remote host (per-host health, parking,
// concurrency, the outbox's backoff, attempts, dead letters and replay;
// the hosts admin API pauses, resumes and drains an endpoint by its host
// key), with Service.Request building the signed POST. A dead endpoint
// parks like a dead host and costs federation nothing.
//
// The POST carries the headers webhook-id (the outbox event id, the same on
// every retry), webhook-timestamp (Unix seconds of the attempt) and
// webhook-signature ("v1,<base64 HMAC-SHA256 of id.timestamp.body>", one
// per active secret, space-separated: during a rotation the old secret
// signs beside the new one until its grace period ends). The body is the
// JSON of Payload, fixed when the event is enqueued. docs/application-api.md
// is the contract.
package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/store"
)

// EventPost is the outbox event type of one webhook POST, with Target set
// to its endpoint's host key; HandlerPost, its handler's name (the
// processed-events ledger key: keep it stable).
const (
	EventPost   = "webhook.post"
	HandlerPost = "webhook.post"
)

// Event types. An inbound activity's event is "activity." and its type in
// lower case (activity.create, activity.follow, activity.like, ...); the
// others are these.
const (
	// TypeFollowRequested is a Follow of an actor that approves its
	// followers, awaiting the decision (instead of activity.follow).
	TypeFollowRequested = "follow.requested"
	// TypeQuoteRequested is a QuoteRequest of an actor's object awaiting
	// its approval (FEP-044f; there is no activity.quoterequest for it).
	TypeQuoteRequested = "quote.requested"
	// TypeQuoteRejected is a Reject of a QuoteRequest of the actor's
	// quote: its quote stays unapproved (instead of activity.reject).
	TypeQuoteRejected = "quote.rejected"
	// TypeDeliveryCompleted: an activity of the actor reached every inbox
	// it was addressed to.
	TypeDeliveryCompleted = "delivery.completed"
	// TypeDeliveryDead: a delivery of an activity of the actor was
	// dead-lettered.
	TypeDeliveryDead = "delivery.dead"
	// TypeTest is what `courier admin webhooks test` sends.
	TypeTest = "webhook.test"
	// activityPrefix begins the type of an inbound activity's event.
	activityPrefix = "activity."
)

// ActivityTypes are the activity types whose events an endpoint may name
// in its filter, besides the types above; an inbound activity of another
// type is sent as "activity." and its type in lower case too.
var ActivityTypes = []string{"Accept", "Add", "Announce", "Block", "Create", "Delete", "EmojiReact",
	"Flag", "Follow", "Like", "Move", "Reject", "Remove", "Undo", "Update"}

// EventTypeOf is the webhook event type of an item of an inbox view.
func EventTypeOf(it app.Item) string {
	switch it.Kind {
	case app.KindFollowRequest:
		return TypeFollowRequested
	case app.KindQuoteRequest:
		return TypeQuoteRequested
	case app.KindQuoteRejected:
		return TypeQuoteRejected
	}
	if it.Type == "EmojiReaction" { // older Pleroma's name (activitypub.IsEmojiReact)
		return activityPrefix + "emojireact"
	}
	return activityPrefix + strings.ToLower(it.Type)
}

// KnownTypes returns every event type an endpoint's filter may name.
func KnownTypes() []string {
	out := []string{TypeFollowRequested, TypeQuoteRequested, TypeQuoteRejected, TypeDeliveryCompleted, TypeDeliveryDead, TypeTest}
	for _, t := range ActivityTypes {
		out = append(out, activityPrefix+strings.ToLower(t))
	}
	slices.Sort(out)
	return out
}

// Payload is the body of a webhook POST, as the Standard Webhooks
// specification recommends: the event type, when it happened, and its
// data.
type Payload struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      Data      `json:"data"`
}

// TimestampLayout is the layout of a payload's timestamp: RFC 3339 in UTC
// with exactly three fractional digits (milliseconds).
const TimestampLayout = "2006-01-02T15:04:05.000Z07:00"

// MarshalJSON encodes p with its timestamp in TimestampLayout.
func (p Payload) MarshalJSON() ([]byte, error) {
	type plain Payload
	return json.Marshal(struct {
		plain
		Timestamp string `json:"timestamp"`
	}{plain(p), p.Timestamp.UTC().Format(TimestampLayout)})
}

// Data is what an event reports. Actor, Seq and Activity are those of the
// inbox view's item for an inbound activity; a delivery outcome names the
// activity by ActivityID and says how many inboxes (Inboxes) it reached or
// which inbox died (Inbox, Error).
type Data struct {
	// Actor is the local actor's preferredUsername.
	Actor string `json:"actor,omitempty"`
	// Seq is the item's place in the actor's inbox view (strictly
	// increasing per actor); absent for events that are not items.
	Seq int64 `json:"seq,omitempty"`
	// Kind says why the activity concerns the actor (mention, reply,
	// direct, follow, follow_request, like, announce, ...).
	Kind string `json:"kind,omitempty"`
	// ActivityID is the activity's id.
	ActivityID string `json:"activity_id,omitempty"`
	// Activity is the activity as received (verified), with its object
	// embedded as stored.
	Activity json.RawMessage `json:"activity,omitempty"`
	// Inboxes is how many inboxes a delivered activity reached.
	Inboxes int `json:"inboxes,omitempty"`
	// Superseded is how many of its inboxes it did not need to reach: its
	// object was deleted before it was sent there (the Delete went).
	Superseded int `json:"superseded,omitempty"`
	// Inbox and Error are those of a dead-lettered delivery.
	Inbox string `json:"inbox,omitempty"`
	Error string `json:"error,omitempty"`
	// Endpoint is the endpoint id of a test event.
	Endpoint int64 `json:"endpoint,omitempty"`
}

// post is the payload of an EventPost outbox event: the
// endpoint and the exact body to send.
type post struct {
	Endpoint int64  `json:"endpoint"`
	Type     string `json:"type"`
	Body     string `json:"body"`
}

// HostKey is the delivery host key of endpoint id: the Target of its
// events, the name its health is kept under and the admin hosts API
// knows (pause, resume, drain). It is a name under .invalid (RFC 2606),
// so it is never a real host: an endpoint's failures never park
// federation with a host of the same name, nor the reverse (Owns).
func HostKey(id int64) string { return "webhook-" + strconv.FormatInt(id, 10) + ".invalid" }

// EndpointOfHost returns the endpoint id of a host key, or false.
func EndpointOfHost(host string) (int64, bool) {
	s, ok := strings.CutPrefix(host, "webhook-")
	if !ok {
		return 0, false
	}
	if s, ok = strings.CutSuffix(s, ".invalid"); !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0
}

// Endpoint is one webhook endpoint.
type Endpoint struct {
	ID  int64  `json:"id"`
	URL string `json:"url"`
	// Actor is the local actor whose events it receives; empty for every
	// local actor.
	Actor string `json:"actor,omitempty"`
	// Events are the event types it receives; empty for every type.
	Events    []string  `json:"events,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Secrets is how many secrets sign its POSTs now (2 during a
	// rotation's grace period).
	Secrets int `json:"secrets"`
	// Host is its delivery host key (HostKey).
	Host string `json:"host"`
}

// Config configures a Service.
type Config struct {
	// DB is courier's database. Required.
	DB *sqldb.DB
	// RotateGrace is how long a rotated-out secret keeps signing beside
	// the new one (default 24 h).
	RotateGrace time.Duration
	// SecretCacheTTL is how long the secrets of an endpoint are reused
	// before they are read again (default 2 s).
	SecretCacheTTL time.Duration
	// MaxURL bounds an endpoint's URL (default 2048 bytes).
	MaxURL int
	// RefuseAddr, when set, refuses an endpoint URL whose host is an IP
	// address it reports: cmd gives the link-local and cloud metadata
	// addresses (activitypub.MetadataAddr) the operator did not name, when
	// courier refuses private addresses; the client of the POSTs refuses
	// to dial them alike (DenyMetadata), whatever name resolves to one.
	// Other private addresses stay allowed: the application usually sits
	// beside courier. Nil: none refused.
	RefuseAddr func(netip.Addr) bool
	// DenyMetadata makes the client of the POSTs refuse to dial
	// link-local and cloud metadata addresses (activitypub.MetadataAddr)
	// but those AllowAddrs contains; set it when courier refuses private
	// addresses. Loopback and private addresses stay allowed (endpoints
	// are added by the operator, and the application usually sits beside
	// courier, on loopback or a private network). Default false.
	DenyMetadata bool
	AllowAddrs   []netip.Prefix
	// Metrics records the POSTs (nil records nothing).
	Metrics *metrics.Webhook
	// UserAgent is sent with every POST (default "courier-webhooks").
	UserAgent string
	// Logger receives the service's logs (nil discards). Secrets and
	// bodies are never logged.
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Defaults of Config.
const (
	DefaultRotateGrace    = 24 * time.Hour
	DefaultSecretCacheTTL = 2 * time.Second
	DefaultMaxURL         = 2048
)

func (c Config) withDefaults() Config {
	if c.RotateGrace == 0 {
		c.RotateGrace = DefaultRotateGrace
	}
	if c.SecretCacheTTL == 0 {
		c.SecretCacheTTL = DefaultSecretCacheTTL
	}
	if c.MaxURL == 0 {
		c.MaxURL = DefaultMaxURL
	}
	if c.UserAgent == "" {
		c.UserAgent = "courier-webhooks"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Service keeps the webhook endpoints, enqueues their events and builds
// their POSTs. It is safe for concurrent use.
type Service struct {
	cfg Config
	db  *sqldb.DB

	mu    sync.Mutex
	cache map[int64]endpointKeys
	// wants: whether an endpoint takes delivery events, as read at
	// wantsAt.
	wants   bool
	wantsAt time.Time
}

// endpointKeys is what signing an endpoint's POST needs, as last read.
type endpointKeys struct {
	url  string
	keys [][]byte
	at   time.Time
	gone bool
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if cfg.DB == nil {
		return nil, errors.New("webhook: DB is required")
	}
	if cfg.RotateGrace < 0 || cfg.SecretCacheTTL < 0 || cfg.MaxURL < 0 {
		return nil, errors.New("webhook: RotateGrace, SecretCacheTTL and MaxURL must not be negative")
	}
	return &Service{cfg: cfg, db: cfg.DB, cache: map[int64]endpointKeys{}}, nil
}

// ErrEndpointGone: the endpoint of a webhook event was removed; the event
// is dropped.
var ErrEndpointGone = delivery.ErrTargetGone

const (
	sqlEndpointsOf = `SELECT id, events FROM webhook_endpoints WHERE actor_id IS NULL OR actor_id = ? ORDER BY id`
	sqlEndpoint    = `SELECT url FROM webhook_endpoints WHERE id = ?`
	sqlKeys        = `SELECT secret FROM webhook_secrets WHERE endpoint_id = ? AND (expires_at IS NULL OR expires_at > ?)
		ORDER BY id DESC`
)

// Hook is the app.Hook of webhooks: in the transaction that records it,
// it enqueues the event of item it for every endpoint of its actor (or of
// every actor) that takes the event's type.
func (s *Service) Hook(ctx context.Context, tx *sql.Tx, it app.Item) error {
	typ := EventTypeOf(it)
	return s.enqueueFor(ctx, tx, it.ActorID, typ, "item\x00"+strconv.FormatInt(it.ActorID, 10)+"\x00"+it.ActivityURI,
		Data{Actor: it.ActorName, Seq: it.Seq, Kind: it.Kind, ActivityID: it.ActivityURI, Activity: it.Activity})
}

// Settled enqueues, in tx, the delivery.completed or delivery.dead event
// of o for the endpoints of its actor (delivery.Outcomes).
func (s *Service) Settled(ctx context.Context, tx *sql.Tx, o delivery.Outcome) error {
	typ, d, key := TypeDeliveryCompleted, Data{Actor: o.ActorName, ActivityID: o.ActivityID, Inboxes: o.Inboxes, Superseded: o.Superseded}, ""
	if o.Dead {
		typ, d, key = TypeDeliveryDead, Data{Actor: o.ActorName, ActivityID: o.ActivityID, Inbox: o.Inbox, Error: o.Error}, o.EventID
	}
	return s.enqueueFor(ctx, tx, o.ActorID, typ, "outcome\x00"+typ+"\x00"+o.ActivityID+"\x00"+key, d)
}

// WantsOutcomes reports whether an endpoint takes delivery events
// (delivery.Outcomes), read at most every SecretCacheTTL.
func (s *Service) WantsOutcomes(ctx context.Context) bool {
	s.mu.Lock()
	if time.Since(s.wantsAt) < s.cfg.SecretCacheTTL {
		w := s.wants
		s.mu.Unlock()
		return w
	}
	s.mu.Unlock()
	var n int
	err := s.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM webhook_endpoints
		WHERE events = '' OR events LIKE '%delivery.%'`).Scan(&n)
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "webhook: endpoints taking delivery events", "err", err)
		return true // a spurious outcome costs a transaction; a missed one is lost
	}
	s.mu.Lock()
	s.wants, s.wantsAt = n > 0, time.Now()
	s.mu.Unlock()
	return n > 0
}

// enqueueFor enqueues an event of type typ with data d for every endpoint
// of actorID taking typ; each event's id is outbox.ChildID(parent,
// endpoint id).
func (s *Service) enqueueFor(ctx context.Context, tx *sql.Tx, actorID int64, typ, parent string, d Data) error {
	rows, err := tx.QueryContext(ctx, sqlEndpointsOf, actorID)
	if err != nil {
		return fmt.Errorf("webhook: endpoints of actor %d: %w", actorID, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		var events string
		if err := rows.Scan(&id, &events); err != nil {
			rows.Close()
			return fmt.Errorf("webhook: endpoints of actor %d: %w", actorID, err)
		}
		if takes(events, typ) {
			ids = append(ids, id)
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("webhook: endpoints of actor %d: %w", actorID, err)
	}
	if len(ids) == 0 {
		return nil
	}
	now := s.cfg.Now().UTC()
	evs := make([]outbox.Event, 0, len(ids))
	for _, id := range ids {
		ev, err := s.event(id, outbox.ChildID(parent, strconv.FormatInt(id, 10)), now, Payload{Type: typ, Timestamp: now, Data: d})
		if err != nil {
			return fmt.Errorf("webhook: encode %s: %w", typ, err)
		}
		evs = append(evs, ev)
	}
	return outbox.Enqueue(ctx, tx, evs...)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// takes reports whether an endpoint whose filter is events takes typ.
func takes(events, typ string) bool {
	if events == "" {
		return true
	}
	for e := range strings.SplitSeq(events, ",") {
		if e == typ {
			return true
		}
	}
	return false
}

// Service is the delivery.Channel of the endpoints: Name, EventType,
// Handler, Owns, Request, Client and Attempted.
var _ delivery.Channel = (*Service)(nil)

// Name names webhooks in delivery's logs and attempt records.
func (s *Service) Name() string { return "webhook" }

// EventType is EventPost.
func (s *Service) EventType() string { return EventPost }

// Handler is HandlerPost.
func (s *Service) Handler() string { return HandlerPost }

// Owns reports whether target is an endpoint's host key (HostKey).
func (s *Service) Owns(target string) bool {
	_, ok := EndpointOfHost(target)
	return ok
}

// Request builds the signed POST of the webhook event ev at now: the body
// stored in the event, the headers of the Standard Webhooks
// specification, one signature per active secret. An event whose endpoint
// was removed returns ErrEndpointGone.
func (s *Service) Request(ctx context.Context, ev outbox.Event, now time.Time) (*http.Request, []byte, error) {
	var p post
	if err := json.Unmarshal(ev.Payload, &p); err != nil || p.Endpoint <= 0 || p.Body == "" {
		return nil, nil, outbox.Permanent(fmt.Errorf("%w: webhook %s: %v", delivery.ErrPayload, ev.ID, err))
	}
	k, err := s.keysOf(ctx, p.Endpoint, now)
	if err != nil {
		return nil, nil, err
	}
	if k.gone {
		return nil, nil, fmt.Errorf("%w: endpoint %d", ErrEndpointGone, p.Endpoint)
	}
	body := []byte(p.Body)
	req, err := http.NewRequest(http.MethodPost, k.url, strings.NewReader(p.Body))
	if err != nil {
		return nil, nil, outbox.Permanent(fmt.Errorf("webhook: endpoint %d: %w", p.Endpoint, err))
	}
	ts := now.Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", s.cfg.UserAgent)
	req.Header.Set("webhook-id", ev.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Sign(k.keys, ev.ID, ts, body))
	return req, body, nil
}

// Client is the client of the POSTs: opts (delivery's timeouts) with
// loopback and private addresses allowed, metadata addresses refused as
// DenyMetadata says.
func (s *Service) Client(opts activitypub.ClientOptions) *http.Client {
	opts.AllowPrivate = true
	opts.DenyMetadata = s.cfg.DenyMetadata
	opts.AllowAddrs = s.cfg.AllowAddrs
	return activitypub.NewClient(opts)
}

// Attempted counts one POST in Metrics.
func (s *Service) Attempted(outcome string, status int, took time.Duration) {
	s.cfg.Metrics.Attempt(outcome, status, took)
}

// Sign returns the webhook-signature header of a message: "v1,<base64
// HMAC-SHA256 of id.timestamp.body>" for each key, space-separated.
func Sign(keys [][]byte, id string, ts int64, body []byte) string {
	sigs := make([]string, 0, len(keys))
	for _, key := range keys {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id))
		m.Write([]byte{'.'})
		m.Write([]byte(strconv.FormatInt(ts, 10)))
		m.Write([]byte{'.'})
		m.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	return strings.Join(sigs, " ")
}

// secretPrefix begins a secret's text form.
const secretPrefix = "whsec_"

// NewSecret returns a new secret: whsec_ and the base64 of 32 random
// bytes.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return secretPrefix + base64.StdEncoding.EncodeToString(b)
}

// ParseSecret returns the key of a whsec_ secret.
func ParseSecret(secret string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	if err != nil || len(b) == 0 {
		return nil, errors.New("webhook: malformed secret")
	}
	return b, nil
}

// keysOf returns the URL and active keys of endpoint id, read at most
// every SecretCacheTTL.
func (s *Service) keysOf(ctx context.Context, id int64, now time.Time) (endpointKeys, error) {
	s.mu.Lock()
	k, ok := s.cache[id]
	s.mu.Unlock()
	if ok && time.Since(k.at) < s.cfg.SecretCacheTTL {
		return k, nil
	}
	k = endpointKeys{at: time.Now()}
	err := s.db.Read.QueryRowContext(ctx, sqlEndpoint, id).Scan(&k.url)
	if errors.Is(err, sql.ErrNoRows) {
		k.gone = true
	} else if err != nil {
		return k, fmt.Errorf("webhook: endpoint %d: %w", id, err)
	} else {
		rows, err := s.db.Read.QueryContext(ctx, sqlKeys, id, now.UnixMilli())
		if err != nil {
			return k, fmt.Errorf("webhook: secrets of endpoint %d: %w", id, err)
		}
		for rows.Next() {
			var secret string
			if err := rows.Scan(&secret); err != nil {
				rows.Close()
				return k, fmt.Errorf("webhook: secrets of endpoint %d: %w", id, err)
			}
			key, err := ParseSecret(secret)
			if err != nil {
				rows.Close()
				return k, outbox.Permanent(fmt.Errorf("webhook: endpoint %d: %w", id, err))
			}
			k.keys = append(k.keys, key)
		}
		if err := rows.Close(); err != nil {
			return k, err
		}
		if len(k.keys) == 0 {
			return k, fmt.Errorf("webhook: endpoint %d has no active secret", id)
		}
	}
	s.mu.Lock()
	if len(s.cache) >= 10_000 {
		clear(s.cache)
	}
	s.cache[id] = k
	s.mu.Unlock()
	return k, nil
}

// forget drops endpoint id from the cache.
func (s *Service) forget(id int64) {
	s.mu.Lock()
	delete(s.cache, id)
	s.wantsAt = time.Time{}
	s.mu.Unlock()
}

// validURL checks an endpoint URL: http or https, a host, no user
// information or fragment, at most MaxURL bytes. Loopback and private
// addresses are allowed: the application usually sits beside courier, and
// only the operator adds endpoints; an address RefuseAddr reports is not.
func (s *Service) validURL(raw string) error {
	if len(raw) > s.cfg.MaxURL {
		return store.Errorf(store.EINVALID, "url: longer than %d bytes", s.cfg.MaxURL)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return store.Errorf(store.EINVALID, "url %q: want an http or https URL", raw)
	}
	if u.User != nil || u.Fragment != "" {
		return store.Errorf(store.EINVALID, "url %q: must not carry user information or a fragment", raw)
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil && s.cfg.RefuseAddr != nil && s.cfg.RefuseAddr(ip) {
		return store.Errorf(store.EINVALID, "url %q: %s is a link-local or cloud metadata address; "+
			"an operator allows it by naming it in --webhook-allow-addresses", raw, ip)
	}
	return nil
}
