package activitypub

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// EventOutgoing is the outbox event type of an activity to deliver: its
// payload is an Outgoing. Producers (client-to-server writes, the inbox's
// Accept/Reject) enqueue it in the transaction of the write; the delivery
// worker fans it out to the inboxes of its audience.
const EventOutgoing = "activity.outgoing"

// Outgoing is the payload of an EventOutgoing event.
type Outgoing struct {
	// Actor is the local actor's id (URL); its key signs the deliveries.
	Actor string `json:"actor"`
	// Activity is the complete activity exactly as it will be POSTed
	// (built by NewActivity, so a rebuilt one is byte-for-byte the same).
	Activity json.RawMessage `json:"activity"`
}

// EventForward is the outbox event type of an inbound activity to forward
// (ActivityPub 7.1.2): its payload is a Forward. The inbox's import
// enqueues it in the import's transaction, its id derived from the
// activity's inbound event; the delivery worker turns it into one delivery
// per inbox of the followers named, each POSTing the activity's bytes
// exactly as received.
const EventForward = "activity.forward"

// Forward is the payload of an EventForward event.
type Forward struct {
	// ActivityID is the forwarded activity's id; its bytes are kept under
	// it (store.RecordForwardTx).
	ActivityID string `json:"activity_id"`
	// Actors are the local actors whose followers get the activity, each
	// follower's POST signed by the actor it follows.
	Actors []string `json:"actors"`
	// Exclude are URLs whose hosts are never POSTed to: the activity's
	// actor (its origin) and the key of its sender.
	Exclude []string `json:"exclude,omitempty"`
}

// ErrBuild is returned (wrapped) when NewActivity's inputs are unusable.
var ErrBuild = errors.New("activitypub: build activity")

// activityDoc fixes the property order of built activities.
type activityDoc struct {
	Context any    `json:"@context"`
	ID      string `json:"id"`
	Type    string `json:"type"`
	Actor   string `json:"actor"`
	Object  any    `json:"object"`
	Target  string `json:"target,omitempty"`
	// Instrument and Result are a QuoteRequest's quote and an Accept's
	// QuoteAuthorization (FEP-044f); left out when nil.
	Instrument any      `json:"instrument,omitempty"`
	Result     any      `json:"result,omitempty"`
	To         []string `json:"to,omitempty"`
	Cc         []string `json:"cc,omitempty"`
	Published  string   `json:"published"`
}

// NewActivity builds an activity deterministically: its id is
// ActivityID(baseURL, eventID, typ), published is the given time in RFC 3339
// UTC to the second, and the JSON is canonical (fixed property order, map
// keys sorted, compact, HTML characters escaped as encoding/json does), so
// identical inputs give identical bytes, and the bytes survive being put in
// an Outgoing payload by json.Marshal unchanged. object is an id string, a json.RawMessage, or any
// value encoding/json can marshal (an embedded object). It returns the
// bytes and the id.
func NewActivity(baseURL, eventID, typ, actor string, object any, to, cc []string, published time.Time) ([]byte, string, error) {
	return NewActivityContext(nil, baseURL, eventID, typ, actor, object, "", to, cc, published)
}

// NewTargetedActivity is NewActivity with a "target" (the collection of an
// Add or Remove, a Move's new account); an empty target is left out, as
// NewActivity does.
func NewTargetedActivity(baseURL, eventID, typ, actor string, object any, target string, to, cc []string, published time.Time) ([]byte, string, error) {
	return NewActivityContext(nil, baseURL, eventID, typ, actor, object, target, to, cc, published)
}

// NewActivityContext is NewTargetedActivity with the JSON-LD @context
// context (nil: ActivityStreams alone), for an activity whose embedded
// object uses terms beyond ActivityStreams (courier's, or a client's own
// vocabulary).
func NewActivityContext(context any, baseURL, eventID, typ, actor string, object any, target string, to, cc []string, published time.Time) ([]byte, string, error) {
	return NewActivityExtra(context, baseURL, eventID, typ, actor, object, target, Extra{}, to, cc, published)
}

// Extra are the properties of an activity beyond its object and target:
// the instrument of a QuoteRequest (the quote, embedded) and the result of
// an Accept of one (the QuoteAuthorization's id). Nil ones are left out.
type Extra struct {
	Instrument any
	Result     any
}

// NewActivityExtra is NewActivityContext with the properties extra.
func NewActivityExtra(context any, baseURL, eventID, typ, actor string, object any, target string, extra Extra, to, cc []string, published time.Time) ([]byte, string, error) {
	if context == nil {
		context = ActivityStreams
	}
	switch {
	case baseURL == "" || eventID == "" || typ == "" || actor == "":
		return nil, "", fmt.Errorf("%w: baseURL, eventID, type and actor are required", ErrBuild)
	case object == nil:
		return nil, "", fmt.Errorf("%w: nil object", ErrBuild)
	case published.IsZero():
		return nil, "", fmt.Errorf("%w: zero published time", ErrBuild)
	}
	// json.Marshal validates and compacts a json.RawMessage object, but
	// writes a nil one as null.
	if raw, ok := object.(json.RawMessage); ok && raw == nil {
		return nil, "", fmt.Errorf("%w: object is not valid JSON", ErrBuild)
	}
	id := ActivityID(baseURL, eventID, typ)
	doc := activityDoc{
		Context:    context,
		ID:         id,
		Type:       typ,
		Actor:      actor,
		Object:     object,
		Target:     target,
		Instrument: extra.Instrument,
		Result:     extra.Result,
		To:         to,
		Cc:         cc,
		Published:  published.UTC().Truncate(time.Second).Format(time.RFC3339),
	}
	b, err := marshalCanonical(doc)
	if err != nil {
		return nil, "", err
	}
	return b, id, nil
}
