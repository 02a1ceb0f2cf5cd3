package app

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/limit"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/store"
)

// Config configures a Handler.
type Config struct {
	// DB is the database; required.
	DB *sqldb.DB
	// Store is the repository of local actors; required. Its base URL is
	// the instance's.
	Store *store.Store
	// Failures throttles failed bearer-token attempts per client address;
	// share the server's. Nil: a throttle of the handler's own.
	Failures *limit.Failures
	// PageSize is the number of items of an inbox page (default 20, at most
	// store.MaxPageSize).
	PageSize int
	// KeepAlive is the interval of a stream's keep-alive comments when it
	// has nothing to send (default 15 s).
	KeepAlive time.Duration
	// WriteTimeout is how long one write of a stream (an event, a
	// keep-alive) may wait for its client to read (default 30 s): a
	// stream whose client reads nothing for that long is closed and its
	// place freed (the client reconnects with Last-Event-ID).
	WriteTimeout time.Duration
	// Poll is how often an idle stream reads its actor's inbox view
	// without being woken (default 1 s): wake-ups come from this process's
	// commits and, on PostgreSQL with listening on, other processes'.
	Poll time.Duration
	// MaxStreams bounds the open streams of the process (default 1000);
	// MaxStreamsPerActor those of one actor (default 8). A stream over
	// either is answered 503 with Retry-After.
	MaxStreams         int
	MaxStreamsPerActor int
	// Logger receives failures that need an operator (nil discards).
	Logger *slog.Logger
	// Metrics counts the open streams and their events (nil counts
	// nothing).
	Metrics *metrics.App
}

