package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
)

// An inbound Move of a remote account that local actors follow (package
// inbox verifies it: the new account lists the old one in alsoKnownAs).

// MovedFollow is what MoveFollowsTx did for one local actor.
type MovedFollow struct {
	Actor *Actor
	// Undo is the Undo of the actor's Follow of the old account.
	Undo *Activity
	// Follow is the Follow of the new account; nil when the actor blocks
	// it or follows it already.
	Follow *Activity
}

// MoveFollowsTx moves, in tx, every local actor's follow (accepted or
// pending) of oldURI to newURI, as a Follow sent by the actor would: its
// follow of oldURI goes and its Undo is enqueued to oldURI, and a pending
// follow of newURI is stored and its Follow enqueued to newURI, unless the
// actor blocks newURI or follows it already. The activities' outbox event
// ids derive from eventID (outbox.ChildID of it, "move-undo:" and
// "move-follow:" and the actor's name) and their time is at, so a call
// again for the same event enqueues nothing twice. newURI must be a remote
// actor (checkRemoteActor: EINVALID, EFORBIDDEN for a blocked domain).
func (s *Store) MoveFollowsTx(ctx context.Context, tx *sql.Tx, eventID string, at time.Time, oldURI, newURI string) ([]MovedFollow, error) {
	if eventID == "" || oldURI == "" || oldURI == newURI {
		return nil, Errorf(EINVALID, "a move needs an event id and two different accounts")
	}
	if err := s.checkRemoteActor(ctx, newURI); err != nil {
		return nil, err
	}
	type row struct {
		actorID  int64
		followID string
	}
	rows, err := tx.QueryContext(ctx, `SELECT actor_id, follow_activity_id FROM following WHERE target_uri = ? ORDER BY actor_id`, oldURI)
	if err != nil {
		return nil, wrap("move follows", err)
	}
	var follows []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.actorID, &r.followID); err != nil {
			rows.Close()
			return nil, wrap("move follows", err)
		}
		follows = append(follows, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, wrap("move follows", err)
	}
	at = at.UTC().Truncate(time.Millisecond)
	var out []MovedFollow
	for _, f := range follows {
		a, err := s.scanActor(tx.QueryRowContext(ctx, `SELECT `+actorColumns+` FROM actors WHERE id = ? AND deleted_at IS NULL`, f.actorID))
		if err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				continue // deleted: its follows go with it
			}
			return nil, wrap("move follows", err)
		}
		m := MovedFollow{Actor: a}
		// BlocksTx locks the actor, as a Follow does.
		blocked, err := s.BlocksTx(ctx, tx, a.ID, newURI)
		if err != nil {
			return nil, wrap("move follows", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM following WHERE actor_id = ? AND target_uri = ?`, a.ID, oldURI); err != nil {
			return nil, wrap("move follows", err)
		}
		if m.Undo, _, err = s.emitOnceTx(ctx, tx, pendingEvent{ID: outbox.ChildID(eventID, "move-undo:"+a.Name), At: at}, a, "Undo",
			FollowObject(f.followID, a.URI, oldURI), []string{oldURI}, nil); err != nil {
			return nil, wrap("move follows", err)
		}
		if !blocked {
			ev := pendingEvent{ID: outbox.ChildID(eventID, "move-follow:"+a.Name), At: at}
			id := activitypub.ActivityID(s.uris.Base, ev.ID, "Follow")
			res, err := tx.ExecContext(ctx, `INSERT INTO following (actor_id, target_uri, follow_activity_id, state, created_at, updated_at)
				VALUES (?, ?, ?, 'pending', ?, ?) ON CONFLICT DO NOTHING`, a.ID, newURI, id, ms(at), ms(at))
			if err != nil {
				return nil, wrap("move follows", err)
			}
			if n, _ := res.RowsAffected(); n == 1 {
				if m.Follow, _, err = s.emitOnceTx(ctx, tx, ev, a, "Follow", newURI, []string{newURI}, nil); err != nil {
					return nil, wrap("move follows", err)
				}
			}
		}
		out = append(out, m)
	}
	return out, nil
}
