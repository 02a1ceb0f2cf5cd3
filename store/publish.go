package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"strings"

	"github.com/courier-ap/courier/activitypub"
)

// MaxDocumentBytes bounds the stored JSON document of a local object (the
// client-to-server body limit's default).
const MaxDocumentBytes = 1 << 20

// MaxHashtags bounds the hashtags of one object.
const MaxHashtags = 100

// ObjectInput is an object a local actor publishes whole: any ActivityStreams
// object type (Note, Article, Page, Question, Event, Image, Video, Audio...)
// or a type of the client's own vocabulary, with every property the client
// sent. The server-assigned properties (id, type, attributedTo, published,
// updated, to, cc, and url when the client gave none) are set by the store
// over whatever Properties holds.
type ObjectInput struct {
	// Type is the object's type; required.
	Type string
	// Properties are the client's properties of the object, kept as sent
	// (numbers as json.Number, so none loses precision).
	Properties map[string]any
	// Context is the client's @context entries beyond ActivityStreams (nil
	// when none); the document is served and federated with ObjectContext.
	Context []any
	// Content and Summary are the text of the object (also in Properties),
	// kept in their columns for the HTML pages and the inbox.
	Content, Summary string
	// InReplyTo is the id of the object replied to, if any.
	InReplyTo string
	// To and CC address the object: as:Public in To (public), as:Public in
	// CC (unlisted), the author's followers collection without as:Public
	// (followers-only), or actor ids only (direct). "as:Public" and
	// "Public" are accepted for the public collection. UpdateObject adds
	// them to the object's audience (a newly mentioned actor) and keeps
	// the rest.
	To, CC []string
	// Quote is the id of the object quoted, if any, and QuotedAuthor its
	// author: a new object that quotes another actor's sends that author a
	// QuoteRequest (FEP-044f) beside its Create; none when QuotedAuthor is
	// unknown ("").
	Quote, QuotedAuthor string
	// Hashtags are the normalised (lower-case, without '#') names of the
	// object's Hashtag tags, for /tags/{name}.
	Hashtags []string
}

// courierTerms is the context entry of the terms courier's objects use
// beyond ActivityStreams: Mastodon's (sensitive, Hashtag, blurhash,
// focalPoint, votersCount), the quote terms (FEP-044f quote, quoteUrl,
// Misskey's _misskey_quote) and those of quote consent (quoteTerms).
func courierTerms() map[string]any {
	m := map[string]any{
		"sensitive":      "as:sensitive",
		"Hashtag":        "as:Hashtag",
		"quoteUrl":       "as:quoteUrl",
		"toot":           "http://joinmastodon.org/ns#",
		"blurhash":       "toot:blurhash",
		"focalPoint":     map[string]any{"@container": "@list", "@id": "toot:focalPoint"},
		"votersCount":    "toot:votersCount",
		"misskey":        "https://misskey-hub.net/ns#",
		"_misskey_quote": "misskey:_misskey_quote",
		"quote":          map[string]any{"@id": "https://w3id.org/fep/044f#quote", "@type": "@id"},
	}
	quoteTerms(m)
	return m
}

// ObjectContext returns the whole @context of a local object: ActivityStreams,
// courier's terms, then the client's own entries (clientContext, a JSON
// array; empty for none), whose terms win over courier's.
func ObjectContext(clientContext json.RawMessage) []any {
	out := []any{activitypub.ActivityStreams, courierTerms()}
	if len(clientContext) == 0 {
		return out
	}
	d := json.NewDecoder(bytes.NewReader(clientContext))
	d.UseNumber()
	var extra []any
	if d.Decode(&extra) == nil {
		out = append(out, extra...)
	}
	return out
}

func (in *ObjectInput) validate(requireAudience bool) error {
	if in.Type == "" {
		return Errorf(EINVALID, "an object needs a type")
	}
	if err := checkText(in.Content, in.Summary, in.InReplyTo); err != nil {
		return err
	}
	if len(in.Hashtags) > MaxHashtags {
		return Errorf(EUNPROCESSABLE, "an object may have at most %d hashtags", MaxHashtags)
	}
	var err error
	if in.To, err = normalizeAudience(in.To); err != nil {
		return err
	}
	if in.CC, err = normalizeAudience(in.CC); err != nil {
		return err
	}
	if requireAudience && len(in.To)+len(in.CC) == 0 {
		return Errorf(EINVALID, "an object needs an audience: as:Public in to (public), in cc (unlisted), "+
			"your followers collection (followers-only) or actor ids (direct)")
	}
	if len(in.To)+len(in.CC) > MaxRecipients {
		return Errorf(EINVALID, "an object may have at most %d recipients", MaxRecipients)
	}
	return nil
}

