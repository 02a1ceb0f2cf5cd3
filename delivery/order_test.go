package delivery_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// script answers a remote's verified POSTs: with fail[activity id], as
// many times as left[activity id] says (-1: always), or with the first
// status of failType[type] once per activity; 202 otherwise. It keeps the
// POSTs it accepted, in the order they came.
type script struct {
	mu       sync.Mutex
	fail     map[string]int // activity id -> status
	left     map[string]int // activity id -> answers of fail still to give (-1: always)
	failType map[string]int // activity type -> status of each activity's first POST
	tried    map[string]bool
	accepted []received
}

func newScript() *script {
	return &script{fail: map[string]int{}, left: map[string]int{}, failType: map[string]int{}, tried: map[string]bool{}}
}

func (sc *script) answer(got received) int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	first := !sc.tried[got.ActivityID]
	sc.tried[got.ActivityID] = true
	if st, ok := sc.fail[got.ActivityID]; ok && sc.left[got.ActivityID] != 0 {
		if sc.left[got.ActivityID] > 0 {
			sc.left[got.ActivityID]--
		}
		return st
	}
	if st := sc.failType[got.Type]; st != 0 && first {
		return st
	}
	sc.accepted = append(sc.accepted, got)
	return http.StatusAccepted
}

// acceptedOf returns the types of the accepted POSTs of the given
// activities, in the order they were accepted.
func (sc *script) acceptedOf(ids ...string) []string {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var out []string
	for _, a := range sc.accepted {
		if slices.Contains(ids, a.ActivityID) {
			out = append(out, a.Type)
		}
	}
	return out
}

func (rm *remote) setScript(sc *script) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.answer = sc.answer
}

// postsOf counts the POSTs (any answer) of activity id the remote got.
func (rm *remote) postsOf(id string) int {
	n := 0
	for _, r := range rm.received() {
		if r.ActivityID == id {
			n++
		}
	}
	return n
}

// deliveryOf returns the outbox row of the delivery of activity to inbox.
func (b *bundle) deliveryOf(activity, inbox string) (outbox.Row, bool) {
	b.t.Helper()
	for _, r := range b.rows(delivery.EventPost) {
		var p delivery.Post
		if err := json.Unmarshal(r.Event.Payload, &p); err != nil {
			b.t.Fatal(err)
		}
		if p.ActivityID == activity && p.Inbox == inbox {
			return r, true
		}
	}
	return outbox.Row{}, false
}

// postNote has alice post a public note to her followers.
func postNote(b *bundle, alice *store.Actor, content string) (*store.Activity, *store.Object) {
	b.t.Helper()
	act, obj, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: content,
		To: []string{activitypub.Public}, CC: []string{b.st.URIs().Followers(alice.Name)}})
	if err != nil {
		b.t.Fatal(err)
	}
	return act, obj
}

// TestDeleteNeverOvertakesRetriedCreate: a note is posted, its Create's
// first POST answered 500, and the note deleted at once. The Delete waits
// for the Create (without spending an attempt); the Create, found deleted
// on its retry, is superseded, not sent; then the Delete goes. The peer
// never accepts the Create, least of all after the Delete.
func TestDeleteNeverOvertakesRetriedCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, true)
	rm.follow(b, alice, "fan")
	sc := newScript()
	sc.failType["Create"] = http.StatusInternalServerError
	rm.setScript(sc)
	inbox := rm.URL() + "/inbox"

	create, note := postNote(b, alice, "soon gone")
	b.startWorker(2) // two workers on one database
	b.startWorker(2)
	waitFor(t, "the Create's first POST", func() bool { return rm.postsOf(create.URI) == 1 })
	del, err := b.st.DeleteObject(b.ctx, alice, note.URI)
	if err != nil {
		t.Fatal(err)
	}
	b.waitTicking("the Delete accepted and the Create settled", func() bool {
		r, ok := b.deliveryOf(create.URI, inbox)
		return ok && r.Status == outbox.StatusDone && len(sc.acceptedOf(del.URI)) == 1
	})
	if got := sc.acceptedOf(create.URI, del.URI); !slices.Equal(got, []string{"Delete"}) {
		t.Errorf("the peer accepted %v, want only the Delete", got)
	}
	if n := rm.postsOf(create.URI); n != 1 {
		t.Errorf("the Create was POSTed %d times, want once (its first, answered 500)", n)
	}
	r, _ := b.deliveryOf(create.URI, inbox)
	if ok, err := b.svc.Superseded(b.ctx, r.Event.ID); err != nil || !ok {
		t.Errorf("the Create's delivery is not superseded (%v)", err)
	}
	if d, _ := b.deliveryOf(del.URI, inbox); d.Attempts != 0 {
		t.Errorf("the Delete spent %d attempts waiting", d.Attempts)
	}
	sts, err := b.svc.Status(b.ctx, create.URI, delivery.StatusQuery{})
	if err != nil || len(sts) != 1 || sts[0].State != delivery.StateSuperseded {
		t.Errorf("status of the Create: %+v (%v), want superseded", sts, err)
	}
}

