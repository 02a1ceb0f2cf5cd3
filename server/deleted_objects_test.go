package server

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// allDelivered answers that every Delete is past delivery.
type allDelivered struct{}

func (allDelivered) DeliveryFinished(context.Context, string, string) (bool, error) { return true, nil }

// TestDeletedActorObjectsAnswerGone: once an actor is deleted, each of its
// notes (and the Create that carried it) answers 410 Gone with a
// Tombstone naming its former type and the deletion time, in JSON and in
// HTML; still so after the actor's row is removed.
func TestDeletedActorObjectsAnswerGone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.note(t, "alice", b.token, "soon gone")
	wantStatus(t, b.get(t, id), http.StatusOK)
	create := b.count(t, `SELECT COUNT(*) FROM activities WHERE object_uri = ? AND type = 'Create'`, id)
	if create != 1 {
		t.Fatalf("%d Creates of the note", create)
	}
	var createURI string
	if err := b.db.Read.QueryRowContext(b.ctx, `SELECT uri FROM activities WHERE object_uri = ? AND type = 'Create'`, id).Scan(&createURI); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Minute)
	if _, err := b.st.DeleteActor(b.ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	for _, when := range []string{"pending", "removed"} {
		if when == "removed" {
			if n, err := b.st.ReapDeletedActors(b.ctx, allDelivered{}); err != nil || n != 1 {
				t.Fatalf("reaped %d, %v", n, err)
			}
			if n := b.count(t, `SELECT COUNT(*) FROM actors WHERE name = 'alice'`); n != 0 {
				t.Fatalf("%d rows of alice after removal", n)
			}
		}
		r := b.get(t, id)
		wantStatus(t, r, http.StatusGone)
		doc := r.json(t)
		if doc["id"] != id || doc["type"] != "Tombstone" || doc["formerType"] != "Note" ||
			doc["deleted"] != "2026-11-30T12:01:00Z" || doc["content"] != nil {
			t.Fatalf("%s: %s", when, r.Body)
		}
		wantStatus(t, b.do(t, http.MethodGet, id, nil, "Accept", "text/html"), http.StatusGone)
		if when == "pending" {
			wantStatus(t, b.get(t, createURI), http.StatusGone)
		}
	}
}
