package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"

	"github.com/google/uuid"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
)

// This file holds quote consent (FEP-044f, as Mastodon 4.5 implements it).
//
// Every local object carries interactionPolicy.canQuote (GoToSocial's
// namespace): the client's, set on the object, or else its actor's default
// (SetQuotePolicy), or else everyone, approved automatically. A
// QuoteRequest a local object receives is answered by that policy
// (ReceiveQuoteRequestTx): an Accept whose result is a QuoteAuthorization
// served at /quotes/{id}, a Reject, or, for manual approval, a pending
// stamp the author accepts or rejects (AnswerQuote) as it answers a follow
// request. Revoking a stamp (RevokeQuote), or deleting the quoted object,
// sends the quoter a Delete of the stamp. A local quote of another actor's
// object sends a QuoteRequest to its author (CreateObject); the answer
// (AnswerQuoteRequestTx) updates the quote with quoteAuthorization.

// QuoteRequestType and QuoteAuthorizationType are FEP-044f's types.
const (
	QuoteRequestType       = "QuoteRequest"
	QuoteAuthorizationType = "QuoteAuthorization"
)

// Outcomes of an inbound QuoteRequest (ReceiveQuoteRequestTx).
const (
	QuoteAccepted = "quote_accepted" // an Accept with a stamp enqueued
	QuotePending  = "quote_pending"  // awaiting the author's approval
	QuoteRejected = "quote_rejected" // a Reject enqueued
)

// CanQuote is an interactionPolicy.canQuote: who may quote, approved
// automatically or by the author. Entries are the public collection
// (activitypub.Public), the author's followers collection, or actor ids.
// "Nobody" is the author alone in AutomaticApproval (an empty list does
// not survive JSON-LD).
type CanQuote struct {
	AutomaticApproval []string `json:"automaticApproval"`
	ManualApproval    []string `json:"manualApproval,omitempty"`
}

// DefaultCanQuote is the policy of an object whose actor set none:
// everyone, approved automatically.
func DefaultCanQuote() CanQuote { return CanQuote{AutomaticApproval: []string{activitypub.Public}} }

// quoteTerms are the context entries of quote consent, as Mastodon defines
// them (its interaction_policies, quote_requests and quote_authorizations
// extensions), the stamp's two links typed as ids.
func quoteTerms(m map[string]any) {
	m["gts"] = "https://gotosocial.org/ns#"
	m["interactionPolicy"] = map[string]any{"@id": "gts:interactionPolicy", "@type": "@id"}
	m["canQuote"] = map[string]any{"@id": "gts:canQuote", "@type": "@id"}
	m["automaticApproval"] = map[string]any{"@id": "gts:automaticApproval", "@type": "@id"}
	m["manualApproval"] = map[string]any{"@id": "gts:manualApproval", "@type": "@id"}
	m["quoteAuthorization"] = map[string]any{"@id": "https://w3id.org/fep/044f#quoteAuthorization", "@type": "@id"}
	m["QuoteRequest"] = "https://w3id.org/fep/044f#QuoteRequest"
	m["QuoteAuthorization"] = "https://w3id.org/fep/044f#QuoteAuthorization"
	// Ids, as GoToSocial's namespace and FEP-044f's examples define them
	// (Mastodon's context leaves out "@type": "@id", which makes a JSON-LD
	// reader take the values for strings; Mastodon reads them as JSON).
	m["interactingObject"] = map[string]any{"@id": "gts:interactingObject", "@type": "@id"}
	m["interactionTarget"] = map[string]any{"@id": "gts:interactionTarget", "@type": "@id"}
}

// QuoteContext is the @context of quote activities and stamps.
func QuoteContext() []any {
	m := map[string]any{}
	quoteTerms(m)
	return []any{activitypub.ActivityStreams, m}
}

