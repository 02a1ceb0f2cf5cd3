package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
)

// Activity is an activity courier built for a local actor, with the exact
// bytes it federated.
type Activity struct {
	RowID     int64
	URI       string
	ActorURI  string
	ActorID   int64
	Type      string
	ObjectURI string
	// Document is the activity's JSON exactly as sent.
	Document  json.RawMessage
	Published time.Time
	// Public reports whether as:Public is among the recipients; only public
	// activities appear in the outbox collection for other readers.
	Public bool
	// WithdrawnAt is set once the activity left the outbox: an Undo of it
	// was sent, or (a Create or Update) its object was deleted.
	WithdrawnAt time.Time
	// EventID is the outbox event that carries the activity.
	EventID string
}

// LocalID returns the {id} of /activities/{id}.
func (a *Activity) LocalID() string {
	i := strings.LastIndexByte(a.URI, '/')
	return a.URI[i+1:]
}

const activityColumns = `id, uri, actor_uri, COALESCE(actor_id, 0), type, COALESCE(object_uri, ''), document,
	published_at, public, withdrawn_at, COALESCE(event_id, '')`

func scanActivity(row interface{ Scan(...any) error }) (*Activity, error) {
	var a Activity
	var doc string
	var published int64
	var withdrawn sql.NullInt64
	if err := row.Scan(&a.RowID, &a.URI, &a.ActorURI, &a.ActorID, &a.Type, &a.ObjectURI, &doc,
		&published, &a.Public, &withdrawn, &a.EventID); err != nil {
		return nil, err
	}
	a.Document = json.RawMessage(doc)
	a.Published, a.WithdrawnAt = fromMS(published), fromNullMS(withdrawn)
	return &a, nil
}

// ActivityByURI returns the activity with id uri, or ENOTFOUND.
func (s *Store) ActivityByURI(ctx context.Context, uri string) (*Activity, error) {
	return activityByURI(ctx, s.db.Read, uri)
}

// ActivityByLocalID returns the activity served at /activities/{id}, or
// ENOTFOUND.
func (s *Store) ActivityByLocalID(ctx context.Context, id string) (*Activity, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, Errorf(ENOTFOUND, "no activity %q", id)
	}
	return s.ActivityByURI(ctx, s.uris.Activity(id))
}

func activityByURI(ctx context.Context, q queryer, uri string) (*Activity, error) {
	a, err := scanActivity(q.QueryRowContext(ctx, `SELECT `+activityColumns+` FROM activities WHERE uri = ?`, uri))
	if err != nil {
		return nil, wrap("activity", notFound(err, ENOTFOUND, "no activity %q", uri))
	}
	return a, nil
}

// PageQuery selects one page of a keyset-paginated collection. Cursors are
// row ids: Before returns items older than it, After items newer than it;
// both zero is the newest page.
type PageQuery struct {
	Before int64
	After  int64
	Limit  int // default DefaultPageSize, at most MaxPageSize
	// IncludePrivate includes activities without as:Public (the owner
	// reading their own outbox).
	IncludePrivate bool
}

// Page is one page of activities, newest first.
type Page struct {
	Items []*Activity
	Total int
	// Next is the cursor (Before) of the older page, 0 when there is none.
	Next int64
	// Prev is the cursor (After) of the newer page, 0 when there is none.
	Prev int64
}

