package inbox_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// TestGoneActorDeleteRemovesAll: an actor courier holds content of (a
// follower row, a note, a like of a local note, its cached document)
// deletes itself after its documents answer 410, with courier's copy of
// its key stale. The Delete is verified with the cached key, answered 202,
// and removes all of it; its redeliveries cost no further key fetch.
func TestGoneActorDeleteRemovesAll(t *testing.T) {
	t.Parallel()
	b := setup(t, options{keyTTL: -1, actorTTL: time.Nanosecond})
	b.remote.add("bob", key(t, keyRemote))
	alice := b.localActor(t, "alice", false)
	_, mine, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "mine", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}
	bob := b.remote.actor("bob")
	b.follow(t, alice, bob) // so that bob's note concerns someone here
	bobNote := b.remote.url("/notes/1")
	b.mustPost(t, b.as(t, "bob"), activity(b.id("follow"), "Follow", bob, alice.URI))
	b.mustPost(t, b.as(t, "bob"), activity(b.id("create"), "Create", bob, note(bobNote, bob, nil)))
	b.mustPost(t, b.as(t, "bob"), activity(b.id("like"), "Like", bob, mine.URI))
	b.drain(t)
	if likes, _, _ := b.st.ReactionCounts(b.ctx, mine.URI); likes != 1 {
		t.Fatalf("%d likes before", likes)
	}
	b.remote.setGone("bob")
	before := b.remote.fetchCount("bob")

	delID := b.id("delete")
	for range 3 { // the first, then two redeliveries
		if status := b.post(t, b.as(t, "bob"), activity(delID, "Delete", bob, bob)); status != http.StatusAccepted {
			t.Fatalf("Delete: %d", status)
		}
	}
	b.drain(t)
	if got := b.outcome(t, delID); got != inbox.OutcomeActorGone {
		t.Fatalf("outcome %q", got)
	}
	if ok, _ := b.st.IsFollower(b.ctx, alice.ID, bob); ok {
		t.Fatal("still a follower")
	}
	if o, err := b.st.ObjectByURI(b.ctx, bobNote); err != nil || !o.Deleted() {
		t.Fatalf("bob's note: %+v %v", o, err)
	}
	if likes, _, _ := b.st.ReactionCounts(b.ctx, mine.URI); likes != 0 {
		t.Fatalf("%d likes after", likes)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM remote_actors WHERE uri = ? AND gone_at IS NOT NULL`, bob); n != 1 {
		t.Fatalf("bob not marked gone")
	}
	if n := b.remote.fetchCount("bob") - before; n != 1 {
		t.Fatalf("%d key fetches for three Deletes, want 1", n)
	}
}

// TestUnknownGoneActorDeleteFetchesOnce: the Deletes of a gone actor
// courier never knew are answered 202 and dropped, one key fetch for all.
func TestUnknownGoneActorDeleteFetchesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, options{keyTTL: -1})
	b.localActor(t, "alice", false)
	b.remote.add("ghost", key(t, keyRemote))
	b.remote.setGone("ghost")
	ghost := b.remote.actor("ghost")
	for i := range 5 {
		if status := b.post(t, b.as(t, "ghost"), activity(b.id("delete"), "Delete", ghost, ghost)); status != http.StatusAccepted {
			t.Fatalf("Delete %d: %d", i, status)
		}
	}
	if got := b.result(t, "dropped_unverifiable_delete"); got != 5 {
		t.Fatalf("dropped deletes: %d", got)
	}
	if n := b.remote.fetchCount("ghost"); n != 1 {
		t.Fatalf("%d key fetches for five Deletes, want 1", n)
	}
}
