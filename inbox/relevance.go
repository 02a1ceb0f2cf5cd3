package inbox

import (
	"context"
	"fmt"

	"github.com/courier-ap/courier/activitypub"
)

// resultIgnored: a verified activity that concerns no one here, answered
// 202 and not stored (label result of courier_inbox_requests_total).
const resultIgnored = "ignored"

// concerns reports whether the verified activity act concerns someone
// here, the rule under which an inbound activity is stored (Mastodon's):
//
//   - a local actor follows its sender, or it is a relay subscribed to;
//   - it is addressed to (to, cc, bto, bcc, audience) or mentions a local
//     actor or collection, its object or its object's object is local, or
//     it replies to a local object: a local actor owns what it acts on;
//   - a Follow of a local actor (its object is local), a Delete or Update
//     of something held (an object, or the actor itself when it follows,
//     is followed, or wrote objects held here), an Undo of an activity held
//     (a reaction, a follow, a block) are always relevant, and so is a
//     Delete of any object, held or not: it leaves a remote tombstone so
//     that a Create or Update of the object arriving after it is not
//     stored (tombstone.go).
//
// Anything else (a public post of an actor no one here follows, sent to
// the shared inbox, say) is answered 202 and counted, and stores nothing.
func (h *Handler) concerns(ctx context.Context, act *activitypub.Activity) (bool, error) {
	if h.mentionsLocal(act) {
		return true, nil
	}
	st := h.st
	switch act.Type {
	case "Delete", "Update":
		if act.Type == "Delete" && act.ObjectID != "" && act.ObjectID != act.Actor {
			return true, nil // held or not, it leaves a tombstone (tombstone.go)
		}
		if act.ObjectID != "" && act.ObjectID != act.Actor {
			held, err := st.HoldsObject(ctx, act.ObjectID)
			if err != nil || held {
				return held, wrapRelevance(err)
			}
		}
		held, err := st.HoldsRemoteActor(ctx, act.Actor)
		if err != nil || held {
			return held, wrapRelevance(err)
		}
	case "Undo":
		if act.ObjectID != "" {
			held, err := st.HoldsActivity(ctx, act.ObjectID, act.Actor)
			if err != nil || held {
				return held, wrapRelevance(err)
			}
		}
	}
	followed, err := st.SubscribedTo(ctx, act.Actor)
	return followed, wrapRelevance(err)
}

func wrapRelevance(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("inbox: relevance: %w", err)
}

// mentionsLocal reports whether act, or the object it embeds, names
// anything local: its object, target or reply target, an addressee, a
// mention.
func (h *Handler) mentionsLocal(act *activitypub.Activity) bool {
	local := h.st.URIs().IsLocal
	for _, id := range []string{act.ObjectID, act.Target, act.InReplyTo} {
		if local(id) {
			return true
		}
	}
	for _, list := range [][]string{act.To, act.Cc, act.Bto, act.Bcc, act.Audience} {
		for _, id := range list {
			if local(id) {
				return true
			}
		}
	}
	o := act.Object
	if o == nil {
		return false
	}
	for _, id := range []string{o.ObjectID, o.Actor, o.InReplyTo} {
		if local(id) {
			return true
		}
	}
	for _, list := range [][]string{o.To, o.Cc, o.Bto, o.Bcc, o.Audience} {
		for _, id := range list {
			if local(id) {
				return true
			}
		}
	}
	for _, t := range o.Tag {
		if local(t.Href) {
			return true
		}
	}
	if q, _ := quotedBy(o.Raw); local(q) { // a quote of a local object: quote.go
		return true
	}
	return false
}