// OutboxPage returns a page of the local actor actorID's outbox.
func (s *Store) OutboxPage(ctx context.Context, actorID int64, q PageQuery) (*Page, error) {
	// Withdrawn activities (undone, or about a deleted object) are not shown.
	where := `actor_id = ? AND withdrawn_at IS NULL`
	if !q.IncludePrivate {
		where = `actor_id = ? AND public = 1 AND withdrawn_at IS NULL`
	}
	p := &Page{}
	if err := s.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM activities WHERE `+where, actorID).Scan(&p.Total); err != nil {
		return nil, wrap("outbox page", err)
	}
	limit := clampLimit(q.Limit)
	var rows *sql.Rows
	var err error
	if q.After > 0 {
		rows, err = s.db.Read.QueryContext(ctx, `SELECT `+activityColumns+` FROM activities WHERE `+where+
			` AND id > ? ORDER BY id ASC LIMIT ?`, actorID, q.After, limit+1)
	} else {
		before := q.Before
		if before <= 0 {
			before = 1<<63 - 1
		}
		rows, err = s.db.Read.QueryContext(ctx, `SELECT `+activityColumns+` FROM activities WHERE `+where+
			` AND id < ? ORDER BY id DESC LIMIT ?`, actorID, before, limit+1)
	}
	if err != nil {
		return nil, wrap("outbox page", err)
	}
	defer rows.Close()
	for rows.Next() {
		a, err := scanActivity(rows)
		if err != nil {
			return nil, wrap("outbox page", err)
		}
		p.Items = append(p.Items, a)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("outbox page", err)
	}
	more := len(p.Items) > limit
	if more {
		p.Items = p.Items[:limit]
	}
	if q.After > 0 {
		// Fetched oldest first; serve newest first.
		for i, j := 0, len(p.Items)-1; i < j; i, j = i+1, j-1 {
			p.Items[i], p.Items[j] = p.Items[j], p.Items[i]
		}
	}
	if len(p.Items) == 0 {
		return p, nil
	}
	newest, oldest := p.Items[0].RowID, p.Items[len(p.Items)-1].RowID
	// Whether an older or newer page exists: from the over-fetch in the
	// direction read, from a probe in the other.
	olderExists, newerExists := more, more
	if q.After > 0 {
		olderExists, err = s.exists(ctx, `SELECT 1 FROM activities WHERE `+where+` AND id < ? LIMIT 1`, actorID, oldest)
	} else {
		newerExists, err = s.exists(ctx, `SELECT 1 FROM activities WHERE `+where+` AND id > ? LIMIT 1`, actorID, newest)
	}
	if err != nil {
		return nil, wrap("outbox page", err)
	}
	if olderExists {
		p.Next = oldest
	}
	if newerExists {
		p.Prev = newest
	}
	return p, nil
}

func (s *Store) exists(ctx context.Context, q string, args ...any) (bool, error) {
	var one int
	err := s.db.Read.QueryRowContext(ctx, q, args...).Scan(&one)
	if err == sql.ErrNoRows {
		return false, nil
	}
	return err == nil, err
}

// pendingEvent is an event id and time chosen before the activity it
// carries is built, so ids derived from the event (the activity's, a new
// object's) are known up front.
type pendingEvent struct {
	ID string
	At time.Time
	// Target is the activity's "target" (an Add or Remove's collection).
	Target string
	// Context is the @context of the activity built (nil: ActivityStreams).
	Context any
	// Extra are a QuoteRequest's instrument and an Accept's result.
	Extra activitypub.Extra
}

func (s *Store) newEvent() pendingEvent {
	return pendingEvent{ID: uuid.NewString(), At: s.clock()}
}

// emitTx builds, stores and enqueues one outgoing activity in tx; see the
// package documentation.
func (s *Store) emitTx(ctx context.Context, tx *sql.Tx, ev pendingEvent, actor *Actor, typ string, object any, to, cc []string) (*Activity, error) {
	a, _, err := s.emit(ctx, tx, ev, actor, typ, object, to, cc, false)
	return a, err
}

// emitOnceTx is emitTx for an event id that may have been used before (one
// derived from an inbound event): when the activity is stored already, by
// an earlier call or by a transaction beside this one (which this waits
// for), it is returned, nothing is enqueued, and the bool is false.
func (s *Store) emitOnceTx(ctx context.Context, tx *sql.Tx, ev pendingEvent, actor *Actor, typ string, object any, to, cc []string) (*Activity, bool, error) {
	return s.emit(ctx, tx, ev, actor, typ, object, to, cc, true)
}

func (s *Store) emit(ctx context.Context, tx *sql.Tx, ev pendingEvent, actor *Actor, typ string, object any, to, cc []string, once bool) (*Activity, bool, error) {
	target := ev.Target
	if t, ok := object.(targeted); ok {
		object, target = t.Object, t.Target
	}
	ldContext := ev.Context
	if actor.Ed25519Key != nil {
		ldContext = activitypub.WithDataIntegrity(ldContext)
	}
	doc, id, err := activitypub.NewActivityExtra(ldContext, s.uris.Base, ev.ID, typ, actor.URI, object, target, ev.Extra, to, cc, ev.At)
	if err != nil {
		return nil, false, fmt.Errorf("store: build %s: %w", typ, err)
	}
	if actor.Ed25519Key != nil {
		// The proof is made once, here, and stored with the activity: a
		// retried delivery sends these bytes, never a new signature.
		if doc, err = activitypub.AddProof(doc, activitypub.Ed25519KeyID(actor.URI), actor.Ed25519Key, ev.At); err != nil {
			return nil, false, fmt.Errorf("store: sign %s: %w", typ, err)
		}
	}
	payload, err := json.Marshal(activitypub.Outgoing{Actor: actor.URI, Activity: doc})
	if err != nil {
		return nil, false, fmt.Errorf("store: build %s: %w", typ, err)
	}
	a := &Activity{
		URI: id, ActorURI: actor.URI, ActorID: actor.ID, Type: typ,
		ObjectURI: objectRef(object), Document: doc, Published: ev.At,
		Public: containsPublic(to) || containsPublic(cc), EventID: ev.ID,
	}
	conflict := ``
	if once {
		conflict = ` ON CONFLICT (uri) DO NOTHING`
	}
	err = tx.QueryRowContext(ctx, `INSERT INTO activities
		(uri, actor_uri, actor_id, type, object_uri, document, published_at, public, event_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`+conflict+` RETURNING id`,
		a.URI, a.ActorURI, a.ActorID, a.Type, nullString(a.ObjectURI), string(doc), ms(a.Published), a.Public, ev.ID, ms(ev.At),
	).Scan(&a.RowID)
	if once && errors.Is(err, sql.ErrNoRows) {
		existing, err := activityByURI(ctx, tx, a.URI)
		return existing, false, err
	}
	if err != nil {
		return nil, false, wrap("store activity", err)
	}
	// The order key goes with the event (indexed): the fan-out of a later
	// activity of the same key waits for this one's (package delivery).
	var orderKey string
	if activitypub.Ordered(typ) {
		if act, err := activitypub.ParseActivity(doc); err == nil {
			orderKey, _ = activitypub.OrderKey(act)
		}
	}
	if err := outbox.Enqueue(ctx, tx, outbox.Event{
		ID: ev.ID, Type: activitypub.EventOutgoing, Payload: payload, OccurredAt: ev.At, OrderKey: orderKey,
	}); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	hooks := s.activityHooks
	s.mu.Unlock()
	for _, h := range hooks {
		if err := h(ctx, tx, a); err != nil {
			return nil, false, err
		}
	}
	return a, true, nil
}

// ActivityHook runs in the transaction that stores a new activity of a
// local actor (every local write builds its activities through one path),
// after the activity is stored and enqueued; an error rolls the write
// back. It must not keep a.
type ActivityHook func(ctx context.Context, tx *sql.Tx, a *Activity) error

// OnActivityTx registers h to run for every activity a local actor writes
// from now on (the application's outbox view records them so). An
// activity stored already (an emit of an event id used before) does not
// run the hooks again.
func (s *Store) OnActivityTx(h ActivityHook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.activityHooks = append(s.activityHooks, h)
}

// objectRef returns the id of an activity's object: the string itself, or
// the "id" of an embedded document.
func objectRef(object any) string {
	switch o := object.(type) {
	case string:
		return o
	case map[string]any:
		id, _ := o["id"].(string)
		return id
	case interface{ ObjectID() string }:
		return o.ObjectID()
	}
	b, err := json.Marshal(object)
	if err != nil {
		return ""
	}
	var v struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(b, &v) // a non-object has no id
	return v.ID
}