func (c Config) withDefaults() Config {
	if c.Failures == nil {
		c.Failures = limit.NewFailures(nil)
	}
	if c.PageSize <= 0 {
		c.PageSize = store.DefaultPageSize
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = 15 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.Poll <= 0 {
		c.Poll = time.Second
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 1000
	}
	if c.MaxStreamsPerActor <= 0 {
		c.MaxStreamsPerActor = 8
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.DB == nil || c.Store == nil {
		return errors.New("app: Config.DB and Config.Store are required")
	}
	if c.PageSize > store.MaxPageSize {
		return fmt.Errorf("app: PageSize %d is over the maximum %d", c.PageSize, store.MaxPageSize)
	}
	return nil
}

// Handler serves the application's routes: an actor's inbox collection
// and its event stream. It is safe for concurrent use.
type Handler struct {
	cfg  Config
	db   *sqldb.DB
	st   *store.Store
	uris store.URIs
	log  *slog.Logger

	wake *waker

	mu       sync.Mutex
	streams  int
	perActor map[int64]int
	closed   chan struct{}
	close    sync.Once
}

// New returns a Handler for cfg. It registers an OnWrite hook on cfg.DB
// that wakes its streams.
func New(cfg Config) (*Handler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, db: cfg.DB, st: cfg.Store, uris: cfg.Store.URIs(), log: cfg.Logger,
		wake: newWaker(), perActor: map[int64]int{}, closed: make(chan struct{})}
	cfg.DB.OnWrite(h.wake.wake)
	return h, nil
}

// Close ends the open streams (their clients reconnect with Last-Event-ID)
// and refuses new ones; an http.Server's RegisterOnShutdown takes it, since
// Shutdown does not end streaming responses itself.
func (h *Handler) Close() { h.close.Do(func() { close(h.closed) }) }

// Register mounts the routes on r:
//
//	GET /users/{name}/inbox          the actor's inbox (owner only)
//	GET /users/{name}/inbox/stream   its Server-Sent Events (owner only)
//	GET /users/{name}/outbox/stream  the Server-Sent Events of the actor's
//	                                 outbox view (owner only); the outbox
//	                                 collection itself is server's
func (h *Handler) Register(r *mux.Router) {
	r.HandleFunc("/users/{name}/inbox", h.inbox).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/users/{name}/inbox/stream", h.streamOf(inboxView)).Methods(http.MethodGet)
	r.HandleFunc("/users/{name}/outbox/stream", h.streamOf(outboxView)).Methods(http.MethodGet)
}

// InboxURL is the id of the actor name's inbox collection.
func (h *Handler) InboxURL(name string) string { return h.uris.Inbox(name) }

// StreamURL is the eventStream of the actor name's inbox.
func (h *Handler) StreamURL(name string) string { return inboxView.streamURL(h.uris, name) }

// OutboxStreamURL is the eventStream of the actor name's outbox.
func (h *Handler) OutboxStreamURL(name string) string { return outboxView.streamURL(h.uris, name) }

// view is one of an actor's views that a stream follows: its items and
// counters tables (the same shape), and the collection it belongs to.
type view struct {
	collection string // "inbox" or "outbox": its metrics' label
	items      string // the items table
	counters   string // the per-actor counters table
	kind       string // the expression of an item's kind in a select
	uri        func(store.URIs, string) string
}

var (
	inboxView  = view{collection: "inbox", items: "app_inbox_items", counters: "app_inbox_counters", kind: "kind", uri: store.URIs.Inbox}
	outboxView = view{collection: "outbox", items: "app_outbox_items", counters: "app_outbox_counters", kind: "''", uri: store.URIs.Outbox}
)

// streamURL is the eventStream of the actor name's collection of v.
func (v view) streamURL(u store.URIs, name string) string { return v.uri(u, name) + "/stream" }

// token is the request's bearer token: the Authorization header's, or the
// access_token query parameter (an EventSource cannot set headers).
func token(r *http.Request) (string, bool) {
	if tok, ok := httpedge.Bearer(r); ok {
		return tok, true
	}
	if q := r.URL.Query(); q.Has("access_token") {
		return q.Get("access_token"), true
	}
	return "", false
}

// owner returns the actor of the route whose token the request carries:
// ENOTFOUND for no such actor, EUNAUTHORIZED without a token or with a
// wrong one (counted by Failures), EFORBIDDEN with another actor's.
func (h *Handler) owner(r *http.Request) (*store.Actor, error) {
	ctx := r.Context()
	name := mux.Vars(r)["name"]
	if _, err := h.st.ActorByName(ctx, name); err != nil {
		return nil, err
	}
	tok, ok := token(r)
	if !ok || tok == "" {
		return nil, store.Errorf(store.EUNAUTHORIZED, "this collection is its actor's only: a bearer token is required")
	}
	return httpedge.Auth{Store: h.st, Failures: h.cfg.Failures}.Authenticate(r, name, tok)
}

// filter is an inbox view's filter: ?type= and ?notifications=true.
type filter struct {
	types         []string
	notifications bool
}

// maxTypes bounds the types of one ?type= filter.
const maxTypes = 16

// pageParams reads a view's paging parameters, each error naming its
// parameter: page (true, or absent for the collection), and at most one
// of the cursors max_id and min_id.
func pageParams(q url.Values) (maxID, minID int64, err error) {
	if v := q.Get("page"); v != "" && v != "true" {
		return 0, 0, store.Errorf(store.EINVALID, "page is true (or absent, for the collection), not %q", v)
	}
	for _, c := range []struct {
		name string
		to   *int64
	}{{"max_id", &maxID}, {"min_id", &minID}} {
		if !q.Has(c.name) {
			continue
		}
		v := q.Get(c.name)
		if *c.to, err = httpedge.Cursor(v); err != nil || v == "" {
			return 0, 0, store.Errorf(store.EINVALID, "%s %q is not a non-negative integer (an item's seq)", c.name, v)
		}
	}
	if q.Has("max_id") && q.Has("min_id") {
		return 0, 0, store.Errorf(store.EINVALID, "max_id and min_id cannot be given together: one cursor pages one way")
	}
	return maxID, minID, nil
}

func parseFilter(q url.Values) (filter, error) {
	var f filter
	if q.Has("type") && len(strings.FieldsFunc(q.Get("type"), func(r rune) bool { return r == ',' || r == ' ' })) == 0 {
		return f, store.Errorf(store.EINVALID, "type is empty: give activity types, like type=Create,Like")
	}
	if v := q.Get("type"); v != "" {
		for _, t := range strings.Split(v, ",") {
			t = strings.TrimSpace(t)
			if t == "" {
				continue
			}
			if len(t) > 64 || strings.ContainsFunc(t, func(r rune) bool {
				return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == ':')
			}) {
				return f, store.Errorf(store.EINVALID, "type: %q is not an activity type", t)
			}
			if !slices.Contains(f.types, t) { // a type named twice is read once
				f.types = append(f.types, t)
			}
		}
		if len(f.types) > maxTypes {
			return f, store.Errorf(store.EINVALID, "type: at most %d types in one filter", maxTypes)
		}
	}
	switch v := q.Get("notifications"); v {
	case "", "false":
	case "true":
		f.notifications = true
	default:
		return f, store.Errorf(store.EINVALID, "notifications is true or false, not %q", v)
	}
	return f, nil
}

