package activitypub

import (
	"strings"

	"github.com/google/uuid"
)

// IDNamespace is the UUID namespace of courier's name-based (v5) activity and
// object ids. It never changes: changing it would change every id courier
// has ever published.
var IDNamespace = uuid.MustParse("3b8f1d2e-7c4a-5e19-8a6d-0f2b9c41e7d3")

// ActivityID returns the deterministic id of the activity of type
// activityType that the event eventID causes:
// {baseURL}/activities/{uuidv5(IDNamespace, eventID + "/" + activityType)}.
// Rebuilding the activity after a crash yields the same id.
func ActivityID(baseURL, eventID, activityType string) string {
	return strings.TrimRight(baseURL, "/") + "/activities/" + ActivityUUID(eventID, activityType)
}

// ActivityUUID returns the UUID part of ActivityID, the key courier stores
// and serves /activities/{id} by.
func ActivityUUID(eventID, activityType string) string {
	return uuid.NewSHA1(IDNamespace, []byte(eventID+"/"+activityType)).String()
}

// ObjectID returns the deterministic id of the object the event eventID
// creates: {baseURL}/objects/{uuidv5(IDNamespace, eventID + "/object")}.
func ObjectID(baseURL, eventID string) string {
	return strings.TrimRight(baseURL, "/") + "/objects/" + ObjectUUID(eventID)
}

// ObjectUUID returns the UUID part of ObjectID.
func ObjectUUID(eventID string) string {
	return uuid.NewSHA1(IDNamespace, []byte(eventID+"/object")).String()
}

// KeyID returns the key id of a local actor's key: {actorID}#main-key.
func KeyID(actorID string) string {
	return actorID + "#main-key"
}
