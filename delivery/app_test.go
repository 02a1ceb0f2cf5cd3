package delivery_test

import (
	"testing"

	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
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
	_, note, err := b.st.CreateNote(b.ctx, bob, store.NoteInput{Content: "hello", To: []string{"as:Public"}})
	if err != nil {
		t.Fatal(err)
	}
	// A reply reaches its author where it addresses it, as clients do (cc).
	reply, _, err := b.st.CreateNote(b.ctx, alice, store.NoteInput{Content: "hi bob", InReplyTo: note.URI,
		To: []string{"as:Public"}, CC: []string{bob.URI}})
	if err != nil {
		t.Fatal(err)
	}
	dm, _, err := b.st.CreateNote(b.ctx, alice, store.NoteInput{Content: "psst", To: []string{bob.URI}})
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
		rs, err := b.queue.List(b.ctx, outbox.Filter{EventID: delivery.ReceivedEventID(act.URI)})
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