// query is the filter's parameters, in a fixed order, for links.
func (f filter) query() string {
	var b strings.Builder
	if len(f.types) > 0 {
		b.WriteString("&type=" + url.QueryEscape(strings.Join(f.types, ",")))
	}
	if f.notifications {
		b.WriteString("&notifications=true")
	}
	return b.String()
}

func (f filter) empty() bool { return len(f.types) == 0 && !f.notifications }

// where is the filter's SQL condition and arguments for one of its types
// ("" for none).
func (f filter) where(typ string) (string, []any) {
	var b strings.Builder
	var args []any
	if typ != "" {
		b.WriteString(" AND type = ?")
		args = append(args, typ)
	}
	if f.notifications {
		b.WriteString(" AND kind <> ''")
	}
	return b.String(), args
}

type collection struct {
	Context     any    `json:"@context"`
	ID          string `json:"id"`
	Type        string `json:"type"`
	TotalItems  *int64 `json:"totalItems,omitempty"`
	First       string `json:"first"`
	EventStream string `json:"eventStream"`
}

type collectionPage struct {
	Context      any               `json:"@context"`
	ID           string            `json:"id"`
	Type         string            `json:"type"`
	PartOf       string            `json:"partOf"`
	Next         string            `json:"next,omitempty"`
	Prev         string            `json:"prev,omitempty"`
	OrderedItems []json.RawMessage `json:"orderedItems"`
}

// sseContext is the context of the documents naming an eventStream.
var sseContext = []any{activitypub.ActivityStreams, activitypub.EventStreamTerm}

// inbox serves GET /users/{name}/inbox: without page parameters the
// OrderedCollection, with them a page, newest first, cursor-paged by seq.
func (h *Handler) inbox(w http.ResponseWriter, r *http.Request) {
	a, err := h.owner(r)
	if err != nil {
		httpedge.WriteError(w, r, h.log, err)
		return
	}
	q := r.URL.Query()
	f, err := parseFilter(q)
	if err != nil {
		httpedge.WriteError(w, r, h.log, err)
		return
	}
	maxID, minID, err := pageParams(q)
	if err != nil {
		httpedge.WriteError(w, r, h.log, err)
		return
	}
	base := h.uris.Inbox(a.Name)
	w.Header().Set("Cache-Control", "private, no-store")
	if q.Get("page") == "" && maxID == 0 && minID == 0 {
		c := collection{Context: sseContext, ID: base, Type: "OrderedCollection",
			First: base + "?page=true" + f.query(), EventStream: h.StreamURL(a.Name)}
		if f.empty() {
			n, err := h.total(r.Context(), inboxView, a.ID)
			if err != nil {
				httpedge.WriteError(w, r, h.log, err)
				return
			}
			c.TotalItems = &n
		}
		httpedge.WriteJSON(w, http.StatusOK, "application/activity+json", c)
		return
	}
	items, err := h.page(r.Context(), inboxView, a.ID, f, maxID, minID, h.cfg.PageSize+1)
	if err != nil {
		httpedge.WriteError(w, r, h.log, err)
		return
	}
	more := len(items) > h.cfg.PageSize
	if more {
		if minID > 0 {
			items = items[1:] // the extra one, the newest read, is the next newer page's
		} else {
			items = items[:h.cfg.PageSize]
		}
	}
	id := base + "?page=true" + f.query()
	switch {
	case maxID > 0:
		id += "&max_id=" + strconv.FormatInt(maxID, 10)
	case minID > 0:
		id += "&min_id=" + strconv.FormatInt(minID, 10)
	}
	p := collectionPage{Context: activitypub.ActivityStreams, ID: id, Type: "OrderedCollectionPage", PartOf: base,
		OrderedItems: make([]json.RawMessage, 0, len(items))}
	for _, it := range items {
		doc, err := withPlace(it.doc, it.seq, it.kind)
		if err != nil {
			httpedge.WriteError(w, r, h.log, fmt.Errorf("app: inbox item %d: %w", it.seq, err))
			return
		}
		p.OrderedItems = append(p.OrderedItems, doc)
	}
	link := func(param string, seq int64) string {
		return base + "?page=true" + f.query() + "&" + param + "=" + strconv.FormatInt(seq, 10)
	}
	switch {
	case len(items) > 0:
		// Older items: past a full page read newest first, and always
		// past a min_id page (the cursor's side).
		if more || minID > 0 {
			p.Next = link("max_id", items[len(items)-1].seq)
		}
		p.Prev = link("min_id", items[0].seq)
	case minID > 0:
		p.Prev = link("min_id", minID) // nothing newer yet: ask again later
	}
	httpedge.WriteJSON(w, http.StatusOK, "application/activity+json", p)
}

