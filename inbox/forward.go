package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// Inbox forwarding (ActivityPub 7.1.2, and Mastodon's practice for public
// replies). An inbound Create or Update that the import stored, seen for
// the first time (the import runs once per activity), is forwarded to the
// followers of the local actors it concerns (and the Delete of such an
// object, decided on the object as stored, so that no forwarded copy
// outlives it; the forwards of one object are delivered in order):
//
//   - a local actor whose followers collection it is addressed to (to, cc,
//     audience, of the activity or its object), when its object's
//     inReplyTo, its target or a tag reaches something of courier's,
//     following inReplyTo through the objects held here at most
//     maxForwardDepth steps;
//   - the author of the local object it replies to, when it is public or
//     unlisted (the public address in to or cc).
//
// Its receivers must be able to verify it without its sender, whose HTTP
// signature they do not get: it is forwarded only when it carries an
// FEP-8b32 eddsa-jcs-2022 proof by a key of its actor's host (every such
// proof was verified on the way in) or an LD signature (RsaSignature2017);
// otherwise it is counted unverifiable and not forwarded. Its bytes exactly
// as received are kept (store.RecordForwardTx) and an
// activitypub.EventForward event enqueued, both in the import's
// transaction, the event's id derived from the inbound event's (so from
// the activity id): the delivery worker turns it into one delivery.post per
// inbox, never to the activity's origin nor to its sender.

// maxForwardDepth bounds the inReplyTo chain followed through held objects
// to find something of courier's.
const maxForwardDepth = 4

// ForwardEventID returns the id of the EventForward event of the activity
// whose inbound event is eventID.
func ForwardEventID(eventID string) string { return outbox.ChildID(eventID, "forward") }

