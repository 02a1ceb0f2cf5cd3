package delivery_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// fanoutRow returns the outbox row of the outgoing event of act.
func (b *bundle) fanoutRow(act *store.Activity) outbox.Row {
	b.t.Helper()
	rs, err := b.queue.List(b.ctx, outbox.Filter{EventID: act.EventID})
	if err != nil || len(rs) != 1 {
		b.t.Fatalf("event of %s: %v (%d rows)", act.URI, err, len(rs))
	}
	return rs[0]
}

// TestUpdateFanoutWaitsForFailedCreateFanout: a note's Create fails to fan
// out (a named recipient on another host cannot be resolved for now), and
// the note is edited before the Create's retry. The Update's fan-out waits
// (without spending an attempt) for the Create's: the follower's host
// accepts the Create, then the Update, never the Update first.
func TestUpdateFanoutWaitsForFailedCreateFanout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	a := newRemote(t, b.keys, b.clock, true)
	c := newRemote(t, b.keys, b.clock, true)
	a.follow(b, alice, "fan")
	sc := newScript()
	a.setScript(sc)
	c.mu.Lock()
	c.getStatus["carol"] = http.StatusServiceUnavailable
	c.mu.Unlock()

	create, note, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "first",
		To: []string{activitypub.Public}, CC: []string{b.st.URIs().Followers(alice.Name), c.actorURL("carol")}})
	if err != nil {
		t.Fatal(err)
	}
	b.startWorker(4)
	// The test clock stands still: the failed fan-out is not retried
	// until the clock moves.
	waitFor(t, "the Create's fan-out failed once", func() bool {
		r := b.fanoutRow(create)
		return r.Attempts == 1 && r.Status == outbox.StatusPending
	})
	c.mu.Lock()
	delete(c.getStatus, "carol")
	c.mu.Unlock()
	update, _, err := notetest.Update(b.ctx, b.st, alice, note.URI, notetest.Input{Content: "first, edited"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Update's fan-out deferred (or its POST sent)", func() bool {
		r := b.fanoutRow(update)
		return r.Status == outbox.StatusPending && r.NextAttemptAt.After(b.clock.Now()) || a.postsOf(update.URI) > 0
	})
	if n := a.postsOf(update.URI); n != 0 {
		t.Fatalf("the follower's host got the Update %d times before the Create was fanned out", n)
	}
	if r := b.fanoutRow(update); r.Attempts != 0 {
		t.Errorf("the Update's fan-out spent %d attempts waiting", r.Attempts)
	}
	b.waitTicking("both accepted", func() bool { return len(sc.acceptedOf(create.URI, update.URI)) == 2 })
	if got := sc.acceptedOf(create.URI, update.URI); !slices.Equal(got, []string{"Create", "Update"}) {
		t.Errorf("the peer accepted %v, want the Create, then the Update", got)
	}
}

// TestUndoFanoutWaitsForFailedLikeFanout: a Like of a remote note courier
// has not stored fails to fan out (the note, fetched for its author, cannot
// be fetched for now), and is undone before the Like's retry. The Undo's
// fan-out waits for the Like's: the author accepts the Like, then the Undo.
func TestUndoFanoutWaitsForFailedLikeFanout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	sc := newScript()
	rm.setScript(sc)
	rm.mu.Lock()
	rm.getStatus["note:bob"] = http.StatusServiceUnavailable
	rm.mu.Unlock()

	like, err := b.st.Like(b.ctx, alice, rm.URL()+"/notes/bob")
	if err != nil {
		t.Fatal(err)
	}
	b.startWorker(4)
	waitFor(t, "the Like's fan-out failed once", func() bool {
		r := b.fanoutRow(like)
		return r.Attempts == 1 && r.Status == outbox.StatusPending
	})
	rm.mu.Lock()
	delete(rm.getStatus, "note:bob")
	rm.mu.Unlock()
	undo, err := b.st.Undo(b.ctx, alice, like.URI)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Undo's fan-out deferred (or its POST sent)", func() bool {
		r := b.fanoutRow(undo)
		return r.Status == outbox.StatusPending && r.NextAttemptAt.After(b.clock.Now()) || rm.postsOf(undo.URI) > 0
	})
	if n := rm.postsOf(undo.URI); n != 0 {
		t.Fatalf("the author got the Undo %d times before the Like was fanned out", n)
	}
	b.waitTicking("both accepted", func() bool { return len(sc.acceptedOf(like.URI, undo.URI)) == 2 })
	if got := sc.acceptedOf(like.URI, undo.URI); !slices.Equal(got, []string{"Like", "Undo"}) {
		t.Errorf("the author accepted %v, want the Like, then the Undo", got)
	}
}