// NormalizeCanQuote checks a canQuote of actor's: each entry the public
// collection (any of its spellings), actor's followers collection or an
// absolute http(s) URL (an actor). Both lists empty is nobody (the actor
// alone, automatically).
func (s *Store) NormalizeCanQuote(actor *Actor, cq CanQuote) (CanQuote, error) {
	norm := func(l []string) ([]string, error) {
		out := make([]string, 0, len(l))
		for _, v := range l {
			switch {
			case activitypub.IsPublic(v):
				v = activitypub.Public
			case v == s.uris.Followers(actor.Name), v == actor.URI:
			case !absoluteURL(v):
				return nil, Errorf(EUNPROCESSABLE, "canQuote entry %q is neither the public collection, your followers nor an actor id", v)
			}
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
		return out, nil
	}
	var err error
	if cq.AutomaticApproval, err = norm(cq.AutomaticApproval); err != nil {
		return cq, err
	}
	if cq.ManualApproval, err = norm(cq.ManualApproval); err != nil {
		return cq, err
	}
	if len(cq.AutomaticApproval)+len(cq.ManualApproval) == 0 {
		cq.AutomaticApproval = []string{actor.URI}
	}
	if len(cq.ManualApproval) == 0 {
		cq.ManualApproval = nil
	}
	return cq, nil
}

// ParseCanQuote reads interactionPolicy.canQuote from a decoded
// interactionPolicy value; ok is false when it has none.
func ParseCanQuote(policy any) (cq CanQuote, ok bool, err error) {
	m, isMap := policy.(map[string]any)
	if !isMap {
		if policy == nil {
			return cq, false, nil
		}
		return cq, false, Errorf(EUNPROCESSABLE, "interactionPolicy must be an object")
	}
	v, has := m["canQuote"]
	if !has || v == nil {
		return cq, false, nil
	}
	c, isMap := v.(map[string]any)
	if !isMap {
		return cq, false, Errorf(EUNPROCESSABLE, "interactionPolicy.canQuote must be an object")
	}
	for k, dst := range map[string]*[]string{"automaticApproval": &cq.AutomaticApproval, "manualApproval": &cq.ManualApproval} {
		switch x := c[k].(type) {
		case nil:
		case string:
			*dst = []string{x}
		case []any:
			for _, e := range x {
				str, isStr := e.(string)
				if !isStr {
					return cq, false, Errorf(EUNPROCESSABLE, "interactionPolicy.canQuote.%s must list ids", k)
				}
				*dst = append(*dst, str)
			}
		default:
			return cq, false, Errorf(EUNPROCESSABLE, "interactionPolicy.canQuote.%s must list ids", k)
		}
	}
	return cq, true, nil
}

// SetQuotePolicy sets actor's default canQuote, which its objects published
// from now on without a policy of their own carry.
func (s *Store) SetQuotePolicy(ctx context.Context, actor *Actor, cq CanQuote) (CanQuote, error) {
	cq, err := s.NormalizeCanQuote(actor, cq)
	if err != nil {
		return cq, err
	}
	b, _ := json.Marshal(cq)
	_, err = s.db.Write.ExecContext(ctx, `INSERT INTO actor_quote_policies (actor_id, can_quote, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (actor_id) DO UPDATE SET can_quote = excluded.can_quote, updated_at = excluded.updated_at`,
		actor.ID, string(b), ms(s.clock()))
	return cq, wrap("set quote policy", err)
}

// QuotePolicy returns actor's default canQuote.
func (s *Store) QuotePolicy(ctx context.Context, actor *Actor) (CanQuote, error) {
	return s.quotePolicy(ctx, s.db.Read, actor.ID)
}

func (s *Store) quotePolicy(ctx context.Context, q queryer, actorID int64) (CanQuote, error) {
	var raw string
	err := q.QueryRowContext(ctx, `SELECT can_quote FROM actor_quote_policies WHERE actor_id = ?`, actorID).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return DefaultCanQuote(), nil
	}
	if err != nil {
		return CanQuote{}, wrap("quote policy", err)
	}
	var cq CanQuote
	if json.Unmarshal([]byte(raw), &cq) != nil {
		return DefaultCanQuote(), nil
	}
	return cq, nil
}

