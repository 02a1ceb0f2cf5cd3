package inbox_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/server"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// TestFollowAcceptUndo: a Follow of a local actor stores the follower and
// enqueues an Accept whose event and activity ids derive from the inbound
// event; an Undo of the Follow removes the follower.
func TestFollowAcceptUndo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	alice := b.localActor(t, "alice", false)
	bob := b.remote.actor("bob")
	followID := b.id("follow")
	follow := activity(followID, "Follow", bob, alice.URI)
	b.mustPost(t, b.as(t, "bob"), follow)
	b.drain(t)

	if got := b.outcome(t, followID); got != inbox.OutcomeFollowed {
		t.Fatalf("outcome %q", got)
	}
	fs, total, err := b.st.Followers(b.ctx, alice.ID, store.StateAccepted, 0, 10)
	if err != nil || total != 1 || fs[0].URI != bob || fs[0].Inbox != bob+"/inbox" || fs[0].FollowActivityID != followID {
		t.Fatalf("followers %+v (%d), %v", fs, total, err)
	}
	acceptEvent := inbox.AcceptEventID(inbox.EventID(followID))
	ev := eventByID(t, b, acceptEvent)
	if ev.Type != activitypub.EventOutgoing {
		t.Fatalf("Accept event %s of type %q", acceptEvent, ev.Type)
	}
	var out activitypub.Outgoing
	if err := json.Unmarshal(ev.Payload, &out); err != nil {
		t.Fatal(err)
	}
	var accept struct {
		ID, Type, Actor string
		Object          struct{ ID, Type, Actor, Object string }
		To              []string
	}
	if err := json.Unmarshal(out.Activity, &accept); err != nil {
		t.Fatal(err)
	}
	wantID := activitypub.ActivityID(b.base, acceptEvent, "Accept")
	if accept.ID != wantID || accept.Type != "Accept" || accept.Actor != alice.URI || out.Actor != alice.URI ||
		accept.Object.ID != followID || accept.Object.Actor != bob || accept.Object.Object != alice.URI ||
		len(accept.To) != 1 || accept.To[0] != bob {
		t.Fatalf("Accept %s", out.Activity)
	}
	if _, err := b.st.ActivityByURI(b.ctx, wantID); err != nil {
		t.Fatalf("the Accept is not stored: %v", err)
	}

	undoID := b.id("undo")
	b.mustPost(t, b.as(t, "bob"), activity(undoID, "Undo", bob, activity(followID, "Follow", bob, alice.URI)))
	b.drain(t)
	if got := b.outcome(t, undoID); got != inbox.OutcomeUnfollowed {
		t.Fatalf("undo outcome %q", got)
	}
	if _, total, _ := b.st.Followers(b.ctx, alice.ID, store.StateAccepted, 0, 10); total != 0 {
		t.Fatalf("%d followers after the Undo", total)
	}
}

