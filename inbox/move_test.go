package inbox_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/store"
)

// sentActivity is an activity a local actor sent, with its outbox event's
// payload.
type sentActivity struct {
	Type, Object string
	Target       []string
}

// sent returns what actor a sent (built and enqueued) of type typ, each
// checked to have its outbox event carrying the same bytes.
func sent(t *testing.T, b *testBundle, a *store.Actor, typ string) []sentActivity {
	t.Helper()
	rows, err := b.db.Read.Query(`SELECT a.document, e.payload FROM activities a
		JOIN event_queue_payloads e ON e.event_id = a.event_id WHERE a.actor_id = ? AND a.type = ? ORDER BY a.id`, a.ID, typ)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []sentActivity
	for rows.Next() {
		var doc, payload string
		if err := rows.Scan(&doc, &payload); err != nil {
			t.Fatal(err)
		}
		var ev activitypub.Outgoing
		if err := json.Unmarshal([]byte(payload), &ev); err != nil || string(ev.Activity) != doc || ev.Actor != a.URI {
			t.Fatalf("the outbox event of %s does not carry it: %s", doc, payload)
		}
		act, err := activitypub.ParseActivity([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		obj := act.ObjectID
		if act.Object != nil && act.Object.ObjectID != "" {
			obj = act.Object.ObjectID // an Undo of a Follow: what was followed
		}
		out = append(out, sentActivity{Type: act.Type, Object: obj, Target: act.To})
	}
	return out
}

// TestInboundMove: a Move of an account local actors follow, signed by it
// and posted over HTTP, is believed only when the target's document
// (fetched with a signed GET from the peer) lists the old account in
// alsoKnownAs; then each follower here sends an Undo of its Follow to the
// old account and a Follow to the new one, except one that blocks the new
// account; a redelivery changes nothing.
func TestInboundMove(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, n := range []string{"old", "new", "liar"} {
		b.remote.add(n, key(t, keyRemote))
	}
	old, newAcct, liar := b.remote.actor("old"), b.remote.actor("new"), b.remote.actor("liar")
	b.remote.setAlsoKnownAs("new", b.remote.url("/users/someone"), old)
	alice := b.localActor(t, "alice", false)
	carol := b.localActor(t, "carol", false)
	dave := b.localActor(t, "dave", false)
	for _, a := range []*store.Actor{alice, carol, dave} {
		b.follow(t, a, old)
	}
	if _, err := b.st.Block(b.ctx, dave, newAcct); err != nil {
		t.Fatal(err)
	}
	asOld := b.as(t, "old")
	move := func(object, target string) string {
		t.Helper()
		id := b.id("move")
		m := activity(id, "Move", old, object)
		m["target"] = target
		b.mustPost(t, asOld, m)
		b.drain(t)
		return b.outcome(t, id)
	}

	// Not believed: the target does not list the old account; the object
	// is not the actor.
	if got := move(old, liar); got != "refused: the Move's target does not list its actor in alsoKnownAs" {
		t.Fatalf("Move to an account that does not list it: %q", got)
	}
	if got := move(b.remote.actor("someone"), newAcct); got != "refused: a Move's object must be its actor" {
		t.Fatalf("Move of another account: %q", got)
	}
	if got := move(old, alice.URI); got != "refused: a Move to a local actor is not supported" {
		t.Fatalf("Move to a local actor: %q", got)
	}
	for _, a := range []*store.Actor{alice, carol, dave} {
		if _, err := b.st.FollowingState(b.ctx, a.ID, old); err != nil {
			t.Fatalf("%s stopped following after a refused Move: %v", a.Name, err)
		}
		if got := sent(t, b, a, "Undo"); len(got) != 0 {
			t.Fatalf("%s sent %v after a refused Move", a.Name, got)
		}
	}

	fetches := b.remote.fetchCount("new")
	moveID := b.id("move")
	m := activity(moveID, "Move", old, old)
	m["target"] = newAcct
	b.mustPost(t, asOld, m)
	b.drain(t)
	if got := b.outcome(t, moveID); got != inbox.OutcomeMoved {
		t.Fatalf("verified Move: %q", got)
	}
	if b.remote.fetchCount("new") <= fetches {
		t.Fatal("the Move's target was not fetched afresh")
	}
	for _, a := range []*store.Actor{alice, carol, dave} {
		if _, err := b.st.FollowingState(b.ctx, a.ID, old); err == nil {
			t.Fatalf("%s still follows the old account", a.Name)
		}
		undos := sent(t, b, a, "Undo")
		if len(undos) != 1 || undos[0].Object != old || len(undos[0].Target) != 1 || undos[0].Target[0] != old {
			t.Fatalf("%s's Undo: %+v", a.Name, undos)
		}
		follows := sent(t, b, a, "Follow")
		state, err := b.st.FollowingState(b.ctx, a.ID, newAcct)
		if a == dave {
			if err == nil || len(follows) != 1 { // only its Follow of old
				t.Fatalf("dave blocks the new account, yet follows it (%q) or sent %+v", state, follows)
			}
			continue
		}
		if err != nil || state != store.StatePending {
			t.Fatalf("%s's follow of the new account: %q, %v", a.Name, state, err)
		}
		if len(follows) != 2 || follows[1].Object != newAcct || follows[1].Target[0] != newAcct {
			t.Fatalf("%s's Follows: %+v", a.Name, follows)
		}
	}

	// The same Move again: imported once, nothing more sent.
	outgoing := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ?`, activitypub.EventOutgoing)
	b.mustPost(t, asOld, m)
	b.drain(t)
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ?`, activitypub.EventOutgoing); n != outgoing {
		t.Fatalf("a redelivered Move enqueued %d more activities", n-outgoing)
	}
	// The old account, now followed by no one here, moving again concerns
	// no one: the inbox does not keep it.
	if got := move(old, newAcct); got != inbox.OutcomeIgnored {
		t.Fatalf("a Move of an account no longer followed: %q", got)
	}
}

// TestMoveCooldown: an account moving A to B, B back to A and A to B again
// within seconds is honoured for A's first Move and B's, not for A's
// second (store.MoveCooldown): its followers here neither unfollow nor
// follow again, and nothing is sent. A local actor's second Move within
// the cooldown is refused too.
func TestMoveCooldown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, n := range []string{"a", "b"} {
		b.remote.add(n, key(t, keyRemote))
	}
	acctA, acctB := b.remote.actor("a"), b.remote.actor("b")
	b.remote.setAlsoKnownAs("a", acctB)
	b.remote.setAlsoKnownAs("b", acctA)
	alice := b.localActor(t, "alice", false)
	carol := b.localActor(t, "carol", false)
	for _, a := range []*store.Actor{alice, carol} {
		b.follow(t, a, acctA)
	}
	move := func(from, to string) string {
		t.Helper()
		id := b.id("move")
		m := activity(id, "Move", b.remote.actor(from), b.remote.actor(from))
		m["target"] = b.remote.actor(to)
		b.mustPost(t, b.as(t, from), m)
		b.drain(t)
		return b.outcome(t, id)
	}
	if got := move("a", "b"); got != inbox.OutcomeMoved {
		t.Fatalf("a's first Move: %q", got)
	}
	if got := move("b", "a"); got != inbox.OutcomeMoved {
		t.Fatalf("b's first Move: %q", got)
	}
	outgoing := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ?`, activitypub.EventOutgoing)
	if got := move("a", "b"); got != inbox.OutcomeMoveCooldown {
		t.Fatalf("a's second Move within the cooldown: %q", got)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ?`, activitypub.EventOutgoing); n != outgoing {
		t.Fatalf("a Move within the cooldown enqueued %d activities", n-outgoing)
	}
	for _, a := range []*store.Actor{alice, carol} {
		if _, err := b.st.FollowingState(b.ctx, a.ID, acctA); err != nil {
			t.Fatalf("%s no longer follows a after a Move within the cooldown: %v", a.Name, err)
		}
	}

	// A local actor: its first Move is recorded, a second within the
	// cooldown refused.
	if _, err := b.st.MoveActor(b.ctx, alice, acctA); err != nil {
		t.Fatal(err)
	}
	_, err := b.st.MoveActor(b.ctx, alice, acctB)
	if store.ErrorCode(err) != store.EUNPROCESSABLE || !strings.Contains(store.ErrorMessage(err), "7 days") {
		t.Fatalf("a local actor's second Move within the cooldown: %v", err)
	}
}