// withQuotePolicyTx returns props with interactionPolicy.canQuote set: the
// client's (normalised), else the one of prev (the stored document, on an
// update), else actor's default. Other sub-policies the client sent are
// kept as sent.
func (s *Store) withQuotePolicyTx(ctx context.Context, tx *sql.Tx, actor *Actor, props map[string]any, prev []byte) (map[string]any, error) {
	policy := map[string]any{}
	if m, ok := props["interactionPolicy"].(map[string]any); ok {
		for k, v := range m {
			policy[k] = v
		}
	}
	cq, ok, err := ParseCanQuote(props["interactionPolicy"])
	if err != nil {
		return nil, err
	}
	if !ok && len(prev) > 0 {
		var d map[string]any
		if json.Unmarshal(prev, &d) == nil {
			cq, ok, _ = ParseCanQuote(d["interactionPolicy"])
		}
	}
	if !ok {
		if cq, err = s.quotePolicy(ctx, tx, actor.ID); err != nil {
			return nil, err
		}
	}
	if cq, err = s.NormalizeCanQuote(actor, cq); err != nil {
		return nil, err
	}
	policy["canQuote"] = cq
	return withValue(props, "interactionPolicy", policy), nil
}

// quoteDecision is how cq answers quoter's request to quote author's
// object: "automatic", "manual" or "" (refused). follower is whether the
// quoter is an accepted follower of the author. An author may always quote
// itself.
func quoteDecision(cq CanQuote, author, followers, quoter string, follower bool) string {
	if quoter == author {
		return "automatic"
	}
	match := func(l []string) bool {
		for _, v := range l {
			if activitypub.IsPublic(v) || v == quoter || (v == followers && follower) {
				return true
			}
		}
		return false
	}
	switch {
	case match(cq.AutomaticApproval):
		return "automatic"
	case match(cq.ManualApproval):
		return "manual"
	}
	return ""
}

// objectCanQuote is the canQuote of the local object o (its document's),
// or its actor's default.
func (s *Store) objectCanQuote(ctx context.Context, q queryer, o *Object) (CanQuote, error) {
	var d map[string]any
	if json.Unmarshal(o.Document, &d) == nil {
		if cq, ok, err := ParseCanQuote(d["interactionPolicy"]); ok && err == nil {
			return cq, nil
		}
	}
	return s.quotePolicy(ctx, q, o.ActorID)
}

// QuoteRequestIn is an inbound QuoteRequest.
type QuoteRequestIn struct {
	// ID is the request's id; Actor the quoter; Object the quoted object;
	// Instrument the quote's id.
	ID, Actor, Object, Instrument string
}

// quoteRequestObject is the QuoteRequest an answer embeds.
func quoteRequestObject(r QuoteRequestIn) map[string]any {
	return map[string]any{"id": r.ID, "type": QuoteRequestType, "actor": r.Actor, "object": r.Object, "instrument": r.Instrument}
}

// Stamp is a QuoteAuthorization of a local object (pending while it awaits
// its author's approval).
type Stamp struct {
	LocalID   string
	URI       string
	ObjectID  int64 // the quoted object's row
	ActorID   int64 // its author
	QuoteURI  string
	QuoterURI string
	Request   string
	State     string
}

const stampColumns = `local_id, object_id, actor_id, quote_uri, quoter_uri, request_uri, state`

func (s *Store) scanStamp(row interface{ Scan(...any) error }) (*Stamp, error) {
	var st Stamp
	if err := row.Scan(&st.LocalID, &st.ObjectID, &st.ActorID, &st.QuoteURI, &st.QuoterURI, &st.Request, &st.State); err != nil {
		return nil, err
	}
	st.URI = s.uris.Quote(st.LocalID)
	return &st, nil
}

