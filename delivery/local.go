package delivery

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// Local recipients. An activity addressed to a local actor (by name, or
// through a followers collection that holds one) is not POSTed to courier
// itself: the fan-out records it as the inbox records a verified inbound
// activity (a row of inbox_activities) and enqueues the inbox's import
// event, in the fan-out's transaction. The inbox's importer then imports
// it as it would a remote actor's (a Follow makes a follower and its
// Accept, or a pending request; an Accept marks the follow accepted; ...).
// The event's id is the inbox's, derived from the activity id, so a
// fan-out run again, or the same activity reaching the inbox by HTTP,
// records and imports it once.
//
// The kind and id of the event are the inbox's (inbox.EventReceived,
// inbox.EventID; this package does not import inbox, and a test holds
// them equal).
const eventReceived = "inbox.received"

// receivedSpace is the UUID namespace of the inbox's event ids.
var receivedSpace = uuid.MustParse("9a4f0c6e-2b7d-5e31-8c45-71d2e8b3f0a6")

// ReceivedEventID is the id of the inbox's import event of the activity
// activityID: inbox.EventID.
func ReceivedEventID(activityID string) string {
	return uuid.NewSHA1(receivedSpace, []byte(activityID)).String()
}

// localAudience is what the fan-out found of local recipients.
type localAudience struct {
	// names are the local actors named or behind a followers collection,
	// other than the activity's actor.
	names map[string]bool
}

func (l *localAudience) add(name string) {
	if l.names == nil {
		l.names = map[string]bool{}
	}
	l.names[name] = true
}

// inbox is the inbox_activities.inbox of the record: the one local
// recipient's name, or "" (the shared inbox) for several.
func (l *localAudience) inbox() string {
	if len(l.names) != 1 {
		return ""
	}
	for n := range l.names {
		return n
	}
	return ""
}

const sqlRecordLocal = `INSERT INTO inbox_activities
	(activity_id, type, actor, object_id, inbox, key_id, event_id, document, received_at)
	VALUES (?, ?, ?, ?, ?, '', ?, ?, ?)
	ON CONFLICT (activity_id) DO NOTHING`

// recordLocalTx records act (its bytes doc) for the inbox's import and
// enqueues the import event, in tx, unless it is recorded already.
func recordLocalTx(ctx context.Context, tx *sql.Tx, act *activitypub.Activity, doc []byte, l localAudience, at time.Time) error {
	evID := ReceivedEventID(act.ID)
	var object any
	if act.ObjectID != "" {
		object = act.ObjectID
	}
	res, err := tx.ExecContext(ctx, sqlRecordLocal, act.ID, act.Type, act.Actor, object, l.inbox(), evID, string(doc), at.UnixMilli())
	if err != nil {
		return fmt.Errorf("record for local recipients: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err // recorded before: its event was enqueued then
	}
	payload, err := json.Marshal(struct {
		ActivityID string `json:"activity_id"`
	}{act.ID})
	if err != nil {
		return err
	}
	return outbox.Enqueue(ctx, tx, outbox.Event{ID: evID, Type: eventReceived, Payload: payload, OccurredAt: at,
		Lane: outbox.LaneInteractive})
}

// localName returns the name of the local actor whose id or inbox is uri
// ({base}/users/NAME or {base}/users/NAME/inbox), or "".
func (s *Service) localName(uri string) string {
	if name, ok := s.uris.ActorName(uri); ok {
		return name
	}
	if rest, ok := strings.CutSuffix(uri, "/inbox"); ok {
		if name, ok := s.uris.ActorName(rest); ok {
			return name
		}
	}
	return ""
}

// namedLocal adds the local actor r to the local recipients when it is
// one (not deleted); another local id (a collection, an object) is no
// recipient.
func (s *Service) namedLocal(ctx context.Context, r string, addLocal func(string)) error {
	if _, ok := s.uris.ActorName(r); !ok {
		return nil
	}
	_, err := s.store.ActorByName(ctx, s.localName(r))
	switch {
	case err == nil:
		addLocal(r)
	case !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("delivery: local recipient %s: %w", r, err)
	}
	return nil
}
