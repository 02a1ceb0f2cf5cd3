package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// Activities of local actors reach the local actors they address through
// the same import as a remote actor's: the delivery fan-out records them
// here instead of POSTing to courier itself. What differs:
//
//   - nothing is fetched: a local follower's inboxes are known, and what a
//     local activity names is in the store or embedded;
//   - what the local actor's own write already did is not done twice: the
//     note of its Create, Update or Delete is the store's own, and its Like
//     or Announce (and their Undo) was counted when it was written. These
//     import as OutcomeLocal;
//   - a local actor's Delete of itself ends the follows between it and the
//     other local actors.
//
// Everything else (Follow, Accept, Reject, Undo of a Follow, Block) is
// applied as for a remote actor.

// Local records the activities of local actors for the local actors they
// reach, in the delivery fan-out's transaction (delivery.LocalInbox, wired
// by cmd/courier), so that inbox_activities has one writer: this package.
type Local struct{}

// RecordTx records act, its bytes doc, for import as received by the inbox
// box (a local actor's name, or "" for the shared inbox) at at, and
// enqueues its EventReceived event (id EventID(act.ID)), in tx. An activity
// recorded before (a fan-out run again, the same activity received by
// HTTP) records and enqueues nothing, so it is imported once.
func (Local) RecordTx(ctx context.Context, tx *sql.Tx, act *activitypub.Activity, doc []byte, box string, at time.Time) error {
	rec := record{activityID: act.ID, typ: act.Type, actor: act.Actor, objectID: act.ObjectID, inbox: box,
		document: doc, receivedAt: at}
	ev, isNew, err := rec.insert(ctx, func(ctx context.Context, args ...any) (sql.Result, error) {
		return tx.ExecContext(ctx, sqlInsertActivity, args...)
	})
	if err == nil && isNew {
		err = outbox.Enqueue(ctx, tx, ev)
	}
	if err != nil {
		return fmt.Errorf("inbox: record local %s: %w", act.ID, err)
	}
	return nil
}

// prepareLocal is prepare for an activity of a local actor.
func (im *Importer) prepareLocal(ctx context.Context, act *activitypub.Activity) (prepared, error) {
	var pre prepared
	if act.Type != "Follow" {
		return pre, nil
	}
	if _, err := im.st.ActorByURI(ctx, act.ObjectID); err != nil {
		return pre, nil // not a local actor: nothing to resolve
	}
	follower, err := im.st.ActorByURI(ctx, act.Actor)
	if err != nil {
		if store.ErrorCode(err) == store.ENOTFOUND {
			return pre, nil // deleted meanwhile
		}
		return pre, err
	}
	uris := im.st.URIs()
	pre.follower = &activitypub.Actor{ID: follower.URI, Type: "Person", PreferredUsername: follower.Name,
		Inbox: uris.Inbox(follower.Name)}
	return pre, nil
}

// applyLocal applies, in tx, what differs for an activity of a local
// actor; it reports false for an activity to apply as any other.
func (im *Importer) applyLocal(ctx context.Context, tx *sql.Tx, act *activitypub.Activity) (importOutcome, bool, error) {
	uris := im.st.URIs()
	if !uris.IsLocal(act.Actor) {
		return importOutcome{}, false, nil
	}
	switch act.Type {
	case "Create", "Update":
		if uris.IsLocal(act.ObjectID) {
			return outcomeOf(OutcomeLocal), true, nil
		}
	case "Delete":
		if isActorDelete(act) {
			if err := im.st.RemoveLocalTiesTx(ctx, tx, act.Actor); err != nil {
				out, err := refusal(err, importOutcome{})
				return out, true, err
			}
			return outcomeOf(OutcomeActorGone), true, nil
		}
		if _, stamp := uris.QuoteID(act.ObjectID); stamp {
			return importOutcome{}, false, nil // a revoked stamp of a local quote: quote.go
		}
		if uris.IsLocal(act.ObjectID) {
			return outcomeOf(OutcomeLocal), true, nil
		}
	case "Like", "Announce":
		return outcomeOf(OutcomeLocal), true, nil
	case "Undo":
		if act.Object != nil && (act.Object.Type == "Like" || act.Object.Type == "Announce") {
			return outcomeOf(OutcomeLocal), true, nil
		}
	}
	return importOutcome{}, false, nil
}