// StampByLocalID returns the stamp served at /quotes/{id}, or ENOTFOUND.
func (s *Store) StampByLocalID(ctx context.Context, id string) (*Stamp, error) {
	st, err := s.scanStamp(s.db.Read.QueryRowContext(ctx, `SELECT `+stampColumns+` FROM quote_stamps WHERE local_id = ?`, id))
	if err != nil {
		return nil, wrap("stamp", notFound(err, ENOTFOUND, "no quote authorization %q", id))
	}
	return st, nil
}

// StampDocument is the QuoteAuthorization of st, of the quoted object
// quoted (authored by author), as Mastodon serves one.
func StampDocument(st *Stamp, author, quoted string) map[string]any {
	return map[string]any{
		"@context": QuoteContext(), "id": st.URI, "type": QuoteAuthorizationType,
		"attributedTo": author, "interactingObject": st.QuoteURI, "interactionTarget": quoted,
	}
}

// ReceiveQuoteRequestTx answers, in tx, the QuoteRequest r for a local
// object by the object's canQuote: an Accept whose result is a new stamp,
// a pending stamp for the author's approval, or a Reject. The answer's
// event id is derived from eventID, the inbound event's. A request for an
// object that is not local, or deleted, is ENOTFOUND; one asked again is
// answered as the first was.
func (s *Store) ReceiveQuoteRequestTx(ctx context.Context, tx *sql.Tx, eventID string, r QuoteRequestIn) (string, error) {
	if r.ID == "" || r.Actor == "" || r.Object == "" || r.Instrument == "" {
		return "", Errorf(EINVALID, "a QuoteRequest needs its id, actor, object and instrument")
	}
	o, err := s.ObjectByURITx(ctx, tx, r.Object)
	if err != nil {
		return "", err
	}
	if !o.Local() || o.Deleted() {
		return "", Errorf(ENOTFOUND, "no local object %q", r.Object)
	}
	author, err := s.actorByIDTx(ctx, tx, o.ActorID)
	if err != nil {
		return "", err
	}
	ev := pendingEvent{ID: eventID, At: s.clock()}
	existing, err := s.scanStamp(tx.QueryRowContext(ctx, `SELECT `+stampColumns+` FROM quote_stamps
		WHERE object_id = ? AND quote_uri = ?`, o.RowID, r.Instrument))
	switch {
	case err == nil && existing.QuoterURI != r.Actor:
		return "", Errorf(EFORBIDDEN, "%q is quoted by %q, not %q", r.Instrument, existing.QuoterURI, r.Actor)
	case err == nil && existing.State == "pending":
		return QuotePending, nil
	case err == nil && existing.State == "accepted":
		_, err := s.answerQuoteTx(ctx, tx, ev, author, r, "Accept", existing.URI, true)
		return QuoteAccepted, err
	case err == nil: // revoked: asked again, decided again
		if _, err := tx.ExecContext(ctx, `DELETE FROM quote_stamps WHERE local_id = ?`, existing.LocalID); err != nil {
			return "", err
		}
	case !errors.Is(err, sql.ErrNoRows):
		return "", err
	}
	decision := ""
	visible := o.Visibility == VisibilityPublic || o.Visibility == VisibilityUnlisted
	blocked, err := s.BlocksTx(ctx, tx, author.ID, r.Actor)
	if err != nil {
		return "", err
	}
	if visible && !blocked {
		cq, err := s.objectCanQuote(ctx, tx, o)
		if err != nil {
			return "", err
		}
		var follower int
		err = tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM followers WHERE actor_id = ? AND follower_uri = ? AND state = 'accepted'`,
			author.ID, r.Actor).Scan(&follower)
		if err != nil {
			return "", err
		}
		decision = quoteDecision(cq, author.URI, s.uris.Followers(author.Name), r.Actor, follower > 0)
	}
	if decision == "" {
		_, err := s.answerQuoteTx(ctx, tx, ev, author, r, "Reject", "", true)
		return QuoteRejected, err
	}
	state := "accepted"
	if decision == "manual" {
		state = "pending"
	}
	local := uuid.NewString()
	if _, err := tx.ExecContext(ctx, `INSERT INTO quote_stamps (local_id, object_id, actor_id, quote_uri, quoter_uri, request_uri,
		state, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		local, o.RowID, author.ID, r.Instrument, r.Actor, r.ID, state, ms(ev.At), ms(ev.At)); err != nil {
		return "", err
	}
	if state == "pending" {
		return QuotePending, nil
	}
	_, err = s.answerQuoteTx(ctx, tx, ev, author, r, "Accept", s.uris.Quote(local), true)
	return QuoteAccepted, err
}

// answerQuoteTx enqueues author's Accept (with the stamp as result) or
// Reject of the QuoteRequest r, to its quoter. derived says ev.ID is the
// inbound event's: the answer's is derived from it, and stored once.
func (s *Store) answerQuoteTx(ctx context.Context, tx *sql.Tx, ev pendingEvent, author *Actor, r QuoteRequestIn, typ, stamp string, derived bool) (*Activity, error) {
	ev.Context = QuoteContext()
	if stamp != "" {
		ev.Extra.Result = stamp
	}
	if derived {
		ev.ID = outbox.ChildID(ev.ID, "quote-answer")
		a, _, err := s.emitOnceTx(ctx, tx, ev, author, typ, quoteRequestObject(r), []string{r.Actor}, nil)
		return a, err
	}
	return s.emitTx(ctx, tx, ev, author, typ, quoteRequestObject(r), []string{r.Actor}, nil)
}

// AnswerQuote applies actor's Accept or Reject (typ) of the pending
// QuoteRequest requestID: an Accept makes its stamp and enqueues the
// Accept with it, a Reject drops it and enqueues the Reject. A request
// actor never received is ENOTFOUND, one answered already ECONFLICT.
func (s *Store) AnswerQuote(ctx context.Context, actor *Actor, requestID, typ string) (*Activity, error) {
	if typ != "Accept" && typ != "Reject" {
		return nil, Errorf(EINVALID, "a quote request is answered with Accept or Reject, not %q", typ)
	}
	ev := s.newEvent()
	var act *Activity
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		q := `UPDATE quote_stamps SET state = 'accepted', updated_at = ? WHERE actor_id = ? AND request_uri = ? AND state = 'pending'
			RETURNING ` + stampColumns
		args := []any{ms(ev.At), actor.ID, requestID}
		if typ == "Reject" {
			q = `DELETE FROM quote_stamps WHERE actor_id = ? AND request_uri = ? AND state = 'pending' RETURNING ` + stampColumns
			args = args[1:]
		}
		st, err := s.scanStamp(tx.QueryRowContext(ctx, q, args...))
		if errors.Is(err, sql.ErrNoRows) {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM quote_stamps WHERE actor_id = ? AND request_uri = ?`,
				actor.ID, requestID).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return Errorf(ECONFLICT, "the quote request %q was answered already", requestID)
			}
			return Errorf(ENOTFOUND, "no quote request %q of %s", requestID, actor.URI)
		}
		if err != nil {
			return err
		}
		var quoted string
		if err := tx.QueryRowContext(ctx, `SELECT uri FROM objects WHERE id = ?`, st.ObjectID).Scan(&quoted); err != nil {
			return err
		}
		r := QuoteRequestIn{ID: st.Request, Actor: st.QuoterURI, Object: quoted, Instrument: st.QuoteURI}
		stamp := ""
		if typ == "Accept" {
			stamp = st.URI
		}
		act, err = s.answerQuoteTx(ctx, tx, ev, actor, r, typ, stamp, false)
		return err
	})
	if err != nil {
		return nil, wrap(typ+" quote", err)
	}
	return act, nil
}

// IsQuoteRequest reports whether id is a QuoteRequest actor received.
func (s *Store) IsQuoteRequest(ctx context.Context, actor *Actor, id string) (bool, error) {
	var n int
	err := s.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM quote_stamps WHERE actor_id = ? AND request_uri = ?`,
		actor.ID, id).Scan(&n)
	return n > 0, wrap("quote request", err)
}

// RevokeQuote revokes actor's stamp uri and enqueues the Delete of it to
// its quoter, in one transaction; the stamp answers 410 from then on. A
// stamp not actor's is ENOTFOUND, one revoked already EGONE.
func (s *Store) RevokeQuote(ctx context.Context, actor *Actor, uri string) (*Activity, error) {
	ev := s.newEvent()
	var act *Activity
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		id, _ := s.uris.QuoteID(uri)
		st, err := s.scanStamp(tx.QueryRowContext(ctx, `UPDATE quote_stamps SET state = 'revoked', updated_at = ?
			WHERE local_id = ? AND actor_id = ? AND state = 'accepted' RETURNING `+stampColumns, ms(ev.At), id, actor.ID))
		if errors.Is(err, sql.ErrNoRows) {
			var state string
			err := tx.QueryRowContext(ctx, `SELECT state FROM quote_stamps WHERE local_id = ? AND actor_id = ?`, id, actor.ID).Scan(&state)
			if err == nil && state == "revoked" {
				return Errorf(EGONE, "the quote authorization %q was revoked already", uri)
			}
			return notFound(err, ENOTFOUND, "no quote authorization %q of %s", uri, actor.URI)
		}
		if err != nil {
			return err
		}
		act, err = s.revokeTx(ctx, tx, ev, actor, st)
		return err
	})
	if err != nil {
		return nil, wrap("revoke quote", err)
	}
	return act, nil
}

