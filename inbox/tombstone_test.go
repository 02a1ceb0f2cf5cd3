package inbox_test

import (
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/store"
)

// deleteOf is a Delete of id by actor as Mastodon sends one: addressed to
// the public only, the object a Tombstone.
func deleteOf(actID, actor, id string) map[string]any {
	a := activity(actID, "Delete", actor, map[string]any{"id": id, "type": "Tombstone"})
	a["to"] = []string{activitypub.Public}
	return a
}

// TestDeleteThenCreateOfUnknownObject: a Delete of a remote note courier
// never stored, from an actor no one here follows, arrives before the note's
// Create (which mentions a local actor, so it concerns someone here): the
// Delete leaves a tombstone, and the Create, embedded or by reference, is
// acknowledged and not stored, its outcome "tombstoned", with no fetch.
func TestDeleteThenCreateOfUnknownObject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.localActor(t, "alice", false)
	o := newOrigin(t, "/users/bob")
	bob := o.srv.URL + "/users/bob"
	asBob := o.signer(t, "/users/bob")
	toAlice := func(a map[string]any) map[string]any { a["cc"] = []string{alice.URI}; return a }

	noteID, refID := o.srv.URL+"/notes/1", o.srv.URL+"/notes/2"
	o.serve("/notes/2", mustJSON(t, note(refID, bob, nil)))
	for _, id := range []string{noteID, refID} {
		del := o.id("delete")
		b.mustPost(t, asBob, deleteOf(del, bob, id))
		b.drain(t)
		if got := b.outcome(t, del); got != inbox.OutcomeDeleted {
			t.Fatalf("Delete of %s: outcome %q, want %q", id, got, inbox.OutcomeDeleted)
		}
	}
	embedded, byRef := o.id("create"), o.id("create")
	b.mustPost(t, asBob, toAlice(activity(embedded, "Create", bob, note(noteID, bob, map[string]any{"cc": []string{alice.URI}}))))
	b.mustPost(t, asBob, toAlice(activity(byRef, "Create", bob, refID)))
	b.drain(t)
	for id, obj := range map[string]string{embedded: noteID, byRef: refID} {
		if got := b.outcome(t, id); got != inbox.OutcomeTombstoned {
			t.Errorf("Create %s: outcome %q, want %q", id, got, inbox.OutcomeTombstoned)
		}
		if ob, err := b.st.ObjectByURI(b.ctx, obj); store.ErrorCode(err) != store.ENOTFOUND {
			t.Errorf("%s stored after its Delete: %+v, %v", obj, ob, err)
		}
	}
	if n := o.count("/notes/2"); n != 0 {
		t.Errorf("a tombstoned object was fetched %d times", n)
	}
	stats, err := b.st.RemoteTombstoneStats(b.ctx)
	if err != nil || stats.Held != 2 || stats.Refused != 2 {
		t.Fatalf("tombstone stats %+v, %v; want 2 held, 2 refused", stats, err)
	}
}

// TestDeleteThenUpdateOfUnknownObject: an Update arriving after the Delete
// of the object it updates, neither seen before, stores nothing and
// fetches nothing.
func TestDeleteThenUpdateOfUnknownObject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.localActor(t, "alice", false)
	o := newOrigin(t, "/users/bob")
	bob := o.srv.URL + "/users/bob"
	asBob := o.signer(t, "/users/bob")
	noteID := o.srv.URL + "/notes/1"
	o.serve("/notes/1", mustJSON(t, note(noteID, bob, map[string]any{"content": "served"})))

	b.mustPost(t, asBob, deleteOf(o.id("delete"), bob, noteID))
	b.drain(t)
	upd := o.id("update")
	a := activity(upd, "Update", bob, note(noteID, bob, map[string]any{"content": "edited", "updated": "2026-01-03T00:00:00Z"}))
	a["cc"] = []string{alice.URI}
	b.mustPost(t, asBob, a)
	b.drain(t)
	if got := b.outcome(t, upd); got != inbox.OutcomeTombstoned {
		t.Fatalf("Update: outcome %q, want %q", got, inbox.OutcomeTombstoned)
	}
	if ob, err := b.st.ObjectByURI(b.ctx, noteID); store.ErrorCode(err) != store.ENOTFOUND {
		t.Fatalf("stored after its Delete: %+v, %v", ob, err)
	}
	if n := o.count("/notes/1"); n != 0 {
		t.Fatalf("a tombstoned object was fetched %d times", n)
	}
}

// TestDeleteOfStoredObjectThenLateCreate: the Delete of a stored remote
// note leaves a remote tombstone too, and a Create of it redelivered late
// (another activity id) does not bring it back.
func TestDeleteOfStoredObjectThenLateCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.localActor(t, "alice", false)
	b.remote.add("bob", key(t, keyRemote))
	bob, asBob := b.remote.actor("bob"), b.as(t, "bob")
	b.follow(t, alice, bob)
	noteID := b.remote.url("/notes/1")
	b.mustPost(t, asBob, activity(b.id("create"), "Create", bob, note(noteID, bob, nil)))
	b.drain(t)
	b.mustPost(t, asBob, deleteOf(b.id("delete"), bob, noteID))
	b.drain(t)
	late := b.id("create")
	b.mustPost(t, asBob, activity(late, "Create", bob, note(noteID, bob, map[string]any{"content": "again"})))
	b.drain(t)
	if got := b.outcome(t, late); got != inbox.OutcomeTombstoned {
		t.Fatalf("late Create: outcome %q, want %q", got, inbox.OutcomeTombstoned)
	}
	if ob, err := b.st.ObjectByURI(b.ctx, noteID); err != nil || !ob.Deleted() {
		t.Fatalf("after the late Create: %+v, %v", ob, err)
	}
}