// TestFollowLockedActor: a manually-approving actor gets a pending follower
// and no Accept.
func TestFollowLockedActor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	locked := b.localActor(t, "locked", true)
	followID := b.id("follow")
	b.mustPost(t, b.as(t, "bob"), activity(followID, "Follow", b.remote.actor("bob"), locked.URI))
	b.drain(t)
	if got := b.outcome(t, followID); got != inbox.OutcomePending {
		t.Fatalf("outcome %q", got)
	}
	if _, total, _ := b.st.Followers(b.ctx, locked.ID, store.StatePending, 0, 10); total != 1 {
		t.Fatalf("%d pending followers", total)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ?`, activitypub.EventOutgoing); n != 0 {
		t.Fatalf("%d outgoing events for a locked actor", n)
	}
}

// TestNotesReactionsDeletes: Create, Update (older and newer), Like and
// Announce of a local note (seen in its likes and shares totalItems), their
// Undo, Delete of a note and of an actor, Accept and Reject of local
// follows, Block, and an unknown type.
func TestNotesReactionsDeletes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	b.remote.add("carol", key(t, keyRemote))
	bob, carol := b.remote.actor("bob"), b.remote.actor("carol")
	alice := b.localActor(t, "alice", false)
	asBob, asCarol := b.as(t, "bob"), b.as(t, "carol")
	// bob's notes are addressed to alice too: what concerns no one here is
	// not stored (TestIrrelevantActivitiesIgnored).
	toAlice := func(a map[string]any) map[string]any { a["cc"] = []string{alice.URI}; return a }

	// Create, then an older Update (kept out), then a newer one. Each is
	// imported before the next is posted: the worker imports concurrently,
	// and an older Update imported before its Create is stored, then
	// overwritten by the Create.
	noteID := b.remote.url("/notes/1")
	createID := b.id("create")
	b.mustPost(t, asBob, toAlice(activity(createID, "Create", bob, note(noteID, bob, map[string]any{
		"content": "v1", "updated": "2026-01-02T10:00:00Z"}))))
	b.drain(t)
	olderID, newerID := b.id("update"), b.id("update")
	b.mustPost(t, asBob, toAlice(activity(olderID, "Update", bob, note(noteID, bob, map[string]any{
		"content": "v0", "updated": "2026-01-02T09:00:00Z"}))))
	b.drain(t)
	b.mustPost(t, asBob, toAlice(activity(newerID, "Update", bob, note(noteID, bob, map[string]any{
		"content": "v2", "updated": "2026-01-02T11:00:00Z"}))))
	b.drain(t)
	o, err := b.st.ObjectByURI(b.ctx, noteID)
	if err != nil || o.Content != "v2" || o.AttributedTo != bob {
		t.Fatalf("object %+v, %v", o, err)
	}
	for id, want := range map[string]string{createID: inbox.OutcomeStored, olderID: inbox.OutcomeStale, newerID: inbox.OutcomeStored} {
		if got := b.outcome(t, id); got != want {
			t.Errorf("outcome of %s: %q, want %q", id, got, want)
		}
	}

	// Like and Announce of a local note, seen through the server's document.
	_, local, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "mine", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}
	likeID, announceID := b.id("like"), b.id("announce")
	b.mustPost(t, asBob, activity(likeID, "Like", bob, local.URI))
	b.mustPost(t, asCarol, activity(b.id("like"), "Like", carol, local.URI))
	b.mustPost(t, asBob, activity(announceID, "Announce", bob, local.URI))
	b.drain(t)
	if likes, shares := noteCounts(t, b, local.LocalID); likes != 2 || shares != 1 {
		t.Fatalf("likes %d shares %d, want 2 and 1", likes, shares)
	}
	b.mustPost(t, asBob, activity(b.id("undo"), "Undo", bob, activity(likeID, "Like", bob, local.URI)))
	b.mustPost(t, asBob, activity(b.id("undo"), "Undo", bob, announceID)) // by id only
	b.drain(t)
	if likes, shares := noteCounts(t, b, local.LocalID); likes != 1 || shares != 0 {
		t.Fatalf("after the Undos: likes %d shares %d, want 1 and 0", likes, shares)
	}

	// Delete of the note: a tombstone; a late Create does not resurrect it.
	b.mustPost(t, asBob, activity(b.id("delete"), "Delete", bob, map[string]any{"id": noteID, "type": "Tombstone"}))
	b.drain(t)
	b.mustPost(t, asBob, toAlice(activity(b.id("create"), "Create", bob, note(noteID, bob, map[string]any{
		"content": "again", "updated": "2026-05-01T00:00:00Z"}))))
	b.drain(t)
	if o, err := b.st.ObjectByURI(b.ctx, noteID); err != nil || !o.Deleted() || o.Content != "" {
		t.Fatalf("after the Delete: %+v, %v", o, err)
	}

	// Accept of alice's Follow of carol; Reject of her Follow of bob.
	fCarol, err := b.st.Follow(b.ctx, alice, carol)
	if err != nil {
		t.Fatal(err)
	}
	fBob, err := b.st.Follow(b.ctx, alice, bob)
	if err != nil {
		t.Fatal(err)
	}
	acceptID := b.id("accept")
	b.mustPost(t, asCarol, activity(acceptID, "Accept", carol, activity(fCarol.URI, "Follow", alice.URI, carol)))
	b.mustPost(t, asBob, activity(b.id("reject"), "Reject", bob, fBob.URI))
	// An Accept naming another actor's follow changes nothing.
	spoofID := b.id("accept")
	b.mustPost(t, asBob, activity(spoofID, "Accept", bob, activity(fCarol.URI, "Follow", alice.URI, carol)))
	b.drain(t)
	if st, err := b.st.FollowingState(b.ctx, alice.ID, carol); err != nil || st != store.StateAccepted {
		t.Fatalf("follow of carol: %q, %v", st, err)
	}
	if _, err := b.st.FollowingState(b.ctx, alice.ID, bob); err == nil {
		t.Fatal("the rejected follow of bob is still there")
	}
	if got := b.outcome(t, spoofID); got != inbox.OutcomeNoMatch {
		t.Fatalf("spoofed Accept: %q", got)
	}

	// carol follows alice, then blocks her: the follows both ways go.
	b.mustPost(t, asCarol, activity(b.id("follow"), "Follow", carol, alice.URI))
	b.drain(t)
	blockID := b.id("block")
	b.mustPost(t, asCarol, activity(blockID, "Block", carol, alice.URI))
	b.drain(t)
	if blocked, _ := b.st.BlockedBy(b.ctx, alice.ID, carol); !blocked {
		t.Fatal("the Block is not recorded")
	}
	if ok, _ := b.st.IsFollower(b.ctx, alice.ID, carol); ok {
		t.Fatal("carol still follows alice after blocking her")
	}
	if _, err := b.st.FollowingState(b.ctx, alice.ID, carol); err == nil {
		t.Fatal("alice still follows carol after the Block")
	}

	// An unknown type is recorded and acknowledged.
	flagID := b.id("flag")
	b.mustPost(t, asBob, activity(flagID, "Arrive", bob, local.URI))
	b.drain(t)
	if got := b.outcome(t, flagID); got != inbox.OutcomeUnsupported {
		t.Fatalf("unknown type: %q", got)
	}

	// bob follows alice, then deletes himself: his follow goes.
	b.mustPost(t, asBob, activity(b.id("follow"), "Follow", bob, alice.URI))
	b.drain(t)
	delID := b.id("delete")
	b.mustPost(t, asBob, activity(delID, "Delete", bob, bob))
	b.drain(t)
	if got := b.outcome(t, delID); got != inbox.OutcomeActorGone {
		t.Fatalf("actor Delete: %q", got)
	}
	if ok, _ := b.st.IsFollower(b.ctx, alice.ID, bob); ok {
		t.Fatal("a deleted actor still follows")
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE status = 'dead_lettered'`); n != 0 {
		t.Fatalf("%d events dead-lettered", n)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM inbox_activities WHERE imported_at IS NULL`); n != 0 {
		t.Fatalf("%d activities not imported", n)
	}
}

// noteCounts reads the likes and shares totalItems of a local note from the
// server's document, over HTTP.
func noteCounts(t *testing.T, b *testBundle, localID string) (likes, shares int) {
	t.Helper()
	srv, err := server.New(server.Config{Store: b.st})
	if err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	srv.Register(r)
	ts := httptest.NewServer(r)
	defer ts.Close()
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/objects/"+localID, nil)
	req.Header.Set("Accept", activitypub.ContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Likes, Shares struct {
			TotalItems int `json:"totalItems"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc.Likes.TotalItems, doc.Shares.TotalItems
}

