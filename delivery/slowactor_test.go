package delivery_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/outbox"
)

// A remote actor whose document fetch stops answering (it would answer
// after 25 s; here it answers when the test ends), hit by 300 signed
// Updates of itself, delays nothing else on a worker with eight handler
// slots: the first Update's refresh holds one handler, every other one
// finds that fetch in flight and imports without waiting on it, and
// meanwhile another remote's Follow is imported and its Accept delivered.
// Inbound activities are recorded as the inbox records verified ones (the
// row and its event), then imported by the real importer on the real
// worker.
func TestSlowActorFetchDelaysNothingElse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	im, err := inbox.NewImporter(inbox.Config{DB: b.db, Store: b.st, Resolver: b.cfg.Resolver.(inbox.Resolver)})
	if err != nil {
		t.Fatal(err)
	}
	im.Register(b.reg)
	alice := b.actor("alice")

	hold := make(chan struct{})
	var gets atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gets.Add(1) > 1 { // the first fetch is answered; every later one is held
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", activitypub.ContentType)
		_ = json.NewEncoder(w).Encode(personDoc("http://"+r.Host, "slowpoke"))
	}))
	t.Cleanup(slow.Close)
	slowActor := slow.URL + "/users/slowpoke"
	if _, err := b.cfg.Resolver.Actor(b.ctx, slowActor); err != nil { // known from before
		t.Fatal(err)
	}

	for i := range 300 {
		doc := map[string]any{
			"@context": activitypub.ActivityStreams, "id": fmt.Sprintf("%s/updates/%d", slowActor, i),
			"type": "Update", "actor": slowActor, "to": []string{activitypub.Public},
			"object": personDoc(slow.URL, "slowpoke"),
		}
		b.recordInbound(doc, slowActor)
	}
	fast := newRemote(t, b.keys, b.clock, false)
	follow := map[string]any{
		"@context": activitypub.ActivityStreams, "id": fast.actorURL("bob") + "/follows/1",
		"type": "Follow", "actor": fast.actorURL("bob"), "object": alice.URI,
	}
	b.recordInbound(follow, fast.actorURL("bob"))

	b.startWorker(8)
	waitFor(t, "the other remote's Follow accepted and the Accept delivered", func() bool {
		for _, r := range fast.received() {
			if r.Type == "Accept" {
				return true
			}
		}
		return false
	})
	imported := func() int {
		var n int
		if err := b.db.Read.QueryRowContext(b.ctx, `SELECT COUNT(*) FROM inbox_activities
			WHERE actor = ? AND imported_at IS NOT NULL`, slowActor).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Every Update but the one whose refresh is held.
	waitFor(t, "299 Updates imported while one refresh is held", func() bool { return imported() == 299 })
	if n := gets.Load(); n != 2 {
		t.Errorf("the slow host got %d fetches, want 2 (the first, then one refresh held)", n)
	}
	close(hold)
	waitFor(t, "the last Update imported once its refresh is answered", func() bool { return imported() == 300 })
}

// personDoc is an actor document served by a test remote at origin.
func personDoc(origin, name string) map[string]any {
	id := origin + "/users/" + name
	return map[string]any{
		"@context": activitypub.ActivityStreams, "id": id, "type": "Person",
		"preferredUsername": name, "inbox": id + "/inbox",
	}
}

// recordInbound stores doc as the inbox stores a verified activity: its
// row in inbox_activities and its inbox.received event, in one
// transaction.
func (b *bundle) recordInbound(doc map[string]any, actor string) {
	b.t.Helper()
	raw, err := json.Marshal(doc)
	if err != nil {
		b.t.Fatal(err)
	}
	id := doc["id"].(string)
	payload, _ := json.Marshal(inbox.Received{ActivityID: id})
	objectID := ""
	if o, ok := doc["object"].(string); ok {
		objectID = o
	} else if o, ok := doc["object"].(map[string]any); ok {
		objectID, _ = o["id"].(string)
	}
	now := b.clock.Now()
	err = b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(b.ctx, `INSERT INTO inbox_activities
			(activity_id, type, actor, object_id, inbox, key_id, event_id, document, received_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, id, doc["type"], actor, objectID, baseURL+"/inbox",
			actor+"#main-key", inbox.EventID(id), string(raw), now.UnixMilli()); err != nil {
			return err
		}
		return outbox.Enqueue(b.ctx, tx, outbox.Event{ID: inbox.EventID(id), Type: inbox.EventReceived,
			Payload: payload, OccurredAt: now})
	})
	if err != nil && !strings.Contains(err.Error(), "UNIQUE") {
		b.t.Fatal(err)
	}
}
