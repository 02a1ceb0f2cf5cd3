package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// HandlerPollUpdate is the ledger name of the handler of
// store.EventPollUpdate: a local poll's new counts federated as an Update.
const HandlerPollUpdate = "poll.update"

// isVote reports whether a Create is a vote on a local poll: a Note with a
// name (the option) replying to a local object, as Mastodon, Misskey,
// GoToSocial and Fedify send them.
func isVote(act *activitypub.Activity, inner *activitypub.Object, uris store.URIs) bool {
	return act.Type == "Create" && inner.Type == "Note" && inner.Name != "" && inner.InReplyTo != "" &&
		uris.IsLocal(inner.InReplyTo)
}

// vote counts a vote on a local poll; one that cannot count (an unknown
// option, a second vote, a closed poll) is not stored as a note either: it
// is nothing but a vote. ok is false when the Note replies to what is not
// a local poll: it is a reply, imported as any other.
func (im *Importer) vote(ctx context.Context, tx *sql.Tx, act *activitypub.Activity, inner *activitypub.Object) (outcome importOutcome, ok bool, err error) {
	voter := act.Actor
	if len(inner.AttributedTo) > 0 && inner.AttributedTo[0] != voter {
		return outcomeOf(OutcomeIgnored), true, nil
	}
	counted, err := im.st.VoteTx(ctx, tx, store.Vote{
		Question: inner.InReplyTo, Voter: voter, Option: inner.Name, ActivityURI: act.ID,
	})
	if errors.Is(err, store.ErrNotPoll) {
		return importOutcome{}, false, nil
	}
	if err != nil {
		outcome, err = refusal(err, importOutcome{})
		return outcome, true, err
	}
	if !counted {
		return outcomeOf(OutcomeNoMatch), true, nil
	}
	return outcomeOf(OutcomeVoted), true, nil
}

// pollUpdate federates a poll's counts (store.PublishPollCounts).
func (im *Importer) pollUpdate(ctx context.Context, ev outbox.Event) error {
	var p store.PollUpdate
	if err := json.Unmarshal(ev.Payload, &p); err != nil || p.Question == "" {
		return outbox.Permanent(fmt.Errorf("inbox: poll update %s: bad payload: %v", ev.ID, err))
	}
	return im.st.PublishPollCounts(ctx, ev.ID, p.Question)
}
