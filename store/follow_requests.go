package store

import (
	"context"
	"database/sql"
	"errors"
)

// This file holds the answers of a local actor to the Follows it received:
// an actor that manually approves followers keeps inbound Follows pending
// until it accepts or rejects them (C2S Accept/Reject, `courier actor
// followers approve|reject`).

// ApproveFollower accepts the pending follower followerURI of the
// manually-approving actor and enqueues the Accept of its Follow, in one
// transaction. An unknown follower is ENOTFOUND, an accepted one ECONFLICT.
func (s *Store) ApproveFollower(ctx context.Context, actor *Actor, followerURI string) (*Activity, error) {
	return s.answerFollower(ctx, actor, FollowRequest{Follower: followerURI}, "Accept")
}

// RejectFollower removes the follower followerURI, pending or accepted (a
// Reject of an accepted follower ends its follow, as Mastodon does), and
// enqueues the Reject of its Follow, in one transaction. An unknown
// follower is ENOTFOUND.
func (s *Store) RejectFollower(ctx context.Context, actor *Actor, followerURI string) (*Activity, error) {
	return s.answerFollower(ctx, actor, FollowRequest{Follower: followerURI}, "Reject")
}

// FollowRequest names a Follow a local actor received: by the Follow's id,
// by its follower, or both (then they must agree).
type FollowRequest struct {
	FollowID string
	Follower string
}

// AnswerFollow applies actor's Accept or Reject (typ) of the Follow req
// names: an Accept approves a pending follower (an accepted one is
// ECONFLICT), a Reject removes a pending or accepted follower. The answer
// is enqueued to the follower in the same transaction. A Follow actor
// never received is ENOTFOUND.
func (s *Store) AnswerFollow(ctx context.Context, actor *Actor, req FollowRequest, typ string) (*Activity, error) {
	if typ != "Accept" && typ != "Reject" {
		return nil, Errorf(EINVALID, "a follow request is answered with Accept or Reject, not %q", typ)
	}
	if req.FollowID == "" && req.Follower == "" {
		return nil, Errorf(EINVALID, "%s needs the Follow's id or its actor", typ)
	}
	return s.answerFollower(ctx, actor, req, typ)
}

func (s *Store) answerFollower(ctx context.Context, actor *Actor, req FollowRequest, typ string) (*Activity, error) {
	ev := s.newEvent()
	var act *Activity
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		follower := req.Follower
		if req.FollowID != "" {
			var uri string
			err := tx.QueryRowContext(ctx, `SELECT follower_uri FROM followers WHERE actor_id = ? AND follow_activity_id = ?`,
				actor.ID, req.FollowID).Scan(&uri)
			if errors.Is(err, sql.ErrNoRows) {
				// Another actor's Follow is not this actor's to answer.
				var n int
				if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM followers WHERE follow_activity_id = ?`,
					req.FollowID).Scan(&n); err != nil {
					return err
				}
				if n > 0 {
					return Errorf(EFORBIDDEN, "Follow %q is not of %s", req.FollowID, actor.URI)
				}
			}
			if err != nil {
				return notFound(err, ENOTFOUND, "no Follow %q of %s", req.FollowID, actor.URI)
			}
			if follower != "" && follower != uri {
				return Errorf(EINVALID, "Follow %q is by %q, not %q", req.FollowID, uri, follower)
			}
			follower = uri
		}
		// One conditional statement answers the request: of an approval
		// and a rejection at once, the one that comes second finds the
		// row gone (after a rejection) or accepted (after an approval,
		// which a rejection then ends).
		q := `UPDATE followers SET state = 'accepted', updated_at = ?
			WHERE actor_id = ? AND follower_uri = ? AND state = 'pending' RETURNING COALESCE(follow_activity_id, '')`
		args := []any{ms(ev.At), actor.ID, follower}
		if typ != "Accept" {
			q = `DELETE FROM followers WHERE actor_id = ? AND follower_uri = ? RETURNING COALESCE(follow_activity_id, '')`
			args = args[1:]
		}
		var followID string
		if err := tx.QueryRowContext(ctx, q, args...).Scan(&followID); err != nil {
			if !errors.Is(err, sql.ErrNoRows) || typ != "Accept" {
				return notFound(err, ENOTFOUND, "no follow request from %q", follower)
			}
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM followers WHERE actor_id = ? AND follower_uri = ?`,
				actor.ID, follower).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return Errorf(ECONFLICT, "%q is already an accepted follower", follower)
			}
			return Errorf(ENOTFOUND, "no pending follow request from %q", follower)
		}
		var err error
		act, err = s.emitTx(ctx, tx, ev, actor, typ, FollowObject(followID, follower, actor.URI), []string{follower}, nil)
		return err
	})
	if err != nil {
		return nil, wrap(typ+" follower", err)
	}
	return act, nil
}

// ExistingError is an ECONFLICT whose request already stands as the
// activity ID (a second Follow of one actor names the first), so that its
// answer can name it.
type ExistingError struct {
	Err *Error
	ID  string
}

func (e *ExistingError) Error() string { return e.Err.Error() }

// Unwrap returns the *Error, for ErrorCode and errors.Is.
func (e *ExistingError) Unwrap() error { return e.Err }

// checkFollowTarget validates the id of the actor a local actor follows:
// an absolute URL on a domain not blocked, or a local actor other than
// actor itself.
func (s *Store) checkFollowTarget(ctx context.Context, actor *Actor, target string) error {
	if !s.uris.IsLocal(target) {
		return s.checkRemoteActor(ctx, target)
	}
	if target == actor.URI {
		return Errorf(EINVALID, "an actor cannot follow itself")
	}
	if _, err := s.localActor(ctx, s.db.Read, target); err != nil {
		return err
	}
	return nil
}

// RemoveLocalTiesTx ends, in tx, the follows between the deleted local
// actor actorURI and the other local actors, both ways: the import of its
// Delete for them.
func (s *Store) RemoveLocalTiesTx(ctx context.Context, tx *sql.Tx, actorURI string) error {
	if !s.uris.IsLocal(actorURI) {
		return Errorf(EINVALID, "actor %q is not local", actorURI)
	}
	for _, q := range []string{
		`DELETE FROM followers WHERE follower_uri = ?`,
		`DELETE FROM following WHERE target_uri = ?`,
	} {
		if _, err := tx.ExecContext(ctx, q, actorURI); err != nil {
			return wrap("remove local ties", err)
		}
	}
	return nil
}
