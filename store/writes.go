package store

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/json"
	"errors"
	"net/url"
	"unicode/utf8"

	"github.com/courier-ap/courier/activitypub"
)

// Limits of a local object's text and audience.
const (
	// MaxContentLen bounds content in bytes: an object's whole document
	// is bounded by as much (MaxDocumentBytes), in content or contentMap.
	MaxContentLen   = MaxDocumentBytes
	MaxSummaryChars = 1_000 // characters of summary (content warning)
	MaxRecipients   = 500   // entries of to plus cc
)

// checkText holds an object's text to its bounds: UTF-8 content and
// summary of bounded length, an absolute inReplyTo.
func checkText(content, summary, inReplyTo string) error {
	if !utf8.ValidString(content) || !utf8.ValidString(summary) {
		return Errorf(EINVALID, "content and summary must be UTF-8")
	}
	if len(content) > MaxContentLen {
		return Errorf(EUNPROCESSABLE, "content is larger than %d bytes, the bound of an object's document", MaxContentLen)
	}
	if utf8.RuneCountInString(summary) > MaxSummaryChars {
		return Errorf(EINVALID, "summary is longer than %d characters", MaxSummaryChars)
	}
	if inReplyTo != "" && !absoluteURL(inReplyTo) {
		return Errorf(EINVALID, "inReplyTo %q is not an absolute http(s) URL", inReplyTo)
	}
	return nil
}

