package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
)

// An inbound Move of a remote account that local actors follow (package
// inbox verifies it: the new account lists the old one in alsoKnownAs).

// MoveCooldown is how long after an honoured Move of an account no other
// Move of it is honoured: a remote account's (MoveFollowsTx refuses it with
// ErrMoveCooldown) and a local actor's (MoveActor refuses it,
// EUNPROCESSABLE). Mastodon lets an account move once in 30 days; 7 days
// here keeps an account that moves back and forth from making every
// follower here unfollow and follow again each time.
const MoveCooldown = 7 * 24 * time.Hour

// ErrMoveCooldown is returned (wrapped) by MoveFollowsTx for a Move of an
// account whose last honoured Move is less than MoveCooldown old.
var ErrMoveCooldown = errors.New("store: the account moved less than 7 days ago")

// RemoteMovedWithin reports whether a Move of the remote account uri was
// honoured within MoveCooldown before at.
func (s *Store) RemoteMovedWithin(ctx context.Context, uri string, at time.Time) (bool, error) {
	return movedWithin(s.db.Read.QueryRowContext(ctx, `SELECT moved_at FROM remote_moves WHERE actor_uri = ?`, uri), at)
}

// SweepRemoteMoves deletes the honoured Moves of remote accounts made
// before cutoff (they hold no later Move back once MoveCooldown has
// passed), batch rows a transaction, and returns how many it deleted.
func (s *Store) SweepRemoteMoves(ctx context.Context, cutoff time.Time, batch int) (int, error) {
	return s.sweepBatches(ctx, "sweep remote moves", batch, func(tx *sql.Tx) (int64, error) {
		return deletedRows(tx.ExecContext(ctx, `DELETE FROM remote_moves WHERE actor_uri IN (
			SELECT actor_uri FROM remote_moves WHERE moved_at < ? ORDER BY moved_at LIMIT ?)`, ms(cutoff), batch))
	})
}

func movedWithin(row *sql.Row, at time.Time) (bool, error) {
	var last int64
	err := row.Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, wrap("last move", err)
	}
	return at.Sub(time.UnixMilli(last)) < MoveCooldown, nil
}

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
// actor (checkRemoteActor: EINVALID, EFORBIDDEN for a blocked domain). The
// Move is remembered (remote_moves); one of oldURI less than MoveCooldown
// after the last is refused with ErrMoveCooldown.
func (s *Store) MoveFollowsTx(ctx context.Context, tx *sql.Tx, eventID string, at time.Time, oldURI, newURI string) ([]MovedFollow, error) {
	if eventID == "" || oldURI == "" || oldURI == newURI {
		return nil, Errorf(EINVALID, "a move needs an event id and two different accounts")
	}
	if err := s.checkRemoteActor(ctx, newURI); err != nil {
		return nil, err
	}
	at = at.UTC().Truncate(time.Millisecond)
	recent, err := movedWithin(tx.QueryRowContext(ctx, `SELECT moved_at FROM remote_moves WHERE actor_uri = ?`, oldURI), at)
	if err != nil {
		return nil, err
	}
	if recent {
		return nil, fmt.Errorf("move follows of %s: %w", oldURI, ErrMoveCooldown)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO remote_moves (actor_uri, target, moved_at) VALUES (?, ?, ?)
		ON CONFLICT (actor_uri) DO UPDATE SET target = excluded.target, moved_at = excluded.moved_at`,
		oldURI, newURI, ms(at)); err != nil {
		return nil, wrap("move follows", err)
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
