package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// An inbound Move: a remote account announces it moved to another
// (Mastodon's account migration). It is believed only when its actor and
// its object are the old account and the new account's document, fetched
// afresh before the import's transaction, lists the old account in
// alsoKnownAs (Mastodon's rule). Every local actor that follows the old
// account then stops following it (an Undo of its Follow is sent) and
// follows the new one (a Follow enqueued in the import's transaction, as a
// client's Follow is), unless it blocks the new account or follows it
// already (store.MoveFollowsTx). A Move of an account whose last honoured
// Move is less than store.MoveCooldown (7 days) old is not honoured
// (OutcomeMoveCooldown), checked before the fetch and again in the
// transaction.

// OutcomeMoved: a verified Move moved local actors' follows to its target.
const OutcomeMoved = "moved"

// OutcomeMoveCooldown: a Move of an account that moved less than
// store.MoveCooldown ago; nothing changed.
const OutcomeMoveCooldown = "move_cooldown"

// actorFetcher is the Resolver method the verification uses: a fresh
// fetch, so that an alsoKnownAs just added is seen.
type actorFetcher interface {
	Refresh(ctx context.Context, id string) (*activitypub.Actor, error)
}

// verifyMove checks a Move before its transaction. It returns the outcome
// that ends the import ("" when the Move is verified and concerns local
// follows), or an error worth a retry (the new account's server did not
// answer).
func (im *Importer) verifyMove(ctx context.Context, act *activitypub.Activity) (importOutcome, error) {
	switch {
	case act.ObjectID != act.Actor:
		return refused("a Move's object must be its actor"), nil
	case act.Target == "" || act.Target == act.Actor:
		return refused("a Move needs a target other than its actor"), nil
	case im.st.URIs().IsLocal(act.Target):
		return refused("a Move to a local actor is not supported"), nil
	}
	followed, err := im.st.SubscribedTo(ctx, act.Actor)
	if err != nil {
		return importOutcome{}, err
	}
	if !followed {
		return outcomeOf(OutcomeNoMatch), nil
	}
	if recent, err := im.st.RemoteMovedWithin(ctx, act.Actor, im.cfg.Now()); err != nil {
		return importOutcome{}, err
	} else if recent {
		return outcomeOf(OutcomeMoveCooldown), nil
	}
	if blocked, err := im.st.IsDomainBlocked(ctx, act.Target); err != nil || blocked {
		return refused("the Move's target is on a blocked domain"), err
	}
	var target *activitypub.Actor
	if f, ok := im.cfg.Resolver.(actorFetcher); ok {
		target, err = f.Refresh(ctx, act.Target)
	} else {
		target, err = im.cfg.Resolver.Actor(ctx, act.Target)
	}
	switch {
	case errors.Is(err, activitypub.ErrGone) || errors.Is(err, activitypub.ErrNotFound):
		return refused("the Move's target is gone"), nil
	case err != nil:
		return importOutcome{}, fmt.Errorf("fetch the Move's target %s: %w", act.Target, err)
	case target.ID != act.Target:
		return refused("the Move's target document has another id"), nil
	}
	if !slices.Contains(alsoKnownAs(target), act.Actor) {
		return refused("the Move's target does not list its actor in alsoKnownAs"), nil
	}
	return importOutcome{}, nil
}

// alsoKnownAs returns the ids of a fetched actor's alsoKnownAs.
func alsoKnownAs(a *activitypub.Actor) []string {
	var d struct {
		AKA json.RawMessage `json:"alsoKnownAs"`
	}
	if len(a.Raw) == 0 || json.Unmarshal(a.Raw, &d) != nil {
		return nil
	}
	return activitypub.IDs(d.AKA)
}

// move applies a verified Move in tx.
func (im *Importer) move(ctx context.Context, tx *sql.Tx, eventID string, receivedAt time.Time, act *activitypub.Activity) (importOutcome, error) {
	moved, err := im.st.MoveFollowsTx(ctx, tx, eventID, receivedAt, act.Actor, act.Target)
	if errors.Is(err, store.ErrMoveCooldown) {
		return outcomeOf(OutcomeMoveCooldown), nil
	}
	if err != nil {
		return refusal(err, importOutcome{})
	}
	if len(moved) == 0 {
		return outcomeOf(OutcomeNoMatch), nil
	}
	return outcomeOf(OutcomeMoved), nil
}