// normalizeAudience spells the public collection in full, drops duplicates
// and checks that every entry is an absolute http(s) URL.
func normalizeAudience(l []string) ([]string, error) {
	out := make([]string, 0, len(l))
	seen := map[string]bool{}
	for _, v := range l {
		if activitypub.IsPublic(v) {
			v = Public
		}
		if !absoluteURL(v) {
			return nil, Errorf(EINVALID, "recipient %q is not an absolute http(s) URL", v)
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out, nil
}

func absoluteURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.User == nil
}

func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// ownObjectTx loads the object uri, locked for the change tx goes on to
// make (forUpdate: an edit beside a deletion lands before it or finds the
// tombstone), and checks that actor wrote it and that it is not deleted.
func (s *Store) ownObjectTx(ctx context.Context, tx *sql.Tx, actor *Actor, uri string) (*Object, error) {
	o, err := s.objectForUpdate(ctx, tx, uri)
	if err != nil {
		return nil, err
	}
	if o.ActorID != actor.ID || o.AttributedTo != actor.URI {
		return nil, Errorf(EFORBIDDEN, "object %q belongs to another actor", uri)
	}
	if o.Deleted() {
		return nil, Errorf(EGONE, "object %q was deleted", uri)
	}
	return o, nil
}

// DeleteObject turns actor's own object uri (of any type) into a tombstone
// and enqueues its Delete (object: the Tombstone, addressed to the object's
// audience), in one transaction. Another actor's object is EFORBIDDEN, a
// deleted one EGONE.
func (s *Store) DeleteObject(ctx context.Context, actor *Actor, uri string) (*Activity, error) {
	ev := s.newEvent()
	var act *Activity
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		o, err := s.ownObjectTx(ctx, tx, actor, uri)
		if err != nil {
			return err
		}
		if _, err := tombstoneObjects(ctx, tx, ev.At, `id = ?`, o.RowID); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM reactions WHERE object_uri = ?`, o.URI); err != nil {
			return err
		}
		if err := s.forgetObjectTx(ctx, tx, o.URI); err != nil {
			return err
		}
		for _, q := range []string{`DELETE FROM object_tags WHERE object_id = ?`, `DELETE FROM poll_votes WHERE object_id = ?`} {
			if _, err := tx.ExecContext(ctx, q, o.RowID); err != nil {
				return err
			}
		}
		// Its Create and Updates leave the outbox; the Delete takes their place.
		if _, err := tx.ExecContext(ctx, `UPDATE activities SET withdrawn_at = ?
			WHERE object_uri = ? AND type IN ('Create', 'Update') AND withdrawn_at IS NULL`, ms(ev.At), o.URI); err != nil {
			return err
		}
		o.FormerType, o.DeletedAt = o.Type, ev.At
		act, err = s.emitTx(ctx, tx, ev, actor, "Delete", Tombstone(o), o.To, o.CC)
		if err != nil {
			return err
		}
		// Its quote authorizations go with it: each quoter is told.
		return s.revokeObjectStampsTx(ctx, tx, ev, actor, o.RowID)
	})
	if err != nil {
		return nil, wrap("delete object", err)
	}
	return act, nil
}

// checkRemoteActor validates the id of a remote actor a local actor acts on.
func (s *Store) checkRemoteActor(ctx context.Context, target string) error {
	if !absoluteURL(target) {
		return Errorf(EINVALID, "actor %q is not an absolute http(s) URL", target)
	}
	if s.uris.IsLocal(target) {
		return Errorf(EINVALID, "%q is a local actor; only remote actors can be followed or blocked", target)
	}
	blocked, err := s.IsDomainBlocked(ctx, target)
	if err != nil {
		return err
	}
	if blocked {
		return Errorf(EFORBIDDEN, "the domain of %q is blocked", target)
	}
	return nil
}

// Follow records actor's (pending) follow of the actor target (remote, or
// another local actor) and enqueues the Follow, in one transaction. A
// follow of an actor already followed or asked (pending) is an
// *ExistingError (ECONFLICT) naming the standing Follow. Fetching the
// target is the delivery worker's job.
func (s *Store) Follow(ctx context.Context, actor *Actor, target string) (*Activity, error) {
	if err := s.checkFollowTarget(ctx, actor, target); err != nil {
		return nil, err
	}
	ev := s.newEvent()
	var act *Activity
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		// BlocksTx locks the actor: a Block of the target beside this
		// Follow waits for it or is waited for.
		blocked, err := s.BlocksTx(ctx, tx, actor.ID, target)
		if err != nil {
			return err
		}
		if blocked {
			return Errorf(ECONFLICT, "you block %q; undo the block first", target)
		}
		id := activitypub.ActivityID(s.uris.Base, ev.ID, "Follow")
		res, err := tx.ExecContext(ctx, `INSERT INTO following (actor_id, target_uri, follow_activity_id, state, created_at, updated_at)
			VALUES (?, ?, ?, 'pending', ?, ?) ON CONFLICT (actor_id, target_uri) DO NOTHING`,
			actor.ID, target, id, ms(ev.At), ms(ev.At))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var existing, state string
			if err := tx.QueryRowContext(ctx, `SELECT follow_activity_id, state FROM following WHERE actor_id = ? AND target_uri = ?`,
				actor.ID, target).Scan(&existing, &state); err != nil {
				return err
			}
			return &ExistingError{Err: Errorf(ECONFLICT, "you already follow %q (%s): Follow %s", target, state, existing), ID: existing}
		}
		act, err = s.emitTx(ctx, tx, ev, actor, "Follow", target, []string{target}, nil)
		return err
	})
	if err != nil {
		return nil, wrap("follow", err)
	}
	return act, nil
}

// Like records actor's Like of object uri and enqueues the Like, addressed
// to the object's author when courier knows it, in one transaction. A
// second Like of the same object is ECONFLICT.
func (s *Store) Like(ctx context.Context, actor *Actor, uri string) (*Activity, error) {
	return s.react(ctx, actor, ReactionLike, uri)
}

// Announce records actor's Announce (boost) of object uri and enqueues it,
// public and copied to the author and actor's followers, in one
// transaction. A followers-only or direct object cannot be announced
// (EFORBIDDEN); a second Announce of it is ECONFLICT.
func (s *Store) Announce(ctx context.Context, actor *Actor, uri string) (*Activity, error) {
	return s.react(ctx, actor, ReactionAnnounce, uri)
}

func (s *Store) react(ctx context.Context, actor *Actor, typ, uri string) (*Activity, error) {
	if !absoluteURL(uri) {
		return nil, Errorf(EINVALID, "object %q is not an absolute http(s) URL", uri)
	}
	if blocked, err := s.IsDomainBlocked(ctx, uri); err != nil {
		return nil, err
	} else if blocked {
		return nil, Errorf(EFORBIDDEN, "the domain of %q is blocked", uri)
	}
	ev := s.newEvent()
	var act *Activity
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		var author string
		// Locked for share (ObjectByURITx): a Delete of the object
		// imported beside this reaction waits for it (and then removes
		// it), or is seen by it; reactions beside this one do not wait.
		o, err := s.ObjectByURITx(ctx, tx, uri)
		if errors.Is(err, ErrNotFound) && !s.uris.IsLocal(uri) {
			// No row to lock: the object's Delete, which makes one,
			// is kept apart by the URI's lock, and the object read
			// again after it.
			if err := s.lockObjectURITx(ctx, tx, uri); err != nil {
				return err
			}
			o, err = s.ObjectByURITx(ctx, tx, uri)
		}
		switch {
		case err == nil:
			if o.Deleted() {
				return Errorf(EGONE, "object %q was deleted", uri)
			}
			if typ == ReactionAnnounce && o.Visibility != VisibilityPublic && o.Visibility != VisibilityUnlisted {
				return Errorf(EFORBIDDEN, "object %q is not public and cannot be announced", uri)
			}
			author = o.AttributedTo
		case errors.Is(err, ErrNotFound):
			if s.uris.IsLocal(uri) {
				return Errorf(ENOTFOUND, "no object %q", uri)
			}
		default:
			return err
		}
		var to, cc []string
		if typ == ReactionLike {
			if author != "" && author != actor.URI {
				to = []string{author}
			}
		} else {
			to = []string{Public}
			cc = []string{s.uris.Followers(actor.Name)}
			if author != "" && author != actor.URI {
				cc = append(cc, author)
			}
		}
		id := activitypub.ActivityID(s.uris.Base, ev.ID, typ)
		added, err := s.AddReactionTx(ctx, tx, Reaction{ActivityURI: id, Type: typ, ActorURI: actor.URI, ObjectURI: uri})
		if err != nil {
			return err
		}
		if !added {
			return Errorf(ECONFLICT, "you already sent a %s of %q", typ, uri)
		}
		act, err = s.emitTx(ctx, tx, ev, actor, typ, uri, to, cc)
		return err
	})
	if err != nil {
		return nil, wrap(typ, err)
	}
	return act, nil
}

// Block records actor's block of target (a remote actor, or another local
// one), severs the follows between them both ways, and enqueues the Block,
// in one transaction. A local target gets the Block through the import,
// as a remote one would (its side of the follows severed there); what the
// blocked actor sends then reaches neither actor's inbox view. Blocking a
// blocked actor is ECONFLICT; blocking oneself, or a local id that is no
// actor, EINVALID.
func (s *Store) Block(ctx context.Context, actor *Actor, target string) (*Activity, error) {
	if !absoluteURL(target) {
		return nil, Errorf(EINVALID, "%q is not an actor id", target)
	}
	if target == actor.URI {
		return nil, Errorf(EINVALID, "an actor cannot block itself")
	}
	ev := s.newEvent()
	var act *Activity
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		if s.uris.IsLocal(target) {
			if _, err := s.ActorByURITx(ctx, tx, target); err != nil {
				if ErrorCode(err) == ENOTFOUND {
					return Errorf(EINVALID, "%q is not an actor id", target)
				}
				return err
			}
		}
		added, err := s.addBlockTx(ctx, tx, actor.ID, target, BlockOutgoing, activitypub.ActivityID(s.uris.Base, ev.ID, "Block"))
		if err != nil {
			return err
		}
		if !added {
			return Errorf(ECONFLICT, "you already block %q", target)
		}
		act, err = s.emitTx(ctx, tx, ev, actor, "Block", target, []string{target}, nil)
		return err
	})
	if err != nil {
		return nil, wrap("block", err)
	}
	return act, nil
}

// Undoable reports whether Undo can take back an activity of type typ:
// Follow, Like, Announce or Block.
func Undoable(typ string) bool {
	switch typ {
	case "Follow", "Like", "Announce", "Block":
		return true
	}
	return false
}

// ActiveActivity returns the id of actor's standing activity typ (Follow,
// Like, Announce or Block) on object (a remote actor or an object id), for
// an Undo that names what it undoes instead of its id. ENOTFOUND if none.
func (s *Store) ActiveActivity(ctx context.Context, actor *Actor, typ, object string) (string, error) {
	var q string
	args := []any{actor.ID, object}
	switch typ {
	case "Follow":
		q = `SELECT follow_activity_id FROM following WHERE actor_id = ? AND target_uri = ?`
	case "Block":
		q = `SELECT COALESCE(activity_id, '') FROM blocks WHERE actor_id = ? AND remote_uri = ? AND direction = 'outgoing'`
	case "Like", "Announce":
		q = `SELECT activity_uri FROM reactions WHERE actor_uri = ? AND object_uri = ? AND type = ?`
		args = []any{actor.URI, object, typ}
	default:
		return "", Errorf(EUNPROCESSABLE, "%s cannot be undone", typ)
	}
	var id string
	if err := s.db.Read.QueryRowContext(ctx, q, args...).Scan(&id); err != nil || id == "" {
		if err == nil {
			err = sql.ErrNoRows
		}
		return "", wrap("active activity", notFound(err, ENOTFOUND, "no %s of %q to undo", typ, object))
	}
	return id, nil
}

// Undo takes back actor's own Follow, Like, Announce or Block activity uri:
// the relationship it created is removed, the activity is marked undone,
// and an Undo embedding it (same audience) is enqueued, in one transaction.
// Another actor's activity is EFORBIDDEN, another type EUNPROCESSABLE, an
// activity already undone ECONFLICT.
func (s *Store) Undo(ctx context.Context, actor *Actor, uri string) (*Activity, error) {
	ev := s.newEvent()
	var act *Activity
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		orig, err := activityByURI(ctx, tx, uri)
		if err != nil {
			return err
		}
		if orig.ActorID != actor.ID {
			return Errorf(EFORBIDDEN, "activity %q belongs to another actor", uri)
		}
		if !Undoable(orig.Type) {
			return Errorf(EUNPROCESSABLE, "a %s cannot be undone", orig.Type)
		}
		// One conditional update decides a race of two Undos: the second
		// finds the activity withdrawn.
		res, err := tx.ExecContext(ctx, `UPDATE activities SET withdrawn_at = ? WHERE id = ? AND withdrawn_at IS NULL`, ms(ev.At), orig.RowID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return Errorf(ECONFLICT, "activity %q was already undone", uri)
		}
		var q string
		args := []any{uri}
		switch orig.Type {
		case "Follow":
			q = `DELETE FROM following WHERE follow_activity_id = ?`
		case "Like", "Announce":
			q = `DELETE FROM reactions WHERE activity_uri = ?`
		case "Block":
			q = `DELETE FROM blocks WHERE actor_id = ? AND remote_uri = ? AND direction = 'outgoing'`
			args = []any{actor.ID, orig.ObjectURI}
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
		embedded, to, cc, err := embedActivity(orig.Document)
		if err != nil {
			return err
		}
		act, err = s.emitTx(ctx, tx, ev, actor, "Undo", embedded, to, cc)
		return err
	})
	if err != nil {
		return nil, wrap("undo", err)
	}
	return act, nil
}

// embedActivity returns a stored activity without its @context, for
// embedding in an Undo, and its audience.
func embedActivity(doc json.RawMessage) (map[string]any, []string, []string, error) {
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		return nil, nil, nil, err
	}
	delete(m, "@context")
	return m, stringList(m["to"]), stringList(m["cc"]), nil
}

func stringList(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// UpdateActor changes the profile (or rotates the key) of the local actor
// name and enqueues an Update of its actor document to its followers, in
// one transaction.
func (s *Store) UpdateActor(ctx context.Context, name string, u ActorUpdate) (*Actor, *Activity, error) {
	ev := s.newEvent()
	var a *Actor
	var act *Activity
	var privPEM, pubPEM string
	var edKey ed25519.PrivateKey
	if u.RotateKey {
		key, err := s.newKey()
		if err != nil {
			return nil, nil, wrap("update actor", err)
		}
		if privPEM, pubPEM, err = encodeKey(key); err != nil {
			return nil, nil, wrap("update actor", err)
		}
		if edKey, err = activitypub.GenerateEd25519Key(); err != nil {
			return nil, nil, wrap("update actor", err)
		}
	}
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		// Locked: two updates at once apply one after the other, and an
		// update beside the actor's deletion lands before it or not at all.
		if a, err = s.actorForUpdate(ctx, tx, name); err != nil {
			return err
		}
		if u.DisplayName != nil {
			a.DisplayName = *u.DisplayName
		}
		if u.Summary != nil {
			a.Summary = *u.Summary
		}
		if u.ManuallyApprovesFollowers != nil {
			a.ManuallyApprovesFollowers = *u.ManuallyApprovesFollowers
		}
		if err := validateProfile(a.DisplayName, a.Summary); err != nil {
			return err
		}
		if u.Profile != nil {
			if err := s.updateProfileTx(ctx, tx, a, u.Profile); err != nil {
				return err
			}
		}
		if u.RotateKey {
			a.PrivateKeyPEM, a.PublicKeyPEM, a.Ed25519Key = privPEM, pubPEM, edKey
			if _, err := tx.ExecContext(ctx, `UPDATE actors SET ed25519_seed = ? WHERE id = ?`, edKey.Seed(), a.ID); err != nil {
				return err
			}
		}
		a.UpdatedAt = ev.At
		if _, err := tx.ExecContext(ctx, `UPDATE actors SET display_name = ?, summary = ?, manually_approves_followers = ?,
			private_key_pem = ?, public_key_pem = ?, updated_at = ? WHERE id = ?`,
			a.DisplayName, a.Summary, a.ManuallyApprovesFollowers, a.PrivateKeyPEM, a.PublicKeyPEM, ms(ev.At), a.ID); err != nil {
			return err
		}
		doc := s.ActorDocument(a)
		doc.Context = nil
		act, err = s.emitTx(ctx, tx, ev, a, "Update", doc, []string{Public}, []string{s.uris.Followers(a.Name)})
		return err
	})
	if err != nil {
		return nil, nil, wrap("update actor", err)
	}
	return a, act, nil
}

// FollowObject is the Follow embedded in an Accept or Reject: the remote
// follower's Follow, by id when known.
func FollowObject(followID, follower, followee string) map[string]any {
	m := map[string]any{"type": "Follow", "actor": follower, "object": followee}
	if followID != "" {
		m["id"] = followID
	}
	return m
}
