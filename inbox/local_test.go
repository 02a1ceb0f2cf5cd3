package inbox_test

import (
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
)

// TestLocalRecordTx: a local actor's activity recorded for a local inbox
// in the caller's transaction is recorded once, under the inbox's event
// id, however often it is recorded again (a fan-out run again), and
// imported once.
func TestLocalRecordTx(t *testing.T) {
	t.Parallel()
	b := setup(t, options{noWorker: true})
	alice, bob := b.localActor(t, "alice", false), b.localActor(t, "bob", false)
	id := alice.URI + "/follows/1"
	doc := mustJSON(t, map[string]any{"@context": "https://www.w3.org/ns/activitystreams", "id": id, "type": "Follow",
		"actor": alice.URI, "object": bob.URI})
	act, err := activitypub.ParseActivity(doc)
	if err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(1_700_000_000_000).UTC()
	for range 2 {
		if err := b.st.Tx(b.ctx, func(tx *sql.Tx) error {
			return inbox.Local{}.RecordTx(b.ctx, tx, act, doc, "bob", at)
		}); err != nil {
			t.Fatal(err)
		}
	}
	var box, keyID, evID, stored string
	var object sql.NullString
	var received int64
	if err := b.db.Read.QueryRow(`SELECT inbox, key_id, event_id, document, object_id, received_at FROM inbox_activities
		WHERE activity_id = ?`, id).Scan(&box, &keyID, &evID, &stored, &object, &received); err != nil {
		t.Fatal(err)
	}
	if box != "bob" || keyID != "" || evID != inbox.EventID(id) || stored != string(doc) || object.String != bob.URI ||
		received != at.UnixMilli() {
		t.Fatalf("recorded inbox %q, key %q, event %s, object %v, received %d, document %s", box, keyID, evID, object,
			received, stored)
	}
	var typ, payload string
	if err := b.db.Read.QueryRow(`SELECT type, payload FROM event_queue WHERE event_id = ?`, evID).Scan(&typ, &payload); err != nil {
		t.Fatal(err)
	}
	var p inbox.Received
	if err := json.Unmarshal([]byte(payload), &p); typ != inbox.EventReceived || err != nil || p.ActivityID != id {
		t.Fatalf("event %s %s (%v)", typ, payload, err)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ?`, inbox.EventReceived); n != 1 {
		t.Fatalf("%d import events, want 1", n)
	}
	b.runWorker(t)
	deadline := time.Now().Add(20 * time.Second)
	for b.outcome(t, id) == "" {
		if time.Now().After(deadline) {
			t.Fatal("the Follow was not imported")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := b.outcome(t, id); got != inbox.OutcomeFollowed {
		t.Fatalf("imported as %q, want %q", got, inbox.OutcomeFollowed)
	}
	if ok, err := b.st.IsFollower(b.ctx, bob.ID, alice.URI); err != nil || !ok {
		t.Fatalf("alice is not bob's follower: %v", err)
	}
}
