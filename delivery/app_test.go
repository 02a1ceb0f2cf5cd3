package delivery_test

import (
	"errors"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// TestLocalRecipientsInboxViews: what a local actor sends another reaches
// the recipient's inbox view without HTTP: the fan-out enqueues the inbox's
// import event, and the importer records the activity in the view in its
// transaction: a reply to its note, a direct message; the sender is not its
// own audience, and a fan-out and an import each run twice record once.
func TestLocalRecipientsInboxViews(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec, err := app.NewRecorder(app.RecorderConfig{DB: b.db, Store: b.st})
	if err != nil {
		t.Fatal(err)
	}
	im, err := inbox.NewImporter(inbox.Config{DB: b.db, Store: b.st, Resolver: b.cfg.Resolver.(inbox.Resolver), Now: b.clock.Now, App: rec})
	if err != nil {
		t.Fatal(err)
	}
	im.Register(b.reg)
	alice, bob := b.actor("alice"), b.actor("bob")
	_, note, err := notetest.Create(b.ctx, b.st, bob, notetest.Input{Content: "hello", To: []string{"as:Public"}})
	if err != nil {
		t.Fatal(err)
	}
	// A reply reaches its author where it addresses it, as clients do (cc).
	reply, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "hi bob", InReplyTo: note.URI,
		To: []string{"as:Public"}, CC: []string{bob.URI}})
	if err != nil {
		t.Fatal(err)
	}
	dm, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "psst", To: []string{bob.URI}})
	if err != nil {
		t.Fatal(err)
	}
	for _, act := range []*store.Activity{reply, dm} {
		ev := b.eventOf(act)
		for range 2 { // a handler run again after its commit
			if err := b.handle(ev); err != nil {
				t.Fatal(err)
			}
		}
		rs, err := b.queue.List(b.ctx, outbox.Filter{EventID: inbox.EventID(act.URI)})
		if err != nil || len(rs) != 1 {
			t.Fatalf("import events of %s: %+v, %v", act.URI, rs, err)
		}
		for range 2 {
			if err := b.handle(rs[0].Event); err != nil {
				t.Fatal(err)
			}
		}
	}
	rows, err := b.db.Read.Query(`SELECT actor_id, seq, activity_uri, kind FROM app_inbox_items ORDER BY actor_id, seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type item struct {
		actor, seq int64
		uri, kind  string
	}
	var got []item
	for rows.Next() {
		var it item
		if err := rows.Scan(&it.actor, &it.seq, &it.uri, &it.kind); err != nil {
			t.Fatal(err)
		}
		got = append(got, it)
	}
	want := []item{{bob.ID, 1, reply.URI, app.KindReply}, {bob.ID, 2, dm.URI, app.KindDirect}}
	if len(got) != len(want) {
		t.Fatalf("inbox items %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("item %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	var counter int64
	if err := b.db.Read.QueryRow(`SELECT seq FROM app_inbox_counters WHERE actor_id = ?`, bob.ID).Scan(&counter); err != nil || counter != 2 {
		t.Errorf("bob's counter %d (%v), want 2: a repeat gave its seq back", counter, err)
	}
}

// withApp registers the importer with the app's recorder, as cmd does, so
// that local imports fill the inbox views.
func (b *bundle) withApp() {
	b.t.Helper()
	rec, err := app.NewRecorder(app.RecorderConfig{DB: b.db, Store: b.st})
	if err != nil {
		b.t.Fatal(err)
	}
	im, err := inbox.NewImporter(inbox.Config{DB: b.db, Store: b.st, Resolver: b.cfg.Resolver.(inbox.Resolver), Now: b.clock.Now, App: rec})
	if err != nil {
		b.t.Fatal(err)
	}
	im.Register(b.reg)
}

// viewed reports whether activity uri is an item of a's inbox view.
func (b *bundle) viewed(a *store.Actor, uri string) bool {
	b.t.Helper()
	return b.count(`SELECT COUNT(*) FROM app_inbox_items WHERE actor_id = ? AND activity_uri = ?`, a.ID, uri) > 0
}

// settle waits for act's import by its local recipients and returns its
// outcome.
func (b *bundle) settle(act *store.Activity) string {
	b.t.Helper()
	waitFor(b.t, act.Type+" imported", func() bool { o, _, _ := b.imported(act.URI); return o != "" })
	o, _, _ := b.imported(act.URI)
	return o
}

// TestLocalBlock: a local actor blocks another as it would a remote one:
// the follows between them end both ways, and what the blocked actor sends
// (a direct note, a mention, a reply, a Follow) reaches no item of the
// blocker's inbox view; after the Undo it does again.
func TestLocalBlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.withApp()
	alice, bob := b.actor("alice"), b.actor("bob")
	b.startWorker(4)
	b.settle(b.mustAct(b.st.Follow(b.ctx, bob, alice.URI)))
	b.settle(b.mustAct(b.st.Follow(b.ctx, alice, bob.URI)))
	waitFor(t, "both follows accepted", func() bool {
		s1, _ := b.st.FollowingState(b.ctx, bob.ID, alice.URI)
		s2, _ := b.st.FollowingState(b.ctx, alice.ID, bob.URI)
		return s1 == store.StateAccepted && s2 == store.StateAccepted
	})
	_, aliceNote, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "mine", To: []string{activitypub.Public}})
	if err != nil {
		t.Fatal(err)
	}
	block := b.mustAct(b.st.Block(b.ctx, alice, bob.URI))
	if o := b.settle(block); o != inbox.OutcomeBlocked {
		t.Fatalf("alice's Block imported as %q", o)
	}
	if _, err := b.st.FollowingState(b.ctx, bob.ID, alice.URI); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("bob still follows alice after her block: %v", err)
	}
	if _, err := b.st.FollowingState(b.ctx, alice.ID, bob.URI); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("alice still follows bob after her block: %v", err)
	}
	for _, pair := range [][2]*store.Actor{{alice, bob}, {bob, alice}} {
		if ok, _ := b.st.IsFollower(b.ctx, pair[0].ID, pair[1].URI); ok {
			t.Fatalf("%s still a follower of %s after the block", pair[1].Name, pair[0].Name)
		}
	}
	if _, err := b.st.Block(b.ctx, alice, bob.URI); store.ErrorCode(err) != store.ECONFLICT {
		t.Fatalf("a second block: %v, want ECONFLICT", err)
	}
	if _, err := b.st.Block(b.ctx, alice, alice.URI); store.ErrorCode(err) != store.EINVALID {
		t.Fatalf("blocking oneself: %v, want EINVALID", err)
	}
	if _, err := b.st.Block(b.ctx, alice, b.st.URIs().Actor("nobody")); store.ErrorCode(err) != store.EINVALID {
		t.Fatalf("blocking a local id that is no actor: %v, want EINVALID", err)
	}
	mention := func(content string) *store.Activity {
		t.Helper()
		act, _, err := notetest.Create(b.ctx, b.st, bob, notetest.Input{Content: content, To: []string{alice.URI}})
		if err != nil {
			t.Fatal(err)
		}
		return act
	}
	dm := mention("let me in")
	reply, _, err := notetest.Create(b.ctx, b.st, bob, notetest.Input{Content: "a reply", InReplyTo: aliceNote.URI,
		To: []string{activitypub.Public, alice.URI}})
	if err != nil {
		t.Fatal(err)
	}
	follow := b.mustAct(b.st.Follow(b.ctx, bob, alice.URI))
	for _, act := range []*store.Activity{dm, reply} {
		b.settle(act)
		if b.viewed(alice, act.URI) {
			t.Fatalf("blocked bob's %s reached alice's inbox view", act.URI)
		}
	}
	if o := b.settle(follow); o != "refused: blocked" {
		t.Fatalf("blocked bob's Follow imported as %q", o)
	}
	if b.viewed(alice, follow.URI) {
		t.Fatal("blocked bob's Follow reached alice's inbox view")
	}
	undo := b.mustAct(b.st.Undo(b.ctx, alice, block.URI))
	if o := b.settle(undo); o != inbox.OutcomeUndone {
		t.Fatalf("alice's Undo of her block imported as %q", o)
	}
	if blocked, _ := b.st.BlockedBy(b.ctx, bob.ID, alice.URI); blocked {
		t.Fatal("bob is still blocked by alice after her Undo")
	}
	after := mention("hello again")
	b.settle(after)
	if !b.viewed(alice, after.URI) {
		t.Fatal("bob's note after the Undo did not reach alice's inbox view")
	}
}

// TestLocalPublicReplyReachesAuthor: a local reply addressed to the public
// alone reaches the local author of the note it replies to, as a reply item
// of the author's inbox view; a direct reply to others does not.
func TestLocalPublicReplyReachesAuthor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.withApp()
	alice, bob := b.actor("alice"), b.actor("bob")
	carol := b.actor("carol")
	b.startWorker(4)
	_, note, err := notetest.Create(b.ctx, b.st, bob, notetest.Input{Content: "hello", To: []string{activitypub.Public}})
	if err != nil {
		t.Fatal(err)
	}
	reply, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "hi bob", InReplyTo: note.URI,
		To: []string{activitypub.Public}})
	if err != nil {
		t.Fatal(err)
	}
	if o := b.settle(reply); o != inbox.OutcomeLocal {
		t.Fatalf("the reply imported as %q", o)
	}
	if n := b.count(`SELECT COUNT(*) FROM app_inbox_items WHERE actor_id = ? AND activity_uri = ? AND kind = ?`,
		bob.ID, reply.URI, app.KindReply); n != 1 {
		t.Fatalf("%d reply items of bob's for alice's public reply, want 1", n)
	}
	aside, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "about bob", InReplyTo: note.URI,
		To: []string{carol.URI}})
	if err != nil {
		t.Fatal(err)
	}
	b.settle(aside)
	if b.viewed(bob, aside.URI) {
		t.Fatal("a direct reply to carol reached bob's inbox view")
	}
}
