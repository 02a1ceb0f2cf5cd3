package delivery_test

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// withImporter registers the inbox's real import handler on the bundle's
// registry, as cmd does, so that what the fan-out records for local
// recipients is imported by the same code as a verified inbound activity.
func (b *bundle) withImporter() {
	b.t.Helper()
	im, err := inbox.NewImporter(inbox.Config{DB: b.db, Store: b.st, Resolver: b.cfg.Resolver.(inbox.Resolver), Now: b.clock.Now})
	if err != nil {
		b.t.Fatal(err)
	}
	im.Register(b.reg)
}

// imported returns the import outcome, the personal inbox and the number
// of import events of the local record of activityID ("" and 0 when none).
func (b *bundle) imported(activityID string) (outcome, box string, events int) {
	b.t.Helper()
	err := b.db.Read.QueryRowContext(b.ctx, `SELECT COALESCE(outcome, ''), inbox FROM inbox_activities WHERE activity_id = ?`,
		activityID).Scan(&outcome, &box)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		b.t.Fatal(err)
	}
	rs, err := b.queue.List(b.ctx, outbox.Filter{EventID: inbox.EventID(activityID)})
	if err != nil {
		b.t.Fatal(err)
	}
	return outcome, box, len(rs)
}

func (b *bundle) mustAct(a *store.Activity, err error) *store.Activity {
	b.t.Helper()
	if err != nil {
		b.t.Fatal(err)
	}
	return a
}

// TestLocalFollowRetriedImportedOnce: a Follow of one local actor by
// another is recorded for the inbox's import in the fan-out's transaction,
// under the inbox's own event id. The fan-out run again (as after a crash
// between its commit and its ledger mark) records nothing more, the import
// run again imports nothing more: one follower, one Accept, which the
// same path brings back to the follower as accepted. Nothing is POSTed.
func TestLocalFollowRetriedImportedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.withImporter()
	alice, bob := b.actor("alice"), b.actor("bob")
	follow := b.mustAct(b.st.Follow(b.ctx, alice, bob.URI))
	for range 2 {
		if err := b.handle(b.eventOf(follow)); err != nil {
			t.Fatal(err)
		}
	}
	if _, box, n := b.imported(follow.URI); n != 1 || box != "bob" {
		t.Fatalf("%d import events of the Follow for inbox %q, want 1 for bob", n, box)
	}
	if n := len(b.rows(delivery.EventPost)); n != 0 {
		t.Fatalf("%d POSTs enqueued for local actors", n)
	}
	rs, err := b.queue.List(b.ctx, outbox.Filter{EventID: inbox.EventID(follow.URI)})
	if err != nil || len(rs) != 1 || rs[0].Event.Type != inbox.EventReceived {
		t.Fatalf("import event %+v, %v", rs, err)
	}
	received := rs[0].Event
	for range 2 {
		if err := b.handle(received); err != nil {
			t.Fatal(err)
		}
	}
	if outcome, _, _ := b.imported(follow.URI); outcome != inbox.OutcomeFollowed {
		t.Fatalf("import outcome %q", outcome)
	}
	fs, total, err := b.st.Followers(b.ctx, bob.ID, store.StateAccepted, 0, 10)
	if err != nil || total != 1 || fs[0].URI != alice.URI || fs[0].FollowActivityID != follow.URI || fs[0].Inbox != alice.URI+"/inbox" {
		t.Fatalf("bob's followers %+v, %d, %v", fs, total, err)
	}
	accepts := b.count(`SELECT COUNT(*) FROM activities WHERE type = 'Accept' AND actor_uri = ?`, bob.URI)
	if accepts != 1 {
		t.Fatalf("%d Accepts by bob", accepts)
	}
	// The Accept goes back the same way: the worker runs what is queued.
	b.startWorker(4)
	waitFor(t, "alice's follow accepted", func() bool {
		st, err := b.st.FollowingState(b.ctx, alice.ID, bob.URI)
		return err == nil && st == store.StateAccepted
	})
	if _, total, _ := b.st.FollowingOf(b.ctx, alice.ID, 0, 10); total != 1 {
		t.Fatalf("alice follows %d", total)
	}
	if n := len(b.rows(delivery.EventPost)); n != 0 {
		t.Fatalf("%d POSTs enqueued for local actors", n)
	}
}