// TestIdempotentFollowAndLike posts the same Follow 50 times, from several
// goroutines at once: one follower, one Accept; and the same Like 50 times:
// one like.
func TestIdempotentFollowAndLike(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	alice := b.localActor(t, "alice", false)
	bob := b.remote.actor("bob")
	_, local, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "mine", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}
	followID, likeID := b.id("follow"), b.id("like")
	follow := mustJSON(t, activity(followID, "Follow", bob, alice.URI))
	like := mustJSON(t, activity(likeID, "Like", bob, local.URI))

	const copies, senders = 50, 5
	// Sign first (signing is the slow part), then post them all at once.
	var reqs []*http.Request
	for i := range copies {
		reqs = append(reqs, b.request(t, "/inbox", follow, b.as(t, "bob")))
		path := "/inbox"
		if i%2 == 1 {
			path = "/users/alice/inbox"
		}
		reqs = append(reqs, b.request(t, path, like, b.as(t, "bob")))
	}
	statuses := make(chan int, len(reqs))
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := s; i < len(reqs); i += senders {
				status, _ := do(t, reqs[i])
				statuses <- status
			}
		})
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != http.StatusAccepted {
			t.Fatalf("status %d", s)
		}
	}
	b.drain(t)
	if got, dup := b.result(t, metrics.InboxAccepted), b.result(t, metrics.InboxDuplicate); got != 2 || dup != 2*copies-2 {
		t.Fatalf("accepted %d duplicate %d, want 2 and %d", got, dup, 2*copies-2)
	}
	if _, total, _ := b.st.Followers(b.ctx, alice.ID, store.StateAccepted, 0, 10); total != 1 {
		t.Fatalf("%d followers", total)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM activities WHERE type = 'Accept'`); n != 1 {
		t.Fatalf("%d Accept activities", n)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ? AND event_id IN
		(SELECT event_id FROM activities WHERE type = 'Accept')`, activitypub.EventOutgoing); n != 1 {
		t.Fatalf("%d outgoing Accept events", n)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ?`, inbox.EventReceived); n != 2 {
		t.Fatalf("%d inbound events", n)
	}
	if likes, _ := noteCounts(t, b, local.LocalID); likes != 1 {
		t.Fatalf("%d likes", likes)
	}
}

// TestImportTwice runs the import handler of an event again after it was
// done (a redelivery that skipped the ledger): nothing changes.
func TestImportTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	alice := b.localActor(t, "alice", false)
	followID := b.id("follow")
	b.mustPost(t, b.as(t, "bob"), activity(followID, "Follow", b.remote.actor("bob"), alice.URI))
	b.drain(t)
	ev := eventByID(t, b, inbox.EventID(followID))
	for range 3 {
		if err := b.importer.Import(b.ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.count(t, `SELECT COUNT(*) FROM activities WHERE type = 'Accept'`); n != 1 {
		t.Fatalf("%d Accepts after re-running the import", n)
	}
	// Even with the imported mark cleared (a crash between the effect and
	// the mark cannot happen, as they commit together; this forces it), the
	// Accept is the same activity and the follower the same row.
	if _, err := b.db.Write.Exec(`UPDATE inbox_activities SET imported_at = NULL WHERE activity_id = ?`, followID); err != nil {
		t.Fatal(err)
	}
	if err := b.importer.Import(b.ctx, ev); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM activities WHERE type = 'Accept'`); n != 1 {
		t.Fatalf("%d Accepts after a forced re-import", n)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM followers`); n != 1 {
		t.Fatalf("%d followers after a forced re-import", n)
	}
}

func eventByID(t *testing.T, b *testBundle, id string) outbox.Event {
	t.Helper()
	var ev outbox.Event
	var payload string
	var occurred int64
	if err := b.db.Read.QueryRow(`SELECT event_id, type, payload, occurred_at FROM event_queue_payloads WHERE event_id = ?`, id).
		Scan(&ev.ID, &ev.Type, &payload, &occurred); err != nil {
		t.Fatalf("event %s: %v", id, err)
	}
	ev.Payload, ev.OccurredAt = json.RawMessage(payload), time.UnixMilli(occurred)
	return ev
}

// TestSweep deletes imported activities older than the retention and keeps
// the rest.
func TestSweep(t *testing.T) {
	t.Parallel()
	b := setup(t, options{noWorker: true})
	b.remote.add("bob", key(t, keyRemote))
	bob := b.remote.actor("bob")
	old, fresh := b.id("like"), b.id("like")
	b.mustPost(t, b.as(t, "bob"), activity(old, "Like", bob, b.base+"/objects/x"))
	b.mustPost(t, b.as(t, "bob"), activity(fresh, "Like", bob, b.base+"/objects/x"))
	if err := b.importer.Import(b.ctx, eventByID(t, b, inbox.EventID(old))); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(inbox.DefaultRetention + time.Hour)
	im, err := inbox.NewImporter(inbox.Config{DB: b.db, Store: b.st, Resolver: b.resolver, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	n, err := im.Sweep(b.ctx)
	if err != nil || n != 1 {
		t.Fatalf("swept %d, %v; want 1", n, err)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM inbox_activities WHERE activity_id = ?`, fresh); n != 1 {
		t.Fatal("the activity not yet imported was swept")
	}
}

