package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// Visibilities of an object, derived from its addressing.
const (
	// VisibilityPublic: as:Public in to.
	VisibilityPublic = "public"
	// VisibilityUnlisted: as:Public in cc only.
	VisibilityUnlisted = "unlisted"
	// VisibilityFollowers: the author's followers collection, no as:Public.
	VisibilityFollowers = "followers"
	// VisibilityDirect: named actors only.
	VisibilityDirect = "direct"
)

// Visibility classifies an object's addressing. followersURI is the
// author's followers collection.
func Visibility(to, cc []string, followersURI string) string {
	if containsPublic(to) {
		return VisibilityPublic
	}
	if containsPublic(cc) {
		return VisibilityUnlisted
	}
	for _, l := range [][]string{to, cc} {
		for _, v := range l {
			if v == followersURI {
				return VisibilityFollowers
			}
		}
	}
	return VisibilityDirect
}

// containsPublic reports whether l holds the public collection in any of
// its spellings (full URI, "as:Public", "Public").
func containsPublic(l []string) bool {
	return slices.ContainsFunc(l, activitypub.IsPublic)
}

// Object is a Note (or another object type) by ActivityPub id, local or
// remote; a deleted object is a tombstone (DeletedAt set, FormerType kept).
type Object struct {
	RowID        int64
	URI          string
	LocalID      string // set for local objects: /objects/{LocalID}
	Type         string // "Tombstone" once deleted
	AttributedTo string
	ActorID      int64 // the local author's row id; 0 for remote objects
	Content      string
	Summary      string
	InReplyTo    string
	To, CC       []string
	Visibility   string
	Published    time.Time
	Updated      time.Time // zero when never edited
	DeletedAt    time.Time // zero unless deleted
	FormerType   string
	// Document is the object's JSON as served (local) or received (remote);
	// empty for a tombstone. A local object's is stored without @context.
	Document json.RawMessage
	// Context is a local object's client @context entries beyond
	// ActivityStreams and courier's terms (a JSON array), nil when none;
	// ObjectContext gives the whole context.
	Context json.RawMessage
}

// Local reports whether a local actor wrote the object.
func (o *Object) Local() bool { return o.ActorID != 0 }

// Deleted reports whether the object is a tombstone.
func (o *Object) Deleted() bool { return !o.DeletedAt.IsZero() }

const objectColumns = `id, uri, COALESCE(local_id, ''), type, attributed_to, COALESCE(actor_id, 0), content, summary,
	COALESCE(in_reply_to, ''), to_json, cc_json, visibility, published_at, updated_at, deleted_at,
	COALESCE(former_type, ''), document, context_json`

func scanObject(row interface{ Scan(...any) error }) (*Object, error) {
	var o Object
	var to, cc, doc, octx string
	var published int64
	var updated, deleted sql.NullInt64
	if err := row.Scan(&o.RowID, &o.URI, &o.LocalID, &o.Type, &o.AttributedTo, &o.ActorID, &o.Content, &o.Summary,
		&o.InReplyTo, &to, &cc, &o.Visibility, &published, &updated, &deleted, &o.FormerType, &doc, &octx); err != nil {
		return nil, err
	}
	o.To, o.CC = unmarshalList(to), unmarshalList(cc)
	if octx != "" {
		o.Context = json.RawMessage(octx)
	}
	o.Published, o.Updated, o.DeletedAt = fromMS(published), fromNullMS(updated), fromNullMS(deleted)
	if doc != "" {
		o.Document = json.RawMessage(doc)
		if !o.Local() && o.Content == "" && o.Summary == "" {
			// A remote object's text is stored once, in its document.
			if d, err := activitypub.ParseObject(o.Document); err == nil {
				o.Content, o.Summary = d.Content, d.Summary
			}
		}
	}
	return &o, nil
}

// ObjectByURI returns the object with ActivityPub id uri (a tombstone
// included), or ENOTFOUND.
func (s *Store) ObjectByURI(ctx context.Context, uri string) (*Object, error) {
	return objectByURI(ctx, s.db.Read, uri)
}

func objectByURI(ctx context.Context, q queryer, uri string) (*Object, error) {
	o, err := scanObject(q.QueryRowContext(ctx, `SELECT `+objectColumns+` FROM objects WHERE uri = ?`, uri))
	if err != nil {
		return nil, wrap("object", notFound(err, ENOTFOUND, "no object %q", uri))
	}
	return o, nil
}