// TestLocalActorsTalk: local actors follow (a locked one after its Accept),
// post to, message, like, reply to and unfollow each other through the
// outbox alone, each activity imported once for its local recipients.
func TestLocalActorsTalk(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.withImporter()
	alice, bob := b.actor("alice"), b.actor("bob")
	carol, _, err := b.st.CreateActor(b.ctx, store.NewActor{Name: "carol", ManuallyApprovesFollowers: true})
	if err != nil {
		t.Fatal(err)
	}
	b.startWorker(4)
	settled := func(act *store.Activity, want string) {
		t.Helper()
		waitFor(t, act.Type+" imported", func() bool {
			outcome, _, _ := b.imported(act.URI)
			return outcome != ""
		})
		if outcome, _, n := b.imported(act.URI); outcome != want || n != 1 {
			t.Fatalf("%s imported as %q by %d events, want %q once", act.Type, outcome, n, want)
		}
	}
	settled(b.mustAct(b.st.Follow(b.ctx, alice, bob.URI)), inbox.OutcomeFollowed)
	waitFor(t, "alice following bob", func() bool {
		st, _ := b.st.FollowingState(b.ctx, alice.ID, bob.URI)
		return st == store.StateAccepted
	})
	// carol is locked: the request waits for her Accept.
	settled(b.mustAct(b.st.Follow(b.ctx, alice, carol.URI)), inbox.OutcomePending)
	if st, _ := b.st.FollowingState(b.ctx, alice.ID, carol.URI); st != store.StatePending {
		t.Fatalf("alice's follow of locked carol is %q", st)
	}
	accept := b.mustAct(b.st.AnswerFollow(b.ctx, carol, store.FollowRequest{Follower: alice.URI}, "Accept"))
	settled(accept, inbox.OutcomeAnswered)
	if st, _ := b.st.FollowingState(b.ctx, alice.ID, carol.URI); st != store.StateAccepted {
		t.Fatalf("after carol's Accept alice's follow is %q", st)
	}

	// bob's public note reaches alice, his follower.
	note, bobNote, err := notetest.Create(b.ctx, b.st, bob, notetest.Input{Content: "hello neighbours",
		To: []string{activitypub.Public}, CC: []string{b.st.URIs().Followers("bob")}})
	if err != nil {
		t.Fatal(err)
	}
	settled(note, inbox.OutcomeLocal)
	if _, box, _ := b.imported(note.URI); box != "alice" {
		t.Fatalf("bob's note recorded for inbox %q, want alice's", box)
	}
	// A direct note from alice to bob, who does not follow her.
	dm, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "just for you", To: []string{bob.URI}})
	if err != nil {
		t.Fatal(err)
	}
	settled(dm, inbox.OutcomeLocal)
	if _, box, _ := b.imported(dm.URI); box != "bob" {
		t.Fatalf("the direct note recorded for inbox %q, want bob's", box)
	}
	// alice likes and replies to bob's note.
	settled(b.mustAct(b.st.Like(b.ctx, alice, bobNote.URI)), inbox.OutcomeLocal)
	reply, replyNote, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "hello bob", InReplyTo: bobNote.URI,
		To: []string{activitypub.Public, bob.URI}})
	if err != nil {
		t.Fatal(err)
	}
	settled(reply, inbox.OutcomeLocal)
	if likes, _, _ := b.st.ReactionCounts(b.ctx, bobNote.URI); likes != 1 {
		t.Fatalf("bob's note has %d likes, want 1", likes)
	}
	if o, err := b.st.ObjectByURI(b.ctx, replyNote.URI); err != nil || o.InReplyTo != bobNote.URI {
		t.Fatalf("reply %+v, %v", o, err)
	}
	// Unfollowing removes alice from bob's followers.
	settled(b.mustAct(b.st.Undo(b.ctx, alice, b.mustFollowID(alice, bob.URI))), inbox.OutcomeUnfollowed)
	if ok, _ := b.st.IsFollower(b.ctx, bob.ID, alice.URI); ok {
		t.Fatal("alice still follows bob after her Undo")
	}
	// bob follows alice, then alice removes him (a Reject of his accepted
	// Follow): gone from her followers and from his following.
	settled(b.mustAct(b.st.Follow(b.ctx, bob, alice.URI)), inbox.OutcomeFollowed)
	waitFor(t, "bob following alice", func() bool {
		st, _ := b.st.FollowingState(b.ctx, bob.ID, alice.URI)
		return st == store.StateAccepted
	})
	settled(b.mustAct(b.st.AnswerFollow(b.ctx, alice, store.FollowRequest{Follower: bob.URI}, "Reject")), inbox.OutcomeAnswered)
	if _, err := b.st.FollowingState(b.ctx, bob.ID, alice.URI); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("bob still follows alice after her Reject: %v", err)
	}
	if ok, _ := b.st.IsFollower(b.ctx, alice.ID, bob.URI); ok {
		t.Fatal("bob is still alice's follower after her Reject")
	}
	if n := len(b.rows(delivery.EventPost)); n != 0 {
		t.Fatalf("%d POSTs enqueued for local actors", n)
	}
}

