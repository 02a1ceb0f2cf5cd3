package inbox

import (
	"context"
	"database/sql"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
)

// relayImport applies, in tx, what a relay sends about the instance
// actor's subscription: the Accept or Reject of its Follow, and a LitePub
// relay's Follow of the instance actor (answered with an Accept, event id
// outbox.ChildID(eventID, "accept")). It reports whether act was one of
// these. (A relay's Announces are imported as any Announce by a followed
// actor: see dereference.)
func (im *Importer) relayImport(ctx context.Context, tx *sql.Tx, eventID string, receivedAt time.Time, act *activitypub.Activity) (importOutcome, bool, error) {
	st := im.st
	switch act.Type {
	case "Accept", "Reject":
		followID := act.ObjectID
		if act.Object != nil && act.Object.Type != "" && act.Object.Type != "Follow" {
			return importOutcome{}, false, nil
		}
		matched, err := st.AnswerRelayTx(ctx, tx, followID, act.Actor, act.Type == "Accept")
		if err != nil || !matched {
			return importOutcome{}, matched, err
		}
		return outcomeOf(OutcomeAnswered), true, nil
	case "Follow":
		if act.ObjectID != st.URIs().InstanceActor() {
			return importOutcome{}, false, nil
		}
		ok, err := st.AcceptRelayFollowTx(ctx, tx, outbox.ChildID(eventID, "accept"), receivedAt, act.ID, act.Actor)
		if err != nil {
			return importOutcome{}, true, err
		}
		if !ok {
			return outcomeOf(OutcomeIgnored), true, nil // only relays courier subscribed to follow the instance actor
		}
		return outcomeOf(OutcomeFollowed), true, nil
	}
	return importOutcome{}, false, nil
}