// TestUpdateWaitsForRetriedCreate: a note is posted, its Create's first
// POST answered 500, and the note edited at once. The peer accepts the
// Create, then the Update: the edit is not lost.
func TestUpdateWaitsForRetriedCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, true)
	rm.follow(b, alice, "fan")
	sc := newScript()
	sc.failType["Create"] = http.StatusInternalServerError
	rm.setScript(sc)
	inbox := rm.URL() + "/inbox"

	create, note := postNote(b, alice, "first")
	b.startWorker(2) // two workers on one database
	b.startWorker(2)
	waitFor(t, "the Create's first POST", func() bool { return rm.postsOf(create.URI) == 1 })
	update, _, err := notetest.Update(b.ctx, b.st, alice, note.URI, notetest.Input{Content: "first, edited"})
	if err != nil {
		t.Fatal(err)
	}
	b.waitTicking("both accepted", func() bool { return len(sc.acceptedOf(create.URI, update.URI)) == 2 })
	if got := sc.acceptedOf(create.URI, update.URI); !slices.Equal(got, []string{"Create", "Update"}) {
		t.Errorf("the peer accepted %v, want the Create, then the Update", got)
	}
	if d, _ := b.deliveryOf(update.URI, inbox); d.Attempts != 0 {
		t.Errorf("the Update spent %d attempts waiting", d.Attempts)
	}
}

// TestOrderHoldsOnlyItsObjectAndInbox: while a note's Update waits at one
// inbox for its Create, which that host keeps failing, the same Update
// goes to another inbox, and another note's Create goes to the same inbox
// (the same host: the waiting Update holds none of its slots).
func TestOrderHoldsOnlyItsObjectAndInbox(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	a := newRemote(t, b.keys, b.clock, true)
	c := newRemote(t, b.keys, b.clock, true)
	a.follow(b, alice, "fa")
	c.follow(b, alice, "fc")
	scA, scC := newScript(), newScript()
	a.setScript(scA)
	c.setScript(scC)
	inboxA := a.URL() + "/inbox"

	create1, note1 := postNote(b, alice, "one")
	scA.mu.Lock()
	scA.fail[create1.URI], scA.left[create1.URI] = http.StatusServiceUnavailable, -1
	scA.mu.Unlock()
	b.startWorker(4)
	waitFor(t, "the Create at both hosts", func() bool {
		return a.postsOf(create1.URI) >= 1 && len(scC.acceptedOf(create1.URI)) == 1
	})
	update1, _, err := notetest.Update(b.ctx, b.st, alice, note1.URI, notetest.Input{Content: "one, edited"})
	if err != nil {
		t.Fatal(err)
	}
	create2, _ := postNote(b, alice, "two")
	// The test clock stands still: the failing Create is not retried, so
	// its Update waits at host A for as long as the test looks.
	waitFor(t, "the Update at C, the second note at A, the Update at A run", func() bool {
		r, ok := b.deliveryOf(update1.URI, inboxA)
		ran := ok && (r.Status == outbox.StatusPending && r.NextAttemptAt.After(b.clock.Now()) || a.postsOf(update1.URI) > 0)
		return ran && len(scC.acceptedOf(update1.URI)) == 1 && len(scA.acceptedOf(create2.URI)) == 1
	})
	if n := a.postsOf(update1.URI); n != 0 {
		t.Errorf("host A got the Update %d times before its Create", n)
	}
	r, _ := b.deliveryOf(update1.URI, inboxA)
	if r.Status != outbox.StatusPending || r.Attempts != 0 {
		t.Errorf("the waiting Update is %s with %d attempts, want pending with none", r.Status, r.Attempts)
	}
}