// TestImportOddEvents: an event whose payload is not a Received is
// dead-lettered (permanent); one naming an activity no longer recorded, or
// a recorded document that no longer parses, is acknowledged.
func TestImportOddEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, options{noWorker: true})
	err := b.importer.Import(b.ctx, outbox.Event{ID: "e1", Type: inbox.EventReceived, Payload: json.RawMessage(`[]`)})
	var perm *outbox.PermanentError
	if !errors.As(err, &perm) {
		t.Fatalf("bad payload: %v, want a permanent error", err)
	}
	gone := outbox.Event{ID: "e2", Type: inbox.EventReceived, Payload: json.RawMessage(`{"activity_id":"https://x.example/a/1"}`)}
	if err := b.importer.Import(b.ctx, gone); err != nil {
		t.Fatalf("an activity no longer recorded: %v", err)
	}
	if _, err := b.db.Write.Exec(`INSERT INTO inbox_activities (activity_id, type, actor, key_id, event_id, document, received_at)
		VALUES ('https://x.example/a/2', 'Like', 'https://x.example/u', 'k', 'e3', 'not json', 0)`); err != nil {
		t.Fatal(err)
	}
	odd := outbox.Event{ID: "e3", Type: inbox.EventReceived, Payload: json.RawMessage(`{"activity_id":"https://x.example/a/2"}`)}
	if err := b.importer.Import(b.ctx, odd); err != nil {
		t.Fatalf("an unparseable document: %v", err)
	}
	if got := b.outcome(t, "https://x.example/a/2"); got != "refused: unparseable" {
		t.Fatalf("outcome %q", got)
	}
}