// TestUpdateOfUnknownObjectFetched: an Update of a note courier never saw
// (its Create is late) stores the note as its origin serves it, fetched
// with a signed GET, not the Update's copy; a later, older Update stays
// ignored, and an Update whose object the origin no longer has stores
// nothing.
func TestUpdateOfUnknownObjectFetched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.localActor(t, "alice", false)
	o := newOrigin(t, "/users/bob")
	bob := o.srv.URL + "/users/bob"
	asBob := o.signer(t, "/users/bob")
	b.follow(t, alice, bob)
	noteID := o.srv.URL + "/notes/1"
	o.serve("/notes/1", mustJSON(t, note(noteID, bob, map[string]any{
		"content": "as served", "updated": "2026-01-03T00:00:00Z"})))

	upd := o.id("update")
	b.mustPost(t, asBob, activity(upd, "Update", bob, note(noteID, bob, map[string]any{
		"content": "as carried", "updated": "2026-01-02T12:00:00Z"})))
	b.drain(t)
	if got := b.outcome(t, upd); got != inbox.OutcomeStored {
		t.Fatalf("Update: outcome %q, want %q", got, inbox.OutcomeStored)
	}
	ob, err := b.st.ObjectByURI(b.ctx, noteID)
	if err != nil || ob.Content != "as served" || ob.AttributedTo != bob {
		t.Fatalf("stored %+v, %v; want the origin's copy", ob, err)
	}
	if n := o.count("/notes/1"); n != 1 {
		t.Fatalf("%d fetches of the object, want 1", n)
	}
	older := o.id("update")
	b.mustPost(t, asBob, activity(older, "Update", bob, note(noteID, bob, map[string]any{
		"content": "older", "updated": "2026-01-02T13:00:00Z"})))
	b.drain(t)
	if got := b.outcome(t, older); got != inbox.OutcomeStale {
		t.Fatalf("older Update: outcome %q, want %q", got, inbox.OutcomeStale)
	}
	if n := o.count("/notes/1"); n != 1 {
		t.Fatalf("a held object was fetched again (%d fetches)", n)
	}
	gone := o.id("update")
	b.mustPost(t, asBob, activity(gone, "Update", bob, note(o.srv.URL+"/notes/404", bob, nil)))
	b.drain(t)
	if got := b.outcome(t, gone); got != inbox.OutcomeNoMatch {
		t.Fatalf("Update of an object the origin lacks: outcome %q, want %q", got, inbox.OutcomeNoMatch)
	}
	if _, err := b.st.ObjectByURI(b.ctx, o.srv.URL+"/notes/404"); store.ErrorCode(err) != store.ENOTFOUND {
		t.Fatalf("an object the origin lacks was stored: %v", err)
	}
}

// TestRemoteTombstoneBoundAndSweep: past TombstoneLimit the oldest
// tombstone goes (a Create of its object is stored again), and the sweep
// deletes tombstones older than TombstoneRetention and only those.
func TestRemoteTombstoneBoundAndSweep(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Now()}
	b := setup(t, options{tombstones: 2, now: clock.now})
	b.remote.add("bob", key(t, keyRemote))
	bob, asBob := b.remote.actor("bob"), b.as(t, "bob")
	ids := []string{b.remote.url("/notes/a"), b.remote.url("/notes/b"), b.remote.url("/notes/c")}
	for _, id := range ids {
		b.mustPost(t, asBob, deleteOf(b.id("delete"), bob, id))
		b.drain(t)
	}
	stats, err := b.st.RemoteTombstoneStats(b.ctx)
	if err != nil || stats.Held != 2 {
		t.Fatalf("stats %+v, %v; want 2 held", stats, err)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM remote_tombstones`); n != 2 {
		t.Fatalf("%d tombstone rows, want 2", n)
	}
	for i, want := range []bool{false, true, true} {
		if got, err := b.st.RemoteTombstoned(b.ctx, ids[i]); err != nil || got != want {
			t.Fatalf("%s tombstoned %v, %v; want %v", ids[i], got, err, want)
		}
	}
	// The evicted one's Create is stored.
	b.follow(t, b.localActor(t, "alice", false), bob)
	create := b.id("create")
	b.mustPost(t, asBob, activity(create, "Create", bob, note(ids[0], bob, nil)))
	b.drain(t)
	if got := b.outcome(t, create); got != inbox.OutcomeStored {
		t.Fatalf("Create of the evicted: outcome %q", got)
	}

	// The sweep keeps what is younger than the retention...
	clock.advance(inbox.DefaultTombstoneRetention - time.Hour)
	if n, err := b.importer.SweepTombstones(b.ctx); err != nil || n != 0 {
		t.Fatalf("early sweep: %d, %v", n, err)
	}
	// ...and deletes what is older.
	clock.advance(2 * time.Hour)
	if n, err := b.importer.SweepTombstones(b.ctx); err != nil || n != 2 {
		t.Fatalf("sweep: %d, %v; want 2", n, err)
	}
	stats, err = b.st.RemoteTombstoneStats(b.ctx)
	if err != nil || stats.Held != 0 || b.count(t, `SELECT COUNT(*) FROM remote_tombstones`) != 0 {
		t.Fatalf("after the sweep %+v, %v", stats, err)
	}
}