func (s *Store) revokeTx(ctx context.Context, tx *sql.Tx, ev pendingEvent, actor *Actor, st *Stamp) (*Activity, error) {
	ev.Context = QuoteContext()
	return s.emitTx(ctx, tx, ev, actor, "Delete", st.URI, []string{st.QuoterURI}, nil)
}

// revokeObjectStampsTx revokes the stamps of the deleted local object
// objectID, each with a Delete to its quoter (their event ids derived from
// ev's).
func (s *Store) revokeObjectStampsTx(ctx context.Context, tx *sql.Tx, ev pendingEvent, actor *Actor, objectID int64) error {
	rows, err := tx.QueryContext(ctx, `UPDATE quote_stamps SET state = 'revoked', updated_at = ?
		WHERE object_id = ? AND state = 'accepted' RETURNING `+stampColumns, ms(ev.At), objectID)
	if err != nil {
		return err
	}
	var stamps []*Stamp
	for rows.Next() {
		st, err := s.scanStamp(rows)
		if err != nil {
			rows.Close()
			return err
		}
		stamps = append(stamps, st)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM quote_stamps WHERE object_id = ? AND state = 'pending'`, objectID); err != nil {
		return err
	}
	slices.SortFunc(stamps, func(a, b *Stamp) int { return compareStrings(a.LocalID, b.LocalID) })
	for _, st := range stamps {
		e := pendingEvent{ID: outbox.ChildID(ev.ID, st.URI), At: ev.At}
		if _, err := s.revokeTx(ctx, tx, e, actor, st); err != nil {
			return err
		}
	}
	return nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// actorByIDTx returns the local actor id as tx sees it.
func (s *Store) actorByIDTx(ctx context.Context, tx *sql.Tx, id int64) (*Actor, error) {
	var name string
	if err := tx.QueryRowContext(ctx, `SELECT name FROM actors WHERE id = ?`, id).Scan(&name); err != nil {
		return nil, notFound(err, ENOTFOUND, "no local actor %d", id)
	}
	return s.ActorByURITx(ctx, tx, s.uris.Actor(name))
}

// ObjectByRowID returns the object whose row id is id (a tombstone
// included), or ENOTFOUND.
func (s *Store) ObjectByRowID(ctx context.Context, id int64) (*Object, error) {
	o, err := scanObject(s.db.Read.QueryRowContext(ctx, `SELECT `+objectColumns+` FROM objects WHERE id = ?`, id))
	if err != nil {
		return nil, wrap("object", notFound(err, ENOTFOUND, "no object %d", id))
	}
	return o, nil
}

// requestQuoteTx sends the QuoteRequest of the new local quote o (whose
// document is doc) to the quoted author, in tx, and records it pending. A
// quote of the actor's own object needs none.
func (s *Store) requestQuoteTx(ctx context.Context, tx *sql.Tx, actor *Actor, o *Object, doc []byte, quoted, author string) error {
	if quoted == "" || author == "" || author == actor.URI {
		return nil
	}
	ev := s.newEvent()
	ev.Context = ObjectContext(o.Context)
	ev.Extra.Instrument = json.RawMessage(doc)
	act, err := s.emitTx(ctx, tx, ev, actor, QuoteRequestType, quoted, []string{author}, nil)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO quote_requests (object_id, quoted_uri, quoted_author, request_uri, state,
		created_at, updated_at) VALUES (?, ?, ?, ?, 'pending', ?, ?)`, o.RowID, quoted, author, act.URI, ms(ev.At), ms(ev.At))
	return err
}

