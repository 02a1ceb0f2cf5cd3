package store

import (
	"encoding/json"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// outgoingEventType is the outbox event type of an activity to deliver.
const outgoingEventType = activitypub.EventOutgoing

// buildActivity builds the activity's canonical bytes and returns them with
// its id (activitypub.NewActivity: the id derives from the event id, so a
// rebuild is byte-for-byte equal).
func buildActivity(base, eventID, typ, actor string, object any, to, cc []string, at time.Time) (json.RawMessage, string, error) {
	return activitypub.NewActivity(base, eventID, typ, actor, object, to, cc, at)
}

// outgoingPayload is the event payload the delivery worker delivers from.
func outgoingPayload(actor string, activity json.RawMessage) (json.RawMessage, error) {
	return marshalJSON(activitypub.Outgoing{Actor: actor, Activity: activity})
}

func activityID(base, eventID, typ string) string { return activitypub.ActivityID(base, eventID, typ) }

func objectID(base, eventID string) string { return activitypub.ObjectID(base, eventID) }

func objectUUID(eventID string) string { return activitypub.ObjectUUID(eventID) }