// TestRetryOfSupersededCreateSendsNothing: a Create dead-lettered (the
// peer refused it), the note deleted (its Delete goes: a given-up
// delivery holds nothing back), then the Create retried by an operator:
// it is superseded, not sent, and cannot be retried again.
func TestRetryOfSupersededCreateSendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, true)
	rm.follow(b, alice, "fan")
	sc := newScript()
	sc.failType["Create"] = http.StatusUnprocessableEntity
	rm.setScript(sc)
	inbox := rm.URL() + "/inbox"

	create, note := postNote(b, alice, "refused")
	b.startWorker(4)
	waitFor(t, "the Create dead-lettered", func() bool {
		r, ok := b.deliveryOf(create.URI, inbox)
		return ok && r.Status == outbox.StatusDeadLettered
	})
	del, err := b.st.DeleteObject(b.ctx, alice, note.URI)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Delete accepted", func() bool { return len(sc.acceptedOf(del.URI)) == 1 })
	r, _ := b.deliveryOf(create.URI, inbox)
	if err := b.queue.Retry(b.ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	b.waitTicking("the retried Create settled", func() bool {
		r, _ := b.deliveryOf(create.URI, inbox)
		return r.Status == outbox.StatusDone || r.Status == outbox.StatusDeadLettered
	})
	if n := rm.postsOf(create.URI); n != 1 {
		t.Errorf("the Create was POSTed %d times, want once (before the note was deleted)", n)
	}
	if ok, err := b.svc.Superseded(b.ctx, r.Event.ID); err != nil || !ok {
		t.Errorf("the retried Create is not superseded (%v)", err)
	}
	if err := b.queue.Retry(b.ctx, r.ID); !errors.Is(err, outbox.ErrState) {
		t.Errorf("a second retry: %v, want outbox.ErrState", err)
	}
}

// TestOrderSurvivesRestart: the Update waits for its Create's retry; the
// process is replaced (fresh memory: the waiting list that would wake it
// is gone, the tables stay). The Update still goes after the Create: what
// orders deliveries is in the database.
func TestOrderSurvivesRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, true)
	rm.follow(b, alice, "fan")
	sc := newScript()
	sc.failType["Create"] = http.StatusInternalServerError
	rm.setScript(sc)
	inbox := rm.URL() + "/inbox"

	create, note := postNote(b, alice, "first")
	b.startWorker(4)
	waitFor(t, "the Create's first POST", func() bool { return rm.postsOf(create.URI) == 1 })
	update, _, err := notetest.Update(b.ctx, b.st, alice, note.URI, notetest.Input{Content: "first, edited"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Update waiting (or sent)", func() bool {
		r, ok := b.deliveryOf(update.URI, inbox)
		return ok && r.Status == outbox.StatusPending && r.NextAttemptAt.After(b.clock.Now()) ||
			rm.postsOf(update.URI) > 0
	})
	b.restart()
	b.waitTicking("both accepted", func() bool { return len(sc.acceptedOf(create.URI, update.URI)) == 2 })
	if got := sc.acceptedOf(create.URI, update.URI); !slices.Equal(got, []string{"Create", "Update"}) {
		t.Errorf("the peer accepted %v, want the Create, then the Update", got)
	}
}

// TestDiscardedPredecessorHoldsNothing: an Update waits for its Create,
// which its host keeps failing; the operator discards the Create's
// delivery; the Update then goes (the discarded Create never does).
func TestDiscardedPredecessorHoldsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, true)
	rm.follow(b, alice, "fan")
	sc := newScript()
	rm.setScript(sc)
	inbox := rm.URL() + "/inbox"

	create, note := postNote(b, alice, "first")
	sc.mu.Lock()
	sc.fail[create.URI], sc.left[create.URI] = http.StatusInternalServerError, -1
	sc.mu.Unlock()
	b.startWorker(4)
	waitFor(t, "the Create's first POST", func() bool { return rm.postsOf(create.URI) == 1 })
	update, _, err := notetest.Update(b.ctx, b.st, alice, note.URI, notetest.Input{Content: "first, edited"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Update waiting (or sent)", func() bool {
		r, ok := b.deliveryOf(update.URI, inbox)
		return ok && r.Status == outbox.StatusPending && r.NextAttemptAt.After(b.clock.Now()) ||
			rm.postsOf(update.URI) > 0
	})
	if n := rm.postsOf(update.URI); n != 0 {
		t.Fatalf("the Update was sent %d times while its Create was undelivered", n)
	}
	var c outbox.Row
	waitFor(t, "the Create's delivery back to pending", func() bool {
		c, _ = b.deliveryOf(create.URI, inbox)
		return c.Status == outbox.StatusPending
	})
	if err := b.queue.Discard(b.ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	b.waitTicking("the Update accepted", func() bool { return len(sc.acceptedOf(update.URI)) == 1 })
	if got := sc.acceptedOf(create.URI, update.URI); !slices.Equal(got, []string{"Update"}) {
		t.Errorf("the peer accepted %v, want the Update alone", got)
	}
}