// objectForUpdate is objectByURI in tx, the row locked (forUpdate) for
// the change tx goes on to make.
func (s *Store) objectForUpdate(ctx context.Context, tx *sql.Tx, uri string) (*Object, error) {
	o, err := scanObject(tx.QueryRowContext(ctx, `SELECT `+objectColumns+` FROM objects WHERE uri = ?`+s.forUpdate(), uri))
	if err != nil {
		return nil, wrap("object", notFound(err, ENOTFOUND, "no object %q", uri))
	}
	return o, nil
}

// ObjectByLocalID returns the local object served at /objects/{id} (a
// tombstone included), or ENOTFOUND.
func (s *Store) ObjectByLocalID(ctx context.Context, id string) (*Object, error) {
	o, err := scanObject(s.db.Read.QueryRowContext(ctx, `SELECT `+objectColumns+` FROM objects WHERE local_id = ?`, id))
	if err != nil {
		return nil, wrap("object", notFound(err, ENOTFOUND, "no object %q", id))
	}
	return o, nil
}

// CountLocalNotes returns the number of local objects that are not deleted.
func (s *Store) CountLocalNotes(ctx context.Context) (int, error) {
	var n int
	err := s.db.Read.QueryRowContext(ctx,
		`SELECT COUNT(*) FROM objects WHERE actor_id IS NOT NULL AND deleted_at IS NULL`).Scan(&n)
	if err != nil {
		return 0, wrap("count notes", err)
	}
	return n, nil
}

// RemoteObject is the input of UpsertRemoteObjectTx: an object received
// from a peer.
type RemoteObject struct {
	URI          string
	Type         string
	AttributedTo string
	Content      string
	Summary      string
	InReplyTo    string
	To, CC       []string
	Published    time.Time
	Updated      time.Time // zero when the peer sent no "updated"
	Document     json.RawMessage
}