// objectDocument builds the stored document of a local object: the
// client's properties with the server's set over them, without @context.
// json.Marshal writes a map's keys sorted, compact, HTML characters
// escaped: the form activitypub.NewActivity embeds it in, so the stored
// document is byte-for-byte the one inside its activity.
func (s *Store) objectDocument(o *Object, props map[string]any) ([]byte, error) {
	d := make(map[string]any, len(props)+8)
	for k, v := range props {
		d[k] = v
	}
	delete(d, "@context")
	d["id"], d["type"], d["attributedTo"] = o.URI, o.Type, o.AttributedTo
	d["published"] = formatTime(o.Published)
	delete(d, "updated")
	if !o.Updated.IsZero() {
		d["updated"] = formatTime(o.Updated)
	}
	if _, ok := d["url"]; !ok {
		d["url"] = o.URI
	}
	d["to"], d["cc"] = nonNil(o.To), nonNil(o.CC)
	// What Mastodon and its peers read is present even when unset.
	for k, v := range map[string]any{"inReplyTo": nil, "summary": nil, "sensitive": false} {
		if _, ok := d[k]; !ok {
			d[k] = v
		}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxDocumentBytes {
		return nil, Errorf(EUNPROCESSABLE, "the object's document is larger than %d bytes", MaxDocumentBytes)
	}
	return b, nil
}

func marshalContext(c []any) (string, error) {
	if len(c) == 0 {
		return "", nil
	}
	b, err := json.Marshal(c)
	return string(b), err
}

// CreateObject stores a new object by actor, whole, and enqueues its Create,
// in one transaction. The object's id is derived from the event id
// (activitypub.ObjectID); the client's ids are never used. The Create
// carries the object's whole @context (ObjectContext).
func (s *Store) CreateObject(ctx context.Context, actor *Actor, in ObjectInput) (*Activity, *Object, error) {
	if err := in.validate(true); err != nil {
		return nil, nil, err
	}
	octx, err := marshalContext(in.Context)
	if err != nil {
		return nil, nil, wrap("create object", err)
	}
	ev := s.newEvent()
	if octx != "" {
		ev.Context = ObjectContext(json.RawMessage(octx))
	} else {
		ev.Context = ObjectContext(nil)
	}
	o := &Object{
		URI: activitypub.ObjectID(s.uris.Base, ev.ID), LocalID: activitypub.ObjectUUID(ev.ID), Type: in.Type,
		AttributedTo: actor.URI, ActorID: actor.ID, Content: in.Content, Summary: in.Summary,
		InReplyTo: in.InReplyTo, To: in.To, CC: in.CC,
		Visibility: Visibility(in.To, in.CC, s.uris.Followers(actor.Name)), Published: ev.At,
	}
	if octx != "" {
		o.Context = json.RawMessage(octx)
	}
	var act *Activity
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		props, err := s.withQuotePolicyTx(ctx, tx, actor, in.Properties, nil)
		if err != nil {
			return err
		}
		if in.Type == "Question" {
			props = withPollCounts(props, nil)
		}
		conv, err := s.conversationTx(ctx, tx, o.LocalID, o.InReplyTo) // threads.go
		if err != nil {
			return err
		}
		if _, ok := props["context"]; !ok {
			props = withValue(props, "context", conv)
		}
		b, err := s.objectDocument(o, props)
		if err != nil {
			return err
		}
		o.Document = b
		if err := tx.QueryRowContext(ctx, `INSERT INTO objects
			(uri, local_id, type, attributed_to, actor_id, content, summary, in_reply_to, to_json, cc_json,
			 visibility, published_at, document, context_json, created_at, modified_at, context_uri)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			o.URI, o.LocalID, o.Type, o.AttributedTo, o.ActorID, o.Content, o.Summary, nullString(o.InReplyTo),
			marshalList(o.To), marshalList(o.CC), o.Visibility, ms(o.Published), string(b), octx, ms(ev.At), ms(ev.At), conv,
		).Scan(&o.RowID); err != nil {
			return err
		}
		if err := setObjectTagsTx(ctx, tx, o.RowID, in.Hashtags); err != nil {
			return err
		}
		act, err = s.emitTx(ctx, tx, ev, actor, "Create", json.RawMessage(b), o.To, o.CC)
		if err != nil {
			return err
		}
		return s.requestQuoteTx(ctx, tx, actor, o, b, in.Quote, in.QuotedAuthor) // quotes.go
	})
	if err != nil {
		return nil, nil, wrap("create object", err)
	}
	return act, o, nil
}

// UpdateObject replaces the client properties of actor's own object uri
// with in's and enqueues its Update, in one transaction: the server's
// properties (id, type, attributedTo, published, the audience, what it
// replies to) are kept and updated is set. Actors in in.To and in.CC (newly
// mentioned) join the audience. The type cannot change (EUNPROCESSABLE);
// another actor's object is EFORBIDDEN, a deleted one EGONE.
func (s *Store) UpdateObject(ctx context.Context, actor *Actor, uri string, in ObjectInput) (*Activity, *Object, error) {
	if err := in.validate(false); err != nil {
		return nil, nil, err
	}
	octx, err := marshalContext(in.Context)
	if err != nil {
		return nil, nil, wrap("update object", err)
	}
	ev := s.newEvent()
	ev.Context = ObjectContext(json.RawMessage(octx))
	var act *Activity
	var o *Object
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		if o, err = s.ownObjectTx(ctx, tx, actor, uri); err != nil {
			return err
		}
		if o.Type != in.Type {
			return Errorf(EUNPROCESSABLE, "object %q is a %s; an Update cannot make it a %s", uri, o.Type, in.Type)
		}
		if err := s.noWiderAudience(actor, o, in); err != nil {
			return err
		}
		o.Content, o.Summary, o.Updated = in.Content, in.Summary, ev.At
		o.To, o.CC = union(o.To, in.To), union(o.CC, in.CC)
		o.Context = nil
		if octx != "" {
			o.Context = json.RawMessage(octx)
		}
		props, err := s.withQuotePolicyTx(ctx, tx, actor, in.Properties, o.Document)
		if err != nil {
			return err
		}
		var prev map[string]any
		_ = json.Unmarshal(o.Document, &prev) // a stored document always decodes
		// The conversation stays (threads.go).
		if _, ok := props["context"]; !ok && prev["context"] != nil {
			props = withValue(props, "context", prev["context"])
		}
		// A quote's authorization stays while it quotes the same object
		// (quotes.go); a client's own is not taken.
		delete(props, "quoteAuthorization")
		if auth := prev["quoteAuthorization"]; auth != nil && props["quote"] != nil && props["quote"] == prev["quote"] {
			props = withValue(props, "quoteAuthorization", auth)
		}
		if o.InReplyTo != "" {
			props = withValue(props, "inReplyTo", o.InReplyTo)
		}
		if o.Type == "Question" {
			counts, err := pollCountsTx(ctx, tx, o.RowID)
			if err != nil {
				return err
			}
			props = withPollCounts(props, counts)
		}
		b, err := s.objectDocument(o, props)
		if err != nil {
			return err
		}
		o.Document = b
		if _, err := tx.ExecContext(ctx, `UPDATE objects SET content = ?, summary = ?, to_json = ?, cc_json = ?,
			updated_at = ?, document = ?, context_json = ?, modified_at = ? WHERE id = ?`,
			o.Content, o.Summary, marshalList(o.To), marshalList(o.CC), ms(ev.At), string(b), octx, ms(ev.At), o.RowID); err != nil {
			return err
		}
		if err := setObjectTagsTx(ctx, tx, o.RowID, in.Hashtags); err != nil {
			return err
		}
		act, err = s.emitTx(ctx, tx, ev, actor, "Update", json.RawMessage(b), o.To, o.CC)
		return err
	})
	if err != nil {
		return nil, nil, wrap("update object", err)
	}
	return act, o, nil
}

// noWiderAudience refuses (EUNPROCESSABLE) an Update whose to or cc name
// the public or a collection (the actor's followers, or any other) that
// the object was not addressed to: an edit reaches the actors it newly
// mentions, and never makes a followers-only or direct object public, or
// a direct one followers-only (its visibility, what courier serves it by,
// is the Create's).
func (s *Store) noWiderAudience(actor *Actor, o *Object, in ObjectInput) error {
	had, hadPublic := map[string]bool{}, false
	for _, r := range append(slices.Clone(o.To), o.CC...) {
		had[r], hadPublic = true, hadPublic || activitypub.IsPublic(r)
	}
	for _, r := range append(slices.Clone(in.To), in.CC...) {
		switch {
		case had[r], activitypub.IsPublic(r) && hadPublic:
		case activitypub.IsPublic(r), r == s.uris.Followers(actor.Name), isCollectionURI(r):
			return Errorf(EUNPROCESSABLE, "an Update cannot widen the audience of %q: %s is not among its recipients (an edit adds the actors it newly mentions only)", o.URI, r)
		}
	}
	return nil
}

// isCollectionURI reports whether r names a followers or following
// collection (of any server's actor) rather than an actor.
func isCollectionURI(r string) bool {
	return strings.HasSuffix(r, "/followers") || strings.HasSuffix(r, "/following")
}

func withValue(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for kk, vv := range m {
		out[kk] = vv
	}
	out[k] = v
	return out
}

// union returns a with the entries of b it lacks appended.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, v := range b {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// setObjectTagsTx replaces the hashtags of the object objectID.
func setObjectTagsTx(ctx context.Context, tx *sql.Tx, objectID int64, tags []string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM object_tags WHERE object_id = ?`, objectID); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, t := range tags {
		if t == "" || seen[t] {
			continue
		}
		seen[t] = true
		if _, err := tx.ExecContext(ctx, `INSERT INTO object_tags (tag, object_id) VALUES (?, ?)`, t, objectID); err != nil {
			return err
		}
	}
	return nil
}

// TagPage is one page of the local public objects carrying a hashtag,
// newest first.
type TagPage struct {
	Items []*Object
	Total int
	// Next is the cursor (Before) of the older page, 0 when there is none.
	Next int64
}

// TaggedObjects returns a page of the local public objects (not deleted)
// carrying the hashtag tag (normalised name), newest first: those older
// than the object row id before (0: from the newest), at most limit.
func (s *Store) TaggedObjects(ctx context.Context, tag string, before int64, limit int) (*TagPage, error) {
	const where = `id IN (SELECT object_id FROM object_tags WHERE tag = ?)
		AND actor_id IS NOT NULL AND visibility = 'public' AND deleted_at IS NULL`
	p := &TagPage{}
	if err := s.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM objects WHERE `+where, tag).Scan(&p.Total); err != nil {
		return nil, wrap("tagged objects", err)
	}
	if before <= 0 {
		before = 1<<63 - 1
	}
	limit = clampLimit(limit)
	rows, err := s.db.Read.QueryContext(ctx, `SELECT `+objectColumns+` FROM objects
		WHERE `+where+` AND id < ? ORDER BY id DESC LIMIT ?`, tag, before, limit+1)
	if err != nil {
		return nil, wrap("tagged objects", err)
	}
	defer rows.Close()
	for rows.Next() {
		o, err := scanObject(rows)
		if err != nil {
			return nil, wrap("tagged objects", err)
		}
		p.Items = append(p.Items, o)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("tagged objects", err)
	}
	if len(p.Items) > limit {
		p.Items = p.Items[:limit]
		p.Next = p.Items[limit-1].RowID
	}
	return p, nil
}

// withPollCounts returns a Question's properties with each option's
// replies.totalItems and votersCount set from counts (option name → votes;
// counts[""] is the number of voters). Options are the oneOf or anyOf list.
func withPollCounts(props map[string]any, counts map[string]int) map[string]any {
	out := make(map[string]any, len(props)+1)
	for k, v := range props {
		out[k] = v
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		l, ok := out[key].([]any)
		if !ok {
			continue
		}
		opts := make([]any, len(l))
		for i, e := range l {
			m, ok := e.(map[string]any)
			if !ok {
				opts[i] = e
				continue
			}
			c := make(map[string]any, len(m)+1)
			for k, v := range m {
				c[k] = v
			}
			name, _ := m["name"].(string)
			c["replies"] = map[string]any{"type": "Collection", "totalItems": counts[name]}
			opts[i] = c
		}
		out[key] = opts
	}
	out["votersCount"] = counts[""]
	return out
}

// pollCountsTx reads the votes of the Question objectID: per option, and
// the number of voters under "".
func pollCountsTx(ctx context.Context, q queryer, objectID int64) (map[string]int, error) {
	rows, err := q.QueryContext(ctx, `SELECT option_name, COUNT(*) FROM poll_votes WHERE object_id = ? GROUP BY option_name`, objectID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		counts[name] = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var voters int
	if err := q.QueryRowContext(ctx, `SELECT COUNT(DISTINCT voter_uri) FROM poll_votes WHERE object_id = ?`, objectID).Scan(&voters); err != nil {
		return nil, err
	}
	counts[""] = voters
	return counts, nil
}

// PollCounts returns the votes of the local Question o: per option name,
// and the number of voters under "".
func (s *Store) PollCounts(ctx context.Context, o *Object) (map[string]int, error) {
	c, err := pollCountsTx(ctx, s.db.Read, o.RowID)
	return c, wrap("poll counts", err)
}

// WithPollCounts returns a local Question's document (decoded) with the
// counts set as the store federates them.
func WithPollCounts(doc map[string]any, counts map[string]int) map[string]any {
	return withPollCounts(doc, counts)
}