// withPlace returns an inbox item's document with the item's "seq" (its
// place in the view, the stream's event id) and "kind" (why it concerns
// the actor; left out when it only fills the timeline), as the webhook's
// data names them. The activity's own properties of those names, if any,
// give way.
func withPlace(doc json.RawMessage, seq int64, kind string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil {
		return nil, err
	}
	head := `{"seq":` + strconv.FormatInt(seq, 10)
	if kind != "" {
		k, err := json.Marshal(kind)
		if err != nil {
			return nil, err
		}
		head += `,"kind":` + string(k)
	}
	_, hasSeq := m["seq"]
	_, hasKind := m["kind"]
	if !hasSeq && !hasKind {
		rest := bytes.TrimSpace(doc)[1:]
		if len(m) > 0 {
			head += ","
		}
		return append([]byte(head), rest...), nil
	}
	delete(m, "seq")
	delete(m, "kind")
	m["seq"] = json.RawMessage(strconv.FormatInt(seq, 10))
	if kind != "" {
		k, _ := json.Marshal(kind)
		m["kind"] = k
	}
	return marshal(m)
}

// total is the number of items of the actor's view v: its counter (items
// are never removed but with their actor).
func (h *Handler) total(ctx context.Context, v view, actorID int64) (int64, error) {
	var n int64
	err := h.db.Read.QueryRowContext(ctx, `SELECT seq FROM `+v.counters+` WHERE actor_id = ?`, actorID).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("app: %s total: %w", v.collection, err)
	}
	return n, nil
}

type row struct {
	seq  int64
	typ  string
	kind string
	doc  json.RawMessage
}

// page reads up to limit items of the actor's view v newest first: older
// than maxID when set, else newer than minID when set (the limit oldest of
// those, still returned newest first), else the newest. Each query reads
// an index from a cursor, so that a page costs the same at any depth: the
// primary key (actor_id, seq), the notifications' partial index, or, for
// each type of a ?type= filter, (actor_id, type, seq); the types' reads
// are merged here.
func (h *Handler) page(ctx context.Context, v view, actorID int64, f filter, maxID, minID int64, limit int) ([]row, error) {
	types := f.types
	if len(types) == 0 {
		types = []string{""}
	}
	var out []row
	for _, typ := range types {
		rows, err := h.pageOf(ctx, v, actorID, f, typ, maxID, minID, limit)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	older := minID == 0 || maxID > 0
	slices.SortFunc(out, func(a, b row) int {
		if older {
			return cmp.Compare(b.seq, a.seq)
		}
		return cmp.Compare(a.seq, b.seq)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	if !older {
		slices.Reverse(out)
	}
	return out, nil
}

// pageOf is one query of page: the items of type typ ("" for any), in
// the cursor's order (newest first, or oldest first after min_id).
func (h *Handler) pageOf(ctx context.Context, v view, actorID int64, f filter, typ string, maxID, minID int64, limit int) ([]row, error) {
	cond, fargs := f.where(typ)
	args := []any{actorID}
	q := `SELECT seq, type, ` + v.kind + `, document FROM ` + v.items + ` WHERE actor_id = ?`
	order := ` ORDER BY seq DESC`
	switch {
	case maxID > 0:
		q += ` AND seq < ?`
		args = append(args, maxID)
	case minID > 0:
		q += ` AND seq > ?`
		args = append(args, minID)
		order = ` ORDER BY seq ASC`
	}
	args = append(args, fargs...)
	args = append(args, limit)
	rows, err := h.db.Read.QueryContext(ctx, q+cond+order+` LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("app: %s page: %w", v.collection, err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var it row
		var doc string
		if err := rows.Scan(&it.seq, &it.typ, &it.kind, &doc); err != nil {
			return nil, fmt.Errorf("app: %s page: %w", v.collection, err)
		}
		it.doc = json.RawMessage(doc)
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("app: %s page: %w", v.collection, err)
	}
	return out, nil
}

// waker wakes every waiter at once: a waiter takes the current channel,
// and wake closes it and makes the next.
type waker struct {
	mu sync.Mutex
	ch chan struct{}
}

func newWaker() *waker { return &waker{ch: make(chan struct{})} }

func (w *waker) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *waker) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.ch)
	w.ch = make(chan struct{})
}
