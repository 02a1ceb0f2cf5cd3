package inbox_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/metrics"
)

// TestKeyRotation: the remote changes its key; the first request signed
// with the new key fails against the cached one, the key is refetched once
// and the request accepted. A bad signature right after does not make
// courier refetch again.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	bob := b.remote.actor("bob")
	like := func() map[string]any { return activity(b.id("like"), "Like", bob, b.base+"/objects/x") }

	b.mustPost(t, b.as(t, "bob"), like())
	b.mustPost(t, b.as(t, "bob"), like())
	if n := b.remote.fetchCount("bob"); n != 1 {
		t.Fatalf("%d fetches of bob with a warm cache, want 1", n)
	}

	b.remote.add("bob", key(t, keyRotated))
	b.mustPost(t, b.as(t, "bob"), like())
	if n := b.remote.fetchCount("bob"); n != 2 {
		t.Fatalf("%d fetches after the rotation, want 2 (one refetch)", n)
	}
	b.mustPost(t, b.as(t, "bob"), like()) // the new key is now cached
	if status := b.post(t, signer{keyID: b.remote.keyID("bob"), key: key(t, keyStranger)}, like()); status != http.StatusUnauthorized {
		t.Fatalf("a bad signature: %d", status)
	}
	// The old key no longer verifies either.
	if status := b.post(t, signer{keyID: b.remote.keyID("bob"), key: key(t, keyRemote)}, like()); status != http.StatusUnauthorized {
		t.Fatalf("the rotated-out key: %d", status)
	}
	if n := b.remote.fetchCount("bob"); n != 2 {
		t.Fatalf("%d fetches, want 2: failed signatures must not refetch within the resolver's MinRefresh", n)
	}
	if got := b.result(t, metrics.InboxAccepted); got != 4 {
		t.Fatalf("%d accepted, want 4", got)
	}
}

// TestDeleteOfGoneActor: an actor whose documents answer 410 deletes
// itself. Courier cached its key, so the Delete is verified with it and
// imported. A gone actor courier never knew is answered 202 and dropped.
func TestDeleteOfGoneActor(t *testing.T) {
	t.Parallel()
	// Keys are never reused from memory and the actor cache is always
	// stale, so every request goes to the remote.
	b := setup(t, options{keyTTL: -1, actorTTL: time.Nanosecond})
	b.remote.add("bob", key(t, keyRemote))
	alice := b.localActor(t, "alice", false)
	bob := b.remote.actor("bob")
	b.mustPost(t, b.as(t, "bob"), activity(b.id("follow"), "Follow", bob, alice.URI))
	b.drain(t)
	if ok, _ := b.st.IsFollower(b.ctx, alice.ID, bob); !ok {
		t.Fatal("bob does not follow alice")
	}
	b.remote.setGone("bob")

	// A forged Delete of bob fails against his cached key.
	forged := signer{keyID: b.remote.keyID("bob"), key: key(t, keyStranger)}
	if status := b.post(t, forged, activity(b.id("delete"), "Delete", bob, bob)); status != http.StatusUnauthorized {
		t.Fatalf("a forged Delete: %d", status)
	}
	// Other activities of a gone actor are refused.
	if status := b.post(t, b.as(t, "bob"), activity(b.id("like"), "Like", bob, alice.URI)); status != http.StatusUnauthorized {
		t.Fatalf("a Like of a gone actor: %d", status)
	}
	delID := b.id("delete")
	b.mustPost(t, b.as(t, "bob"), activity(delID, "Delete", bob, bob))
	b.drain(t)
	if got := b.outcome(t, delID); got != inbox.OutcomeActorGone {
		t.Fatalf("outcome %q", got)
	}
	if ok, _ := b.st.IsFollower(b.ctx, alice.ID, bob); ok {
		t.Fatal("the deleted actor still follows alice")
	}

	b.remote.add("ghost", key(t, keyRemote))
	b.remote.setGone("ghost")
	ghost := b.remote.actor("ghost")
	if status := b.post(t, b.as(t, "ghost"), activity(b.id("delete"), "Delete", ghost, ghost)); status != http.StatusAccepted {
		t.Fatalf("the Delete of an unknown gone actor: %d", status)
	}
	if got := b.result(t, "dropped_unverifiable_delete"); got != 1 {
		t.Fatalf("dropped deletes: %d", got)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM inbox_activities WHERE actor = ?`, ghost); n != 0 {
		t.Fatalf("the dropped Delete was recorded")
	}
}
