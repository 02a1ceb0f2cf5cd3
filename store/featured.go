package store

import (
	"context"
	"database/sql"
)

// An actor's featured collection (pinned posts, Mastodon's toot:featured):
// a client pins an own public or unlisted object by a C2S Add with the
// collection as target, and unpins it by a Remove. Each writes the row and
// enqueues the Add or Remove (target the collection, to Public, cc the
// followers) in one transaction, which Mastodon reads to pin the status on
// its side. A deleted object leaves the collection (forgetObjectTx).

// MaxFeatured bounds an actor's pinned objects (Mastodon's bound is 5).
const MaxFeatured = 20

// Feature pins actor's own object uri to its featured collection and
// enqueues the Add. Another actor's object is EFORBIDDEN, a deleted one
// EGONE, one not public or unlisted EUNPROCESSABLE, one pinned already
// ECONFLICT, one past MaxFeatured EUNPROCESSABLE.
func (s *Store) Feature(ctx context.Context, actor *Actor, uri string) (*Activity, error) {
	return s.feature(ctx, actor, uri, true)
}

// Unfeature unpins actor's object uri and enqueues the Remove; an object
// not pinned is ENOTFOUND.
func (s *Store) Unfeature(ctx context.Context, actor *Actor, uri string) (*Activity, error) {
	return s.feature(ctx, actor, uri, false)
}

func (s *Store) feature(ctx context.Context, actor *Actor, uri string, add bool) (*Activity, error) {
	ev := s.newEvent()
	ev.Target = s.uris.Featured(actor.Name)
	var act *Activity
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		// The actor's row, locked: two pins at once count one after the other.
		if _, err := s.actorForUpdate(ctx, tx, actor.Name); err != nil {
			return err
		}
		typ := "Remove"
		if add {
			typ = "Add"
			o, err := s.ownObjectTx(ctx, tx, actor, uri)
			if err != nil {
				return err
			}
			if o.Visibility != VisibilityPublic && o.Visibility != VisibilityUnlisted {
				return Errorf(EUNPROCESSABLE, "only public and unlisted objects can be featured; %q is %s", uri, o.Visibility)
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM featured WHERE actor_id = ?`, actor.ID).Scan(&n); err != nil {
				return err
			}
			if n >= MaxFeatured {
				return Errorf(EUNPROCESSABLE, "at most %d objects can be featured", MaxFeatured)
			}
			res, err := tx.ExecContext(ctx, `INSERT INTO featured (actor_id, object_uri, created_at) VALUES (?, ?, ?)
				ON CONFLICT DO NOTHING`, actor.ID, o.URI, ms(ev.At))
			if err != nil {
				return err
			}
			if k, _ := res.RowsAffected(); k == 0 {
				return Errorf(ECONFLICT, "%q is featured already", uri)
			}
		} else {
			res, err := tx.ExecContext(ctx, `DELETE FROM featured WHERE actor_id = ? AND object_uri = ?`, actor.ID, uri)
			if err != nil {
				return err
			}
			if k, _ := res.RowsAffected(); k == 0 {
				return Errorf(ENOTFOUND, "%q is not featured", uri)
			}
		}
		var err error
		act, err = s.emitTx(ctx, tx, ev, actor, typ, uri, []string{Public}, []string{s.uris.Followers(actor.Name)})
		return err
	})
	if err != nil {
		return nil, wrap("feature", err)
	}
	return act, nil
}

// Featured returns the ids of the objects the actor actorID pinned, the
// latest pinned first.
func (s *Store) Featured(ctx context.Context, actorID int64) ([]string, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT object_uri FROM featured WHERE actor_id = ?
		ORDER BY created_at DESC, object_uri LIMIT ?`, actorID, MaxFeatured)
	if err != nil {
		return nil, wrap("featured", err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			return nil, wrap("featured", err)
		}
		out = append(out, u)
	}
	return out, wrap("featured", rows.Err())
}