// TestInboxQueriesUseIndexes checks that the queries of the inbox's table
// are served by an index, not by a scan of the recorded documents: the
// retention sweep by the partial index of imported rows, the rest by the
// primary key. On PostgreSQL, whose planner scans a table this small
// whatever its indexes, sequential scans are turned off for the question:
// the plan then names the index that can serve the query, if any.
func TestInboxQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t, options{noWorker: true})
	pkey, explain := "sqlite_autoindex_inbox_activities_1", `EXPLAIN QUERY PLAN `
	conn, err := b.db.Read.Conn(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if b.db.Postgres() {
		pkey, explain = "inbox_activities_pkey", `EXPLAIN (COSTS OFF) `
		if _, err := conn.ExecContext(b.ctx, `SET enable_seqscan = off`); err != nil {
			t.Fatal(err)
		}
		defer conn.ExecContext(b.ctx, `RESET enable_seqscan`)
	}
	for q, want := range map[string]string{
		`DELETE FROM inbox_activities WHERE imported_at IS NOT NULL AND imported_at < 1`:            "inbox_activities_imported",
		`SELECT imported_at IS NOT NULL FROM inbox_activities WHERE activity_id = 'x'`:              pkey,
		`UPDATE inbox_activities SET outcome = 'x' WHERE activity_id = 'x' AND imported_at IS NULL`: pkey,
	} {
		rows, err := conn.QueryContext(b.ctx, explain+q)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var detail string
			if b.db.Postgres() {
				err = rows.Scan(&detail)
			} else {
				var id, parent, notused int
				err = rows.Scan(&id, &parent, &notused, &detail)
			}
			if err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		s := strings.Join(plan, "; ")
		uses := strings.Contains(s, "USING INDEX "+want) || strings.Contains(s, "USING COVERING INDEX "+want)
		if b.db.Postgres() {
			uses = strings.Contains(s, "Index Scan using "+want+" ") || strings.Contains(s, "Index Only Scan using "+want+" ") ||
				strings.Contains(s, "Bitmap Index Scan on "+want)
		}
		if !uses {
			t.Errorf("%s: plan %q, want it to use %s", q, s, want)
		}
	}
}

// TestStoresEveryContentType: a Create of each content type courier
// publishes (activitypub.IsContentType: a Document and a Place among them)
// is stored when another server sends it, so what one courier publishes
// another keeps; a type that is no content (a Tombstone) is not.
func TestStoresEveryContentType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	bob, asBob := b.remote.actor("bob"), b.as(t, "bob")
	b.follow(t, b.localActor(t, "alice", false), bob)
	for _, typ := range []string{"Note", "Article", "Page", "Question", "Event", "Image", "Video", "Audio", "Document", "Place", "Tombstone"} {
		if activitypub.IsContentType(typ) != (typ != "Tombstone") {
			t.Fatalf("IsContentType(%s) = %v", typ, activitypub.IsContentType(typ))
		}
		id := b.id("create")
		b.mustPost(t, asBob, activity(id, "Create", bob, note(b.remote.url("/objects/"+typ), bob, map[string]any{"type": typ})))
		b.drain(t)
		want := inbox.OutcomeStored
		if typ == "Tombstone" {
			want = inbox.OutcomeUnsupported
		}
		if got := b.outcome(t, id); got != want {
			t.Errorf("a Create of a %s: outcome %q, want %q", typ, got, want)
		}
	}
}