// TestMoveSweep: a remote account's honoured Move is kept while it holds a
// later one back (store.MoveCooldown) and swept after.
func TestMoveSweep(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Now()}
	b := setup(t, options{now: clock.now})
	for _, n := range []string{"a", "b"} {
		b.remote.add(n, key(t, keyRemote))
	}
	acctA, acctB := b.remote.actor("a"), b.remote.actor("b")
	b.remote.setAlsoKnownAs("a", acctB)
	b.remote.setAlsoKnownAs("b", acctA)
	b.follow(t, b.localActor(t, "alice", false), acctA)
	move := func(from, to string) string {
		t.Helper()
		id := b.id("move")
		m := activity(id, "Move", b.remote.actor(from), b.remote.actor(from))
		m["target"] = b.remote.actor(to)
		b.mustPost(t, b.as(t, from), m)
		b.drain(t)
		return b.outcome(t, id)
	}
	if got := move("a", "b"); got != inbox.OutcomeMoved {
		t.Fatalf("a's first Move: %q", got)
	}
	clock.advance(store.MoveCooldown - time.Hour)
	if n, err := b.importer.SweepMoves(b.ctx); err != nil || n != 0 {
		t.Fatalf("sweep within the cooldown: %d, %v; want nothing swept", n, err)
	}
	clock.advance(2 * time.Hour)
	if n, err := b.importer.SweepMoves(b.ctx); err != nil || n != 1 {
		t.Fatalf("sweep past the cooldown: %d, %v; want 1", n, err)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM remote_moves`); n != 0 {
		t.Fatalf("%d remote_moves rows after the sweep", n)
	}
}