// TestUndoGoesWhereItsActivityWent: an Undo goes to the inboxes its Like
// was delivered to, whatever a new lookup of the liked note's author
// says. A Like that reached bob is undone at bob though bob's note answers
// 404 by then; a Like that went nowhere (carol's note answered 404 then) is
// undone nowhere, though the note answers now.
func TestUndoGoesWhereItsActivityWent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	b.startWorker(4)
	setStatus := func(note string, status int) {
		rm.mu.Lock()
		defer rm.mu.Unlock()
		if status == 0 {
			delete(rm.getStatus, "note:"+note)
		} else {
			rm.getStatus["note:"+note] = status
		}
	}
	postsTo := func(act *store.Activity) []string {
		var inboxes []string
		for _, r := range b.rows(delivery.EventPost) {
			var p delivery.Post
			if err := json.Unmarshal(r.Event.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if p.ActivityID == act.URI {
				inboxes = append(inboxes, p.Inbox)
			}
		}
		return inboxes
	}

	like, err := b.st.Like(b.ctx, alice, rm.URL()+"/notes/bob")
	if err != nil {
		t.Fatal(err)
	}
	b.waitTicking("the Like at bob's", func() bool { return rm.postsOf(like.URI) > 0 })
	b.waitTicking("the Like's fan-out done", func() bool { return b.fanoutRow(like).Status == outbox.StatusDone })
	setStatus("bob", http.StatusNotFound)
	undo, err := b.st.Undo(b.ctx, alice, like.URI)
	if err != nil {
		t.Fatal(err)
	}
	b.waitTicking("the Undo's fan-out done", func() bool { return b.fanoutRow(undo).Status == outbox.StatusDone })
	if got := postsTo(undo); !slices.Equal(got, []string{rm.actorURL("bob") + "/inbox"}) {
		t.Fatalf("the Undo of a Like delivered to bob goes to %v, want bob's inbox", got)
	}
	b.waitTicking("the Undo at bob's", func() bool { return rm.postsOf(undo.URI) > 0 })

	setStatus("carol", http.StatusNotFound)
	gone, err := b.st.Like(b.ctx, alice, rm.URL()+"/notes/carol")
	if err != nil {
		t.Fatal(err)
	}
	b.waitTicking("the second Like's fan-out done", func() bool { return b.fanoutRow(gone).Status == outbox.StatusDone })
	if got := postsTo(gone); len(got) != 0 {
		t.Fatalf("a Like of a note that answers 404 goes to %v, want nowhere", got)
	}
	setStatus("carol", 0)
	undoGone, err := b.st.Undo(b.ctx, alice, gone.URI)
	if err != nil {
		t.Fatal(err)
	}
	b.waitTicking("the second Undo's fan-out done", func() bool { return b.fanoutRow(undoGone).Status == outbox.StatusDone })
	if got := postsTo(undoGone); len(got) != 0 {
		t.Fatalf("the Undo of a Like that went nowhere goes to %v, want nowhere", got)
	}
}

// TestExhaustedFanoutHoldsNothing: on the JetStream bus a fan-out whose
// message exhausted its deliveries (workers killed while holding it) is
// relayed in its row and never marked done in the ledger. Recorded as
// exhausted (package natsbus), it is given up, and the later fan-out of its
// key goes instead of waiting for it until orderWaitMax; until then, it
// waits.
func TestExhaustedFanoutHoldsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	like, err := b.st.Like(b.ctx, alice, rm.URL()+"/notes/bob")
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := b.db.Write.ExecContext(b.ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	// As the JetStream bus leaves it: relayed, its handler's claim never
	// settled.
	now := b.clock.Now().UnixMilli()
	exec(`UPDATE event_queue SET status = 'done' WHERE event_id = ?`, like.EventID)
	exec(`INSERT INTO processed_events (event_id, handler, status, started_at) VALUES (?, ?, 'in_progress', ?)`,
		like.EventID, delivery.HandlerFanout, now)
	undo, err := b.st.Undo(b.ctx, alice, like.URI)
	if err != nil {
		t.Fatal(err)
	}
	var def *outbox.DeferError
	if err := b.handle(b.eventOf(undo)); !errors.As(err, &def) {
		t.Fatalf("the Undo's fan-out behind an unsettled Like's: %v, want a deferral", err)
	}
	exec(`INSERT INTO jetstream_exhausted (advisory_id, reason, stream, consumer, stream_seq, deliveries, event_id, event_type, advised_at, recorded_at)
		VALUES ('adv-1', 'max_deliveries', 'COURIER_EVENTS', 'workers', 7, 10, ?, ?, ?, ?)`, like.EventID, activitypub.EventOutgoing, now, now)
	if err := b.handle(b.eventOf(undo)); err != nil {
		t.Fatalf("the Undo's fan-out behind an exhausted Like's: %v, want it to go", err)
	}
}