// forwardTx enqueues, in tx, the forward of act (received from the signer
// of keyID, its bytes document) when it is due; see above.
func (im *Importer) forwardTx(ctx context.Context, tx *sql.Tx, eventID, keyID string, act *activitypub.Activity, document []byte, outcome importOutcome) error {
	decide := act
	switch {
	case outcome.kind == OutcomeStored && (act.Type == "Create" || act.Type == "Update") && act.Object != nil:
	case outcome.kind == OutcomeDeleted && act.Type == "Delete":
		// A Delete goes where its object's Create went: decided on the
		// object as stored (a tombstone keeps its addressing and
		// inReplyTo), so that no forwarded copy outlives it.
		o, err := im.st.ObjectByURITx(ctx, tx, act.ObjectID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		decide = &activitypub.Activity{Type: "Create", Actor: act.Actor, To: o.To, Cc: o.CC,
			Object: &activitypub.Object{ID: o.URI, InReplyTo: o.InReplyTo, To: o.To, Cc: o.CC}}
	default:
		return nil
	}
	actors, err := im.forwardActors(ctx, tx, decide)
	if err != nil || len(actors) == 0 {
		return err
	}
	if !verifiableAlone(act) {
		im.cfg.Metrics.Forward(metrics.InboxUnverifiable)
		im.log.DebugContext(ctx, "inbox: not forwarded: neither an integrity proof nor an LD signature",
			"activity_id", act.ID)
		return nil
	}
	payload, err := json.Marshal(activitypub.Forward{ActivityID: act.ID, Actors: actors, Exclude: []string{act.Actor, keyID}})
	if err != nil {
		return fmt.Errorf("inbox: forward %s: %w", act.ID, err)
	}
	now := im.cfg.Now().UTC()
	if err := im.st.RecordForwardTx(ctx, tx, act.ID, document, now); err != nil {
		return err
	}
	key, _ := activitypub.OrderKey(act) // forwards of one object are ordered (delivery's eventGate)
	if err := outbox.Enqueue(ctx, tx, outbox.Event{
		ID: ForwardEventID(eventID), Type: activitypub.EventForward, Payload: payload, OccurredAt: now, OrderKey: key,
	}); err != nil {
		return err
	}
	im.cfg.Metrics.Forward(metrics.InboxForwarded)
	return nil
}

// forwardActors returns the local actors whose followers act is due to
// reach, in a stable order.
func (im *Importer) forwardActors(ctx context.Context, tx *sql.Tx, act *activitypub.Activity) ([]string, error) {
	st, u := im.st, im.st.URIs()
	o := act.Object
	var out []string
	add := func(actor string) {
		if !slices.Contains(out, actor) {
			out = append(out, actor)
		}
	}
	// A local followers collection among the addressees, when the
	// activity reaches something of courier's.
	var owners []string
	for _, list := range [][]string{act.To, act.Cc, act.Audience, o.To, o.Cc, o.Audience} {
		for _, r := range list {
			if base, ok := strings.CutSuffix(r, "/followers"); ok {
				if _, ok := u.ActorName(base); ok && !slices.Contains(owners, base) {
					owners = append(owners, base)
				}
			}
		}
	}
	if len(owners) > 0 {
		reaches, err := im.reachesLocal(ctx, tx, act)
		if err != nil {
			return nil, err
		}
		for _, a := range owners {
			if !reaches {
				break
			}
			if _, err := st.ActorByURITx(ctx, tx, a); err == nil {
				add(a)
			} else if !errors.Is(err, store.ErrNotFound) {
				return nil, err
			}
		}
	}
	// A public or unlisted reply to a local object: its author's
	// followers.
	if o.InReplyTo != "" && u.IsLocal(o.InReplyTo) && isPublic(act) {
		parent, err := st.ObjectByURITx(ctx, tx, o.InReplyTo)
		switch {
		case err == nil:
			if parent.Local() && !parent.Deleted() && parent.AttributedTo != "" {
				add(parent.AttributedTo)
			}
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
	}
	return out, nil
}

// reachesLocal reports whether act's target, its object's tags or its
// object's inReplyTo chain (through objects held here, at most
// maxForwardDepth steps) reach something of courier's.
func (im *Importer) reachesLocal(ctx context.Context, tx *sql.Tx, act *activitypub.Activity) (bool, error) {
	local := im.st.URIs().IsLocal
	if local(act.Target) {
		return true, nil
	}
	for _, t := range act.Object.Tag {
		if local(t.Href) {
			return true, nil
		}
	}
	next := act.Object.InReplyTo
	for range maxForwardDepth {
		if next == "" {
			return false, nil
		}
		if local(next) {
			return true, nil
		}
		o, err := im.st.ObjectByURITx(ctx, tx, next)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		next = o.InReplyTo
	}
	return false, nil
}

// isPublic reports whether the activity or its object is addressed to the
// public (public or unlisted).
func isPublic(act *activitypub.Activity) bool {
	lists := [][]string{act.To, act.Cc}
	if act.Object != nil {
		lists = append(lists, act.Object.To, act.Object.Cc)
	}
	for _, l := range lists {
		if slices.ContainsFunc(l, activitypub.IsPublic) {
			return true
		}
	}
	return false
}

// verifiableAlone reports whether act's receivers can verify it without
// its sender's HTTP signature: it carries an eddsa-jcs-2022 proof made
// with a key of its actor's host (verified on the way in), or an LD
// signature of type RsaSignature2017.
func verifiableAlone(act *activitypub.Activity) bool {
	if proofs, err := activitypub.ParseProofs(act.Proof); err == nil {
		own := authorityOf(act.Actor)
		for _, p := range proofs {
			if p.EdDSAJCS() && own != "" && authorityOf(p.VerificationMethod) == own {
				return true
			}
		}
	}
	if act.Signature != nil {
		var sig struct {
			Type           string `json:"type"`
			SignatureValue string `json:"signatureValue"`
		}
		if json.Unmarshal(act.Signature, &sig) == nil && sig.Type == "RsaSignature2017" && sig.SignatureValue != "" {
			return true
		}
	}
	return false
}

// authorityOf returns the lower-cased host, with its port, of an absolute
// URL ("" when it has none), as deliveries key hosts.
func authorityOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}