// AnswerQuoteRequestTx applies, in tx, answerer's Accept or Reject (typ)
// of the QuoteRequest requestURI a local quote sent. found is false when
// no local quote sent it. An Accept (its result the stamp, on answerer's
// host) sets the quote's quoteAuthorization and enqueues its Update (event
// id derived from eventID) to the quote's audience and the quoted author;
// approved reports it. An answer by another
// actor than the quoted author is EFORBIDDEN.
func (s *Store) AnswerQuoteRequestTx(ctx context.Context, tx *sql.Tx, eventID, requestURI, answerer, typ, result string) (approved, found bool, err error) {
	var objectID int64
	var author, state string
	err = tx.QueryRowContext(ctx, `SELECT object_id, quoted_author, state FROM quote_requests WHERE request_uri = ?`+s.forUpdate(),
		requestURI).Scan(&objectID, &author, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	if author != answerer {
		return false, true, Errorf(EFORBIDDEN, "the quote request %q is for %q, not %q", requestURI, author, answerer)
	}
	if typ == "Reject" {
		_, err := tx.ExecContext(ctx, `UPDATE quote_requests SET state = 'rejected', updated_at = ? WHERE object_id = ?`,
			ms(s.clock()), objectID)
		return false, true, err
	}
	if result == "" || hostOf(result) != hostOf(answerer) {
		return false, true, Errorf(EUNPROCESSABLE, "an Accept of a QuoteRequest needs its QuoteAuthorization on %s's host", answerer)
	}
	var o *Object
	if err := func() error {
		var uri string
		if err := tx.QueryRowContext(ctx, `SELECT uri FROM objects WHERE id = ?`, objectID).Scan(&uri); err != nil {
			return err
		}
		var err error
		o, err = s.objectForUpdate(ctx, tx, uri)
		return err
	}(); err != nil {
		return false, true, err
	}
	at := s.clock()
	if _, err := tx.ExecContext(ctx, `UPDATE quote_requests SET state = 'accepted', authorization_uri = ?, updated_at = ?
		WHERE object_id = ?`, result, ms(at), objectID); err != nil {
		return false, true, err
	}
	if o.Deleted() || !o.Local() {
		return true, true, nil
	}
	actor, err := s.actorByIDTx(ctx, tx, o.ActorID)
	if err != nil {
		return false, true, err
	}
	var d map[string]any
	if err := json.Unmarshal(o.Document, &d); err != nil {
		return false, true, err
	}
	d["quoteAuthorization"] = result
	b, err := json.Marshal(d)
	if err != nil {
		return false, true, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE objects SET document = ?, modified_at = ? WHERE id = ?`, string(b), ms(at), o.RowID); err != nil {
		return false, true, err
	}
	// The quoted author gets the Update too, addressed or not, so that its
	// server sees the quote with its stamp.
	ev := pendingEvent{ID: outbox.ChildID(eventID, "quote-update"), At: at, Context: ObjectContext(o.Context)}
	cc := o.CC
	if !slices.Contains(o.To, author) && !slices.Contains(cc, author) {
		cc = append(slices.Clip(cc), author)
	}
	_, _, err = s.emitOnceTx(ctx, tx, ev, actor, "Update", json.RawMessage(b), o.To, cc)
	return true, true, err
}

// QuoteOfRequestTx returns the id of the local quote that sent the
// QuoteRequest requestURI, or ENOTFOUND.
func (s *Store) QuoteOfRequestTx(ctx context.Context, tx *sql.Tx, requestURI string) (string, error) {
	var uri string
	err := tx.QueryRowContext(ctx, `SELECT o.uri FROM quote_requests q JOIN objects o ON o.id = q.object_id
		WHERE q.request_uri = ?`, requestURI).Scan(&uri)
	if err != nil {
		return "", notFound(err, ENOTFOUND, "no quote request %q", requestURI)
	}
	return uri, nil
}

// RevokeAuthorizationTx applies, in tx, revoker's Delete of the stamp
// stampURI that authorizes a local quote: the quote loses its
// quoteAuthorization and its Update is enqueued (event id derived from
// eventID). found is false when no local quote holds that stamp from
// revoker.
func (s *Store) RevokeAuthorizationTx(ctx context.Context, tx *sql.Tx, eventID, stampURI, revoker string) (bool, error) {
	var objectID int64
	err := tx.QueryRowContext(ctx, `UPDATE quote_requests SET state = 'revoked', updated_at = ?
		WHERE authorization_uri = ? AND quoted_author = ? AND state = 'accepted' RETURNING object_id`,
		ms(s.clock()), stampURI, revoker).Scan(&objectID)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var uri string
	if err := tx.QueryRowContext(ctx, `SELECT uri FROM objects WHERE id = ?`, objectID).Scan(&uri); err != nil {
		return false, err
	}
	o, err := s.objectForUpdate(ctx, tx, uri)
	if err != nil {
		return false, err
	}
	if o.Deleted() || !o.Local() {
		return true, nil
	}
	actor, err := s.actorByIDTx(ctx, tx, o.ActorID)
	if err != nil {
		return false, err
	}
	var d map[string]any
	if err := json.Unmarshal(o.Document, &d); err != nil {
		return false, err
	}
	delete(d, "quoteAuthorization")
	b, err := json.Marshal(d)
	if err != nil {
		return false, err
	}
	at := s.clock()
	if _, err := tx.ExecContext(ctx, `UPDATE objects SET document = ?, modified_at = ? WHERE id = ?`, string(b), ms(at), o.RowID); err != nil {
		return false, err
	}
	cc := o.CC
	if !slices.Contains(o.To, revoker) && !slices.Contains(cc, revoker) {
		cc = append(slices.Clip(cc), revoker)
	}
	ev := pendingEvent{ID: outbox.ChildID(eventID, "quote-revoked"), At: at, Context: ObjectContext(o.Context)}
	_, _, err = s.emitOnceTx(ctx, tx, ev, actor, "Update", json.RawMessage(b), o.To, cc)
	return true, err
}

// QuoteOfAuthorizationTx returns the id of the local quote the stamp
// stampURI authorized, or ENOTFOUND.
func (s *Store) QuoteOfAuthorizationTx(ctx context.Context, tx *sql.Tx, stampURI string) (string, error) {
	var uri string
	err := tx.QueryRowContext(ctx, `SELECT o.uri FROM quote_requests q JOIN objects o ON o.id = q.object_id
		WHERE q.authorization_uri = ?`, stampURI).Scan(&uri)
	if err != nil {
		return "", notFound(err, ENOTFOUND, "no quote authorized by %q", stampURI)
	}
	return uri, nil
}