func (b *bundle) mustFollowID(a *store.Actor, target string) string {
	b.t.Helper()
	id, err := b.st.ActiveActivity(b.ctx, a, "Follow", target)
	if err != nil {
		b.t.Fatal(err)
	}
	return id
}

func (b *bundle) count(q string, args ...any) int {
	b.t.Helper()
	var n int
	if err := b.db.Read.QueryRowContext(b.ctx, q, args...).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

// TestLocalActorDeleted: a deleted local actor's Delete reaches its local
// followers through the import, which ends the follows between it and
// them both ways; its notes are tombstones.
func TestLocalActorDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.withImporter()
	alice, bob := b.actor("alice"), b.actor("bob")
	b.startWorker(4)
	b.mustAct(b.st.Follow(b.ctx, bob, alice.URI))
	b.mustAct(b.st.Follow(b.ctx, alice, bob.URI))
	waitFor(t, "both follows accepted", func() bool {
		s1, _ := b.st.FollowingState(b.ctx, bob.ID, alice.URI)
		s2, _ := b.st.FollowingState(b.ctx, alice.ID, bob.URI)
		return s1 == store.StateAccepted && s2 == store.StateAccepted
	})
	_, note, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "bye", To: []string{activitypub.Public}})
	if err != nil {
		t.Fatal(err)
	}
	del := b.mustAct(b.st.DeleteActor(b.ctx, "alice"))
	waitFor(t, "the Delete imported", func() bool { o, _, _ := b.imported(del.URI); return o != "" })
	if o, box, n := b.imported(del.URI); o != inbox.OutcomeActorGone || box != "bob" || n != 1 {
		t.Fatalf("the Delete imported as %q for %q by %d events", o, box, n)
	}
	if _, err := b.st.FollowingState(b.ctx, bob.ID, alice.URI); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("bob still follows deleted alice: %v", err)
	}
	if ok, _ := b.st.IsFollower(b.ctx, bob.ID, alice.URI); ok {
		t.Fatal("deleted alice still follows bob")
	}
	if o, err := b.st.ObjectByURI(b.ctx, note.URI); err != nil || !o.Deleted() || o.FormerType != "Note" {
		t.Fatalf("alice's note after her deletion: %+v, %v", o, err)
	}
}

// TestLocalActorDeletedLeavesOthers: a deleted local actor leaves the
// followers of the local actors it followed, and the following of those
// who followed it, also where its Delete does not reach them.
func TestLocalActorDeletedLeavesOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.withImporter()
	alice, bob, carol := b.actor("alice"), b.actor("bob"), b.actor("carol")
	b.startWorker(4)
	b.mustAct(b.st.Follow(b.ctx, alice, bob.URI)) // bob does not follow alice
	b.mustAct(b.st.Follow(b.ctx, carol, alice.URI))
	waitFor(t, "both follows accepted", func() bool {
		s1, _ := b.st.FollowingState(b.ctx, alice.ID, bob.URI)
		s2, _ := b.st.FollowingState(b.ctx, carol.ID, alice.URI)
		return s1 == store.StateAccepted && s2 == store.StateAccepted
	})
	if _, err := b.st.DeleteActor(b.ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.st.IsFollower(b.ctx, bob.ID, alice.URI); ok {
		t.Fatal("deleted alice is still among bob's followers")
	}
	if _, err := b.st.FollowingState(b.ctx, carol.ID, alice.URI); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("carol still follows deleted alice: %v", err)
	}
}