// UpsertRemoteObjectTx stores a remote object in tx, or replaces the stored
// one when the new one is at least as recent. The object is stored once:
// its Document, from which Content and Summary are read back (they are
// stored beside it only when the document does not hold them). It reports whether anything
// was written. An object whose stored copy is newer (by "updated", else
// "published") is left alone; a tombstoned object is never resurrected; a
// local object cannot be overwritten (EFORBIDDEN).
func (s *Store) UpsertRemoteObjectTx(ctx context.Context, tx *sql.Tx, o RemoteObject) (bool, error) {
	if o.URI == "" || o.AttributedTo == "" {
		return false, Errorf(EINVALID, "remote object needs an id and attributedTo")
	}
	if s.uris.IsLocal(o.URI) {
		return false, Errorf(EFORBIDDEN, "object %q is local", o.URI)
	}
	if o.Type == "" {
		o.Type = "Note"
	}
	if len(o.Document) == 0 || !json.Valid(o.Document) {
		return false, Errorf(EINVALID, "remote object %q has no valid JSON document", o.URI)
	}
	if err := checkRemoteObjectText(o); err != nil {
		return false, err
	}
	t := s.clock()
	if o.Published.IsZero() {
		o.Published = t
	}
	// The text is stored once, in the document, when the document gives
	// it back as scanObject reads it; else (a document of another shape)
	// beside it, so nothing is lost.
	content, summary := o.Content, o.Summary
	if d, err := activitypub.ParseObject(o.Document); err == nil && d.Content == o.Content && d.Summary == o.Summary {
		content, summary = "", ""
	}
	vis := Visibility(o.To, o.CC, "")
	if vis == VisibilityDirect && len(o.To)+len(o.CC) > 0 {
		// A remote author's followers collection is not known here; an
		// object addressed to any collection of its author's is "followers".
		vis = remoteVisibility(o.To, o.CC, o.AttributedTo)
	}
	// The stored copy is read locked, so that an import beside this one
	// (another server, another worker) waits and then compares with what
	// this one wrote. A new object is inserted unless another insert got
	// there first; then that row is read, locked, and compared.
	for attempt := 0; ; attempt++ {
		existing, err := s.objectForUpdate(ctx, tx, o.URI)
		switch {
		case err == nil:
			return s.updateRemoteObjectTx(ctx, tx, existing, o, content, summary, vis, t)
		case !errors.Is(err, ErrNotFound) || attempt > 0:
			return false, err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO objects
			(uri, type, attributed_to, content, summary, in_reply_to, to_json, cc_json, visibility,
			 published_at, updated_at, document, created_at, modified_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uri) DO NOTHING`,
			o.URI, o.Type, o.AttributedTo, content, summary, nullString(o.InReplyTo),
			marshalList(o.To), marshalList(o.CC), vis, ms(o.Published), nullMS(o.Updated), string(o.Document), ms(t), ms(t))
		if err != nil {
			return false, wrap("upsert remote object", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return true, nil
		}
	}
}

// updateRemoteObjectTx replaces the stored remote object existing (read
// locked) with o, unless it is local, deleted, another actor's, or newer.
func (s *Store) updateRemoteObjectTx(ctx context.Context, tx *sql.Tx, existing *Object, o RemoteObject, content, summary, vis string, t time.Time) (bool, error) {
	if existing.Local() {
		return false, Errorf(EFORBIDDEN, "object %q is local", o.URI)
	}
	if existing.Deleted() {
		return false, nil
	}
	if existing.AttributedTo != o.AttributedTo {
		return false, Errorf(EFORBIDDEN, "object %q belongs to another actor", o.URI)
	}
	if version(existing.Updated, existing.Published).After(version(o.Updated, o.Published)) {
		return false, nil
	}
	_, err := tx.ExecContext(ctx, `UPDATE objects SET type = ?, content = ?, summary = ?, in_reply_to = ?,
			to_json = ?, cc_json = ?, visibility = ?, published_at = ?, updated_at = ?, document = ?, modified_at = ?
			WHERE id = ?`,
		o.Type, content, summary, nullString(o.InReplyTo), marshalList(o.To), marshalList(o.CC), vis,
		ms(o.Published), nullMS(o.Updated), string(o.Document), ms(t), existing.RowID)
	if err != nil {
		return false, wrap("upsert remote object", err)
	}
	return true, nil
}

func version(updated, published time.Time) time.Time {
	if !updated.IsZero() {
		return updated
	}
	return published
}

func remoteVisibility(to, cc []string, author string) string {
	for _, l := range [][]string{to, cc} {
		for _, v := range l {
			if len(v) > len(author) && v[:len(author)] == author && v[len(author)] == '/' {
				return VisibilityFollowers
			}
		}
	}
	return VisibilityDirect
}

// TombstoneTx marks the remote object uri deleted by actorURI in tx: its
// content and document are cleared and its type kept as FormerType. An
// unknown uri gets a tombstone row, so a Create that arrives after its
// Delete does not resurrect it. Reactions to it are removed and local
// Likes and Announces of it leave the outbox. It reports whether anything
// changed. A local object or one by another actor is EFORBIDDEN.
func (s *Store) TombstoneTx(ctx context.Context, tx *sql.Tx, uri, actorURI string) (bool, error) {
	if s.uris.IsLocal(uri) {
		return false, Errorf(EFORBIDDEN, "object %q is local", uri)
	}
	t := s.clock()
	// A reaction to the object while it is unknown waits on this (react).
	if err := s.lockObjectURITx(ctx, tx, uri); err != nil {
		return false, err
	}
	// As in UpsertRemoteObjectTx: the stored object is read locked; an
	// unknown one gets a tombstone unless another insert got there first,
	// and then that row is read, locked, and tombstoned.
	for attempt := 0; ; attempt++ {
		existing, err := s.objectForUpdate(ctx, tx, uri)
		if err == nil {
			if existing.Local() || existing.AttributedTo != actorURI {
				return false, Errorf(EFORBIDDEN, "object %q belongs to another actor", uri)
			}
			if existing.Deleted() {
				return false, nil
			}
			if _, err := tombstoneObjects(ctx, tx, t, `id = ?`, existing.RowID); err != nil {
				return false, wrap("tombstone", err)
			}
			break
		}
		if !errors.Is(err, ErrNotFound) || attempt > 0 {
			return false, err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO objects
			(uri, type, attributed_to, visibility, published_at, deleted_at, former_type, document, created_at, modified_at)
			VALUES (?, 'Tombstone', ?, 'direct', ?, ?, '', '', ?, ?) ON CONFLICT (uri) DO NOTHING`,
			uri, actorURI, ms(t), ms(t), ms(t), ms(t))
		if err != nil {
			return false, wrap("tombstone", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			break
		}
	}
	// Reactions to it go, and local Announces and Likes of it leave the outbox.
	if _, err := tx.ExecContext(ctx, `DELETE FROM reactions WHERE object_uri = ?`, uri); err != nil {
		return false, wrap("tombstone", err)
	}
	if err := s.forgetObjectTx(ctx, tx, uri); err != nil {
		return false, wrap("tombstone", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE activities SET withdrawn_at = ?
		WHERE object_uri = ? AND type IN ('Announce', 'Like') AND withdrawn_at IS NULL`, ms(t), uri); err != nil {
		return false, wrap("tombstone", err)
	}
	return true, nil
}

// DeleteActorContentTx removes what a deleted remote actor left behind, in
// tx: its objects become tombstones (local Likes and Announces of them leave
// the outbox), it stops following local actors, local actors stop following
// it, its reactions and blocks are removed, and its cache entry is marked
// gone. It returns the number of objects tombstoned.
func (s *Store) DeleteActorContentTx(ctx context.Context, tx *sql.Tx, actorURI string) (int, error) {
	if s.uris.IsLocal(actorURI) {
		return 0, Errorf(EFORBIDDEN, "actor %q is local", actorURI)
	}
	t := s.clock()
	n, err := tombstoneObjects(ctx, tx, t, `attributed_to = ? AND actor_id IS NULL AND deleted_at IS NULL`, actorURI)
	if err != nil {
		return 0, wrap("delete actor content", err)
	}
	for _, q := range []string{
		`DELETE FROM reactions WHERE object_uri IN (SELECT uri FROM objects WHERE attributed_to = ? AND actor_id IS NULL)`,
		`DELETE FROM followers WHERE follower_uri = ?`,
		`DELETE FROM following WHERE target_uri = ?`,
		`DELETE FROM reactions WHERE actor_uri = ?`,
		`DELETE FROM emoji_reactions WHERE actor_uri = ?`,
		`DELETE FROM blocks WHERE remote_uri = ?`,
	} {
		if _, err := tx.ExecContext(ctx, q, actorURI); err != nil {
			return 0, wrap("delete actor content", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE activities SET withdrawn_at = ?
		WHERE type IN ('Announce', 'Like') AND withdrawn_at IS NULL
		AND object_uri IN (SELECT uri FROM objects WHERE attributed_to = ? AND actor_id IS NULL)`, ms(t), actorURI); err != nil {
		return 0, wrap("delete actor content", err)
	}
	if err := s.MarkRemoteActorGoneTx(ctx, tx, actorURI); err != nil {
		return 0, wrap("delete actor content", err)
	}
	return int(n), nil
}

// tombstoneObjects turns the objects matching where (with args) into
// tombstones deleted at t, in tx: content, summary and document are
// cleared and the type is kept as former_type. It returns the number of
// objects changed.
func tombstoneObjects(ctx context.Context, tx *sql.Tx, t time.Time, where string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, `UPDATE objects SET former_type = type, type = 'Tombstone', content = '',
		summary = '', document = '', deleted_at = ?, modified_at = ? WHERE `+where, append([]any{ms(t), ms(t)}, args...)...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// RecentPublicNotes returns up to limit of the local actor actorID's public
// notes that are not deleted, newest first (for its HTML profile page).
func (s *Store) RecentPublicNotes(ctx context.Context, actorID int64, limit int) ([]*Object, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT `+objectColumns+` FROM objects
		WHERE actor_id = ? AND visibility = 'public' AND deleted_at IS NULL
		ORDER BY published_at DESC, id DESC LIMIT ?`, actorID, clampLimit(limit))
	if err != nil {
		return nil, wrap("recent notes", err)
	}
	defer rows.Close()
	var out []*Object
	for rows.Next() {
		o, err := scanObject(rows)
		if err != nil {
			return nil, wrap("recent notes", err)
		}
		out = append(out, o)
	}
	return out, wrap("recent notes", rows.Err())
}
