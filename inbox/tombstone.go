package inbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// Remote tombstones. Peers deliver out of order too: an object's Delete
// can arrive before its Create, or between an Update and the Create it
// follows. Every Delete of a remote object (stored or not; see concerns)
// leaves a remote tombstone naming the object and the deleting actor
// (store.DeleteRemoteObjectTx), at most Config.TombstoneLimit of them, the
// oldest going first, each kept Config.TombstoneRetention (30 days) and
// swept by Importer.Run. A Create or Update of a tombstoned object, and
// an object fetched for one, is acknowledged and not stored: its outcome
// is OutcomeTombstoned, counted in the admin inbound view. What a
// tombstone names is never fetched.

// tombstoned decides, in tx, whether the object act would store has a
// remote tombstone; ok is true when it has and outcome is then
// OutcomeTombstoned.
func (im *Importer) tombstoned(ctx context.Context, tx *sql.Tx, act *activitypub.Activity, pre prepared) (outcome importOutcome, ok bool, err error) {
	id := tombstoneSubject(act, pre)
	if id == "" || im.st.URIs().IsLocal(id) {
		return importOutcome{}, false, nil
	}
	dead, err := im.st.RemoteTombstonedTx(ctx, tx, id)
	if err != nil {
		return importOutcome{}, false, fmt.Errorf("tombstone of %s: %w", id, err)
	}
	if !dead {
		return importOutcome{}, false, nil
	}
	return outcomeOf(OutcomeTombstoned), true, nil
}

// tombstoneSubject is the id of the remote object act would store: the
// object fetched for it, or the object of a Create or Update (embedded or
// by id), not an actor's Update of itself. "" for anything else.
func tombstoneSubject(act *activitypub.Activity, pre prepared) string {
	if pre.fetched != nil {
		return pre.fetched.ID
	}
	if act.Type != "Create" && act.Type != "Update" {
		return ""
	}
	if o := act.Object; o != nil {
		if actorTypes[o.Type] || o.ID == act.Actor {
			return ""
		}
		return o.ID
	}
	if act.ObjectID == act.Actor {
		return ""
	}
	return act.ObjectID
}

// SweepTombstones deletes the remote tombstones older than
// TombstoneRetention and returns how many it deleted; Run calls it every
// SweepInterval.
func (im *Importer) SweepTombstones(ctx context.Context) (int, error) {
	n, err := im.st.SweepRemoteTombstones(ctx, im.cfg.Now().Add(-im.cfg.TombstoneRetention), sweepBatch)
	if err != nil {
		return n, fmt.Errorf("inbox: sweep remote tombstones: %w", err)
	}
	return n, nil
}

// SweepMoves deletes the remote accounts' Moves older than
// store.MoveCooldown (they hold nothing back any more) and returns how many
// it deleted; Run calls it every SweepInterval.
func (im *Importer) SweepMoves(ctx context.Context) (int, error) {
	n, err := im.st.SweepRemoteMoves(ctx, im.cfg.Now().Add(-store.MoveCooldown), sweepBatch)
	if err != nil {
		return n, fmt.Errorf("inbox: sweep remote moves: %w", err)
	}
	return n, nil
}
