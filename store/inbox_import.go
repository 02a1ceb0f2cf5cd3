package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// This file holds the queries the inbound import handlers (package inbox)
// need beyond the rest of the store.

// EnqueueEventActivityTx builds the activity typ of the local actor about
// object, addressed to to and cc, under the given outbox event id and time,
// stores it and enqueues the outgoing event that carries it, all in tx. Its
// id derives from eventID (activitypub.ActivityID), so a caller that derives
// eventID deterministically (the inbox's Accept of a Follow uses
// outbox.ChildID of the inbound event) may call it any number of times: when
// the activity is already stored, it is returned unchanged and nothing is
// enqueued. It reports whether the activity is new.
func (s *Store) EnqueueEventActivityTx(ctx context.Context, tx *sql.Tx, eventID string, at time.Time, actor *Actor, typ string, object any, to, cc []string) (*Activity, bool, error) {
	if eventID == "" || actor == nil {
		return nil, false, Errorf(EINVALID, "an activity needs an event id and a local actor")
	}
	existing, err := activityByURI(ctx, tx, activitypub.ActivityID(s.uris.Base, eventID, typ))
	switch {
	case err == nil:
		return existing, false, nil
	case !errors.Is(err, ErrNotFound):
		return nil, false, err
	}
	if at.IsZero() {
		at = s.clock()
	}
	// Stored beside this call by another transaction (another worker
	// importing the same event): emitOnceTx waits for it and returns it.
	return s.emitOnceTx(ctx, tx, pendingEvent{ID: eventID, At: at.UTC().Truncate(time.Millisecond)}, actor, typ, object, to, cc)
}

// RemoveFollowByActivityTx removes the follower followerURI whose Follow
// had the id followID (an Undo that names the Follow by id only), in tx. It
// reports whether a row was removed.
func (s *Store) RemoveFollowByActivityTx(ctx context.Context, tx *sql.Tx, followerURI, followID string) (bool, error) {
	res, err := tx.ExecContext(ctx, `DELETE FROM followers WHERE follower_uri = ? AND follow_activity_id = ?`,
		followerURI, followID)
	if err != nil {
		return false, wrap("remove follow", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// ObjectByURITx returns the object with ActivityPub id uri as tx sees it
// (a tombstone included), or ENOTFOUND. The row is locked for share
// (forShare) until tx ends, so that what tx adds on the strength of it (a
// reaction to a note not deleted) is not undercut by a deletion beside it:
// the deletion waits for tx, and then removes what tx added.
func (s *Store) ObjectByURITx(ctx context.Context, tx *sql.Tx, uri string) (*Object, error) {
	o, err := scanObject(tx.QueryRowContext(ctx, `SELECT `+objectColumns+` FROM objects WHERE uri = ?`+s.forShare(), uri))
	if err != nil {
		return nil, wrap("object", notFound(err, ENOTFOUND, "no object %q", uri))
	}
	return o, nil
}

// ActorByURITx returns the local actor whose id (or key id) is uri as tx
// sees it, or ENOTFOUND (for a deleted actor too).
func (s *Store) ActorByURITx(ctx context.Context, tx *sql.Tx, uri string) (*Actor, error) {
	return s.localActor(ctx, tx, uri)
}
