package store

import (
	"crypto/rsa"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// The tests of this file run two writes that clash side by side, each
// through a store of its own on its own pool over one database, as two
// servers sharing one PostgreSQL do (and two processes sharing one SQLite
// file). Each pair runs for several rounds, so that on PostgreSQL, where
// write transactions run side by side at READ COMMITTED, the two overlap;
// each round checks the outcome: one winner, a clear error for the other,
// nothing half-written.

// clashRounds is how many times each pair runs.
const clashRounds = 12

// setupPair opens one new store twice, on two pools: the second bundle
// shares the first's database and clock.
func setupPair(t *testing.T) (*testBundle, *testBundle) {
	t.Helper()
	loc := storetest.Location(t)
	open := func(clock *testClock) *testBundle {
		db := storetest.Open(t, loc, storetest.Options{Synchronous: "NORMAL"})
		st := New(db, testBase+"/", clock.Now)
		st.newKey = func() (*rsa.PrivateKey, error) { return testKey() }
		return &testBundle{ctx: t.Context(), db: db, store: st, clock: clock}
	}
	clock := &testClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	return open(clock), open(clock)
}

// clash runs f and g at the same moment and returns their errors.
func clash(f, g func() error) (error, error) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	var ef, eg error
	wg.Add(2)
	go func() { defer wg.Done(); <-start; ef = f() }()
	go func() { defer wg.Done(); <-start; eg = g() }()
	close(start)
	wg.Wait()
	return ef, eg
}

// oneWinner checks that exactly one of e1, e2 is nil and the other is
// the store error want; it returns 1 or 2, the winner.
func oneWinner(t *testing.T, round int, e1, e2 error, want *Error) int {
	t.Helper()
	switch {
	case e1 == nil && errors.Is(e2, want):
		return 1
	case e2 == nil && errors.Is(e1, want):
		return 2
	}
	t.Fatalf("round %d: errors %v and %v, want one nil and one %s", round, e1, e2, want.Code)
	return 0
}

// outgoing counts the outgoing events of activity type typ.
func (b *testBundle) outgoing(t *testing.T, typ string) int {
	t.Helper()
	return b.count(t, `SELECT COUNT(*) FROM activities a JOIN event_queue e ON e.event_id = a.event_id WHERE a.type = ?`, typ)
}

func TestClashCreateActorSameName(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	for i := range clashRounds {
		name := fmt.Sprintf("taken%d", i)
		e1, e2 := clash(func() error {
			_, _, err := b1.store.CreateActor(b1.ctx, NewActor{Name: name})
			return err
		}, func() error {
			_, _, err := b2.store.CreateActor(b2.ctx, NewActor{Name: name})
			return err
		})
		oneWinner(t, i, e1, e2, ErrConflict)
		if n := b1.count(t, `SELECT COUNT(*) FROM actors WHERE name = ?`, name); n != 1 {
			t.Fatalf("round %d: %d actors named %s", i, n, name)
		}
	}
}

func TestClashDeleteActor(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	for i := range clashRounds {
		name := fmt.Sprintf("gone%d", i)
		b1.actor(t, name)
		e1, e2 := clash(func() error {
			_, err := b1.store.DeleteActor(b1.ctx, name)
			return err
		}, func() error {
			_, err := b2.store.DeleteActor(b2.ctx, name)
			return err
		})
		oneWinner(t, i, e1, e2, ErrNotFound)
	}
	if n := b1.outgoing(t, "Delete"); n != clashRounds {
		t.Fatalf("%d Deletes enqueued for %d deleted actors", n, clashRounds)
	}
}

// TestClashUpdateAndDeleteActor: a profile update beside the actor's
// deletion either lands before it or is refused; no Update follows the
// Delete.
func TestClashUpdateAndDeleteActor(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	updates := 0
	for i := range clashRounds {
		name := fmt.Sprintf("edited%d", i)
		b1.actor(t, name)
		display := "New name"
		e1, e2 := clash(func() error {
			_, _, err := b1.store.UpdateActor(b1.ctx, name, ActorUpdate{DisplayName: &display})
			return err
		}, func() error {
			_, err := b2.store.DeleteActor(b2.ctx, name)
			return err
		})
		if e2 != nil || (e1 != nil && !errors.Is(e1, ErrNotFound)) {
			t.Fatalf("round %d: update %v, delete %v", i, e1, e2)
		}
		if e1 == nil {
			updates++
		}
		var update, del sql.NullInt64
		if err := b1.db.Write.QueryRowContext(b1.ctx, `SELECT
			(SELECT MAX(e.id) FROM activities a JOIN event_queue e ON e.event_id = a.event_id WHERE a.type = 'Update' AND a.object_uri = ?),
			(SELECT MAX(e.id) FROM activities a JOIN event_queue e ON e.event_id = a.event_id WHERE a.type = 'Delete' AND a.object_uri = ?)`,
			b1.store.URIs().Actor(name), b1.store.URIs().Actor(name)).Scan(&update, &del); err != nil {
			t.Fatal(err)
		}
		if update.Valid != (e1 == nil) || !del.Valid || (update.Valid && update.Int64 > del.Int64) {
			t.Fatalf("round %d: Update event %v, Delete event %v (update error %v)", i, update, del, e1)
		}
	}
	t.Logf("%d of %d updates landed before the deletion", updates, clashRounds)
}

// TestClashApproveAndReject: approving and rejecting one pending follow
// request at once answers it consistently: the rejection always wins the
// end state (a Reject of an accepted follower removes it, as Mastodon
// does), and the approval either came first (an Accept, then the Reject)
// or finds the request gone (ENOTFOUND, no Accept).
func TestClashApproveAndReject(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	a := b1.actor(t, "alice")
	approved := 0
	for i := range clashRounds {
		follower := fmt.Sprintf("https://remote.test/users/f%d", i)
		if err := b1.store.Tx(b1.ctx, func(tx *sql.Tx) error {
			_, err := b1.store.AddFollowerTx(b1.ctx, tx, Follower{ActorID: a.ID, URI: follower,
				Inbox: follower + "/inbox", FollowActivityID: follower + "/follow", State: StatePending})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		e1, e2 := clash(func() error {
			_, err := b1.store.ApproveFollower(b1.ctx, a, follower)
			return err
		}, func() error {
			_, err := b2.store.RejectFollower(b2.ctx, a, follower)
			return err
		})
		if e2 != nil || (e1 != nil && !errors.Is(e1, ErrNotFound)) {
			t.Fatalf("round %d: approve %v, reject %v", i, e1, e2)
		}
		if e1 == nil {
			approved++
		}
		if rows := b1.count(t, `SELECT COUNT(*) FROM followers WHERE actor_id = ? AND follower_uri = ?`, a.ID, follower); rows != 0 {
			t.Fatalf("round %d: %d rows after the Reject", i, rows)
		}
	}
	if acc, rej := b1.outgoing(t, "Accept"), b1.outgoing(t, "Reject"); acc != approved || rej != clashRounds {
		t.Fatalf("%d Accepts and %d Rejects for %d approvals of %d requests", acc, rej, approved, clashRounds)
	}
}

// TestClashUndo: one Like undone twice at once is undone once.
func TestClashUndo(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	a := b1.actor(t, "alice")
	for i := range clashRounds {
		like, err := b1.store.Like(b1.ctx, a, fmt.Sprintf("https://remote.test/notes/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		e1, e2 := clash(func() error {
			_, err := b1.store.Undo(b1.ctx, a, like.URI)
			return err
		}, func() error {
			_, err := b2.store.Undo(b2.ctx, a, like.URI)
			return err
		})
		oneWinner(t, i, e1, e2, ErrConflict)
	}
	if n := b1.outgoing(t, "Undo"); n != clashRounds {
		t.Fatalf("%d Undos enqueued for %d Likes", n, clashRounds)
	}
	if n := b1.count(t, `SELECT COUNT(*) FROM reactions`); n != 0 {
		t.Fatalf("%d reactions left", n)
	}
}

// TestClashLike: the same Like sent twice at once is recorded and
// enqueued once; the other is ECONFLICT.
func TestClashLike(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	a := b1.actor(t, "alice")
	for i := range clashRounds {
		note := fmt.Sprintf("https://remote.test/notes/%d", i)
		e1, e2 := clash(func() error {
			_, err := b1.store.Like(b1.ctx, a, note)
			return err
		}, func() error {
			_, err := b2.store.Like(b2.ctx, a, note)
			return err
		})
		oneWinner(t, i, e1, e2, ErrConflict)
	}
	if n := b1.outgoing(t, "Like"); n != clashRounds {
		t.Fatalf("%d Likes enqueued for %d objects", n, clashRounds)
	}
}

// TestClashFollowAndBlock: following and blocking one remote actor at
// once never leaves both a follow and a block.
func TestClashFollowAndBlock(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	a := b1.actor(t, "alice")
	for i := range clashRounds {
		target := fmt.Sprintf("https://remote.test/users/t%d", i)
		e1, e2 := clash(func() error {
			_, err := b1.store.Follow(b1.ctx, a, target)
			return err
		}, func() error {
			_, err := b2.store.Block(b2.ctx, a, target)
			return err
		})
		if e2 != nil || (e1 != nil && !errors.Is(e1, ErrConflict)) {
			t.Fatalf("round %d: follow %v, block %v", i, e1, e2)
		}
		if n := b1.count(t, `SELECT COUNT(*) FROM following WHERE actor_id = ? AND target_uri = ?`, a.ID, target); n != 0 {
			t.Fatalf("round %d: a follow of %s beside the block (follow error %v)", i, target, e1)
		}
	}
}

// TestClashInboundFollowAndBlock: an inbound Follow from a remote actor
// (imported as the inbox does: the block checked, then the follower
// added, in one transaction) beside the local actor's Block of it never
// leaves both a follower and a block.
func TestClashInboundFollowAndBlock(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	a := b1.actor(t, "alice")
	for i := range clashRounds {
		follower := fmt.Sprintf("https://remote.test/users/f%d", i)
		e1, e2 := clash(func() error {
			return b1.store.Tx(b1.ctx, func(tx *sql.Tx) error {
				blocked, err := b1.store.BlocksTx(b1.ctx, tx, a.ID, follower)
				if err != nil || blocked {
					return err
				}
				_, err = b1.store.AddFollowerTx(b1.ctx, tx, Follower{ActorID: a.ID, URI: follower, Inbox: follower + "/inbox"})
				return err
			})
		}, func() error {
			_, err := b2.store.Block(b2.ctx, a, follower)
			return err
		})
		if e1 != nil || e2 != nil {
			t.Fatalf("round %d: inbound follow %v, block %v", i, e1, e2)
		}
		if n := b1.count(t, `SELECT COUNT(*) FROM followers WHERE actor_id = ? AND follower_uri = ?`, a.ID, follower); n != 0 {
			t.Fatalf("round %d: a follower %s beside the block", i, follower)
		}
	}
}

// TestClashUpdateAndDeleteNote: editing a note while it is deleted never
// brings its content back: the note ends a tombstone.
func TestClashUpdateAndDeleteNote(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	a := b1.actor(t, "alice")
	for i := range clashRounds {
		_, o, err := createNote(b1.ctx, b1.store, a, noteInput{Content: "first", To: []string{Public}})
		if err != nil {
			t.Fatal(err)
		}
		e1, e2 := clash(func() error {
			_, _, err := updateNote(b1.ctx, b1.store, a, o.URI, noteInput{Content: "edited"})
			return err
		}, func() error {
			_, err := b2.store.DeleteObject(b2.ctx, a, o.URI)
			return err
		})
		if e2 != nil || (e1 != nil && !errors.Is(e1, ErrGone)) {
			t.Fatalf("round %d: update %v, delete %v", i, e1, e2)
		}
		got, err := b1.store.ObjectByURI(b1.ctx, o.URI)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Deleted() || got.Content != "" || len(got.Document) != 0 {
			t.Fatalf("round %d: after update (%v) and delete: type %s, content %q, document %q", i, e1, got.Type, got.Content, got.Document)
		}
	}
	if n := b1.outgoing(t, "Delete"); n != clashRounds {
		t.Fatalf("%d Deletes for %d notes", n, clashRounds)
	}
}

// TestClashUpsertRemoteObject: two imports of one new remote object at
// once both succeed and store it once; a Delete of it beside a Create
// leaves a tombstone whichever lands first.
func TestClashUpsertRemoteObject(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	author := "https://remote.test/users/bob"
	obj := func(uri string, updated time.Time) RemoteObject {
		doc := fmt.Sprintf(`{"id":%q,"type":"Note","attributedTo":%q,"content":"hi","to":["%s"]}`, uri, author, activitypub.Public)
		return RemoteObject{URI: uri, Type: "Note", AttributedTo: author, Content: "hi", To: []string{activitypub.Public},
			Updated: updated, Document: []byte(doc)}
	}
	upsert := func(b *testBundle, o RemoteObject) func() error {
		return func() error {
			return b.store.Tx(b.ctx, func(tx *sql.Tx) error {
				_, err := b.store.UpsertRemoteObjectTx(b.ctx, tx, o)
				return err
			})
		}
	}
	tombstone := func(b *testBundle, uri string) func() error {
		return func() error {
			return b.store.Tx(b.ctx, func(tx *sql.Tx) error {
				_, err := b.store.TombstoneTx(b.ctx, tx, uri, author)
				return err
			})
		}
	}
	for i := range clashRounds {
		uri := fmt.Sprintf("https://remote.test/notes/n%d", i)
		at := time.Date(2026, 11, 30, 12, 0, i, 0, time.UTC)
		e1, e2 := clash(upsert(b1, obj(uri, at)), upsert(b2, obj(uri, at.Add(time.Second))))
		if e1 != nil || e2 != nil {
			t.Fatalf("round %d: upserts %v, %v", i, e1, e2)
		}
		o, err := b1.store.ObjectByURI(b1.ctx, uri)
		if err != nil || !o.Updated.Equal(at.Add(time.Second)) {
			t.Fatalf("round %d: stored %+v, %v; want the newer version", i, o, err)
		}

		gone := fmt.Sprintf("https://remote.test/notes/g%d", i)
		e1, e2 = clash(upsert(b1, obj(gone, at)), tombstone(b2, gone))
		if e1 != nil || e2 != nil {
			t.Fatalf("round %d: create %v, delete %v", i, e1, e2)
		}
		o, err = b1.store.ObjectByURI(b1.ctx, gone)
		if err != nil || !o.Deleted() || o.Content != "" {
			t.Fatalf("round %d: after a create and a delete: %+v, %v", i, o, err)
		}
	}
	if n := b1.count(t, `SELECT COUNT(*) FROM objects`); n != 2*clashRounds {
		t.Fatalf("%d objects for %d uris", n, 2*clashRounds)
	}
}

// TestClashEnqueueEventActivity: an inbound event's answer (its id
// derived from the event) built twice at once is stored and enqueued once.
func TestClashEnqueueEventActivity(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	a := b1.actor(t, "alice")
	for i := range clashRounds {
		eventID := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		follower := fmt.Sprintf("https://remote.test/users/f%d", i)
		var fresh [2]bool
		build := func(b *testBundle, k int) func() error {
			return func() error {
				return b.store.Tx(b.ctx, func(tx *sql.Tx) error {
					_, isNew, err := b.store.EnqueueEventActivityTx(b.ctx, tx, eventID, time.Time{}, a, "Accept",
						FollowObject(follower+"/follow", follower, a.URI), []string{follower}, nil)
					fresh[k] = isNew
					return err
				})
			}
		}
		e1, e2 := clash(build(b1, 0), build(b2, 1))
		if e1 != nil || e2 != nil || fresh[0] == fresh[1] {
			t.Fatalf("round %d: %v, %v; new %v", i, e1, e2, fresh)
		}
	}
	if n := b1.outgoing(t, "Accept"); n != clashRounds {
		t.Fatalf("%d Accepts enqueued for %d events", n, clashRounds)
	}
}

// TestClashRelays: adding one relay twice at once adds it once; removing
// it twice at once enqueues one Undo.
func TestClashRelays(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	for i := range clashRounds {
		relay := fmt.Sprintf("https://relay%d.test/inbox", i)
		e1, e2 := clash(func() error {
			_, err := b1.store.AddRelay(b1.ctx, relay)
			return err
		}, func() error {
			_, err := b2.store.AddRelay(b2.ctx, relay)
			return err
		})
		oneWinner(t, i, e1, e2, ErrConflict)
		e1, e2 = clash(func() error {
			_, err := b1.store.RemoveRelay(b1.ctx, relay)
			return err
		}, func() error {
			_, err := b2.store.RemoveRelay(b2.ctx, relay)
			return err
		})
		oneWinner(t, i, e1, e2, ErrNotFound)
	}
	if n := b1.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ?`, EventRelaySend); n != 2*clashRounds {
		t.Fatalf("%d relay sends for %d follows and %d undos", n, clashRounds, clashRounds)
	}
}

// TestClashAnnounceAndRemoteDelete: a local Announce of a remote note
// beside the import of the note's Delete is refused (EGONE), or lands
// first and is then withdrawn with its reaction.
func TestClashAnnounceAndRemoteDelete(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	a := b1.actor(t, "alice")
	author := "https://remote.test/users/bob"
	landed := 0
	for i := range clashRounds {
		uri := fmt.Sprintf("https://remote.test/notes/a%d", i)
		doc := fmt.Sprintf(`{"id":%q,"type":"Note","attributedTo":%q,"content":"hi","to":["%s"]}`, uri, author, activitypub.Public)
		if err := b1.store.Tx(b1.ctx, func(tx *sql.Tx) error {
			_, err := b1.store.UpsertRemoteObjectTx(b1.ctx, tx, RemoteObject{URI: uri, AttributedTo: author, Content: "hi",
				To: []string{activitypub.Public}, Document: []byte(doc)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var announce *Activity
		e1, e2 := clash(func() error {
			var err error
			announce, err = b1.store.Announce(b1.ctx, a, uri)
			return err
		}, func() error {
			return b2.store.Tx(b2.ctx, func(tx *sql.Tx) error {
				_, err := b2.store.TombstoneTx(b2.ctx, tx, uri, author)
				return err
			})
		})
		if e2 != nil || (e1 != nil && !errors.Is(e1, ErrGone)) {
			t.Fatalf("round %d: announce %v, delete %v", i, e1, e2)
		}
		if n := b1.count(t, `SELECT COUNT(*) FROM reactions WHERE object_uri = ?`, uri); n != 0 {
			t.Fatalf("round %d: %d reactions to a deleted note (announce error %v)", i, n, e1)
		}
		if e1 == nil {
			landed++
			if got, err := b1.store.ActivityByURI(b1.ctx, announce.URI); err != nil || got.WithdrawnAt.IsZero() {
				t.Fatalf("round %d: the Announce of a deleted note is still in the outbox (%v)", i, err)
			}
		}
	}
	t.Logf("%d of %d Announces landed before the Delete", landed, clashRounds)
}

// TestClashLikeOfUnknownObjectAndItsDelete: a local Like of a remote
// object courier has not stored, beside that object's Delete imported from
// its author: either the Like is refused as gone, or it was recorded first
// and the Delete removed it and withdrew the Like from the outbox; never a
// reaction to a tombstone.
func TestClashLikeOfUnknownObjectAndItsDelete(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	a := b1.actor(t, "alice")
	const author = "https://remote.test/users/carol"
	refused := 0
	for i := range clashRounds {
		uri := fmt.Sprintf("https://remote.test/notes/unknown-%d", i)
		e1, e2 := clash(func() error {
			_, err := b1.store.Like(b1.ctx, a, uri)
			return err
		}, func() error {
			return b2.store.Tx(b2.ctx, func(tx *sql.Tx) error {
				_, err := b2.store.TombstoneTx(b2.ctx, tx, uri, author)
				return err
			})
		})
		if e2 != nil {
			t.Fatalf("round %d: delete: %v", i, e2)
		}
		switch {
		case errors.Is(e1, &Error{Code: EGONE}):
			refused++
		case e1 != nil:
			t.Fatalf("round %d: like: %v", i, e1)
		}
		if n := b1.count(t, `SELECT COUNT(*) FROM reactions WHERE object_uri = ?`, uri); n != 0 {
			t.Fatalf("round %d: %d reactions to a deleted object", i, n)
		}
		if n := b1.count(t, `SELECT COUNT(*) FROM activities WHERE object_uri = ? AND type = 'Like' AND withdrawn_at IS NULL`, uri); n != 0 {
			t.Fatalf("round %d: a Like of a deleted object is still to be delivered", i)
		}
	}
	t.Logf("%d of %d Likes refused as gone, the rest removed by the Delete", refused, clashRounds)
}

// TestClashInboundFollowAndDeleteActor: a remote Follow of a local actor,
// imported as the inbox does (the actor read, the block checked, the
// follower added, the Accept enqueued), beside the actor's deletion: the
// Follow is refused as of an unknown actor, or it committed before the
// deletion, so that the Delete (enqueued after the Accept) reaches the new
// follower too. Never an Accept from an actor already deleted.
func TestClashInboundFollowAndDeleteActor(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	refused := 0
	for i := range clashRounds {
		name := fmt.Sprintf("dora%d", i)
		a := b1.actor(t, name)
		follower := fmt.Sprintf("https://remote.test/users/f%d", i)
		followID := fmt.Sprintf("https://remote.test/follows/%d", i)
		e1, e2 := clash(func() error {
			return b1.store.Tx(b1.ctx, func(tx *sql.Tx) error {
				local, err := b1.store.ActorByURITx(b1.ctx, tx, a.URI)
				if err != nil {
					return err
				}
				if _, err := b1.store.BlocksTx(b1.ctx, tx, local.ID, follower); err != nil {
					return err
				}
				if _, err := b1.store.AddFollowerTx(b1.ctx, tx, Follower{ActorID: local.ID, URI: follower,
					Inbox: follower + "/inbox", FollowActivityID: followID, State: StateAccepted}); err != nil {
					return err
				}
				_, _, err = b1.store.EnqueueEventActivityTx(b1.ctx, tx, b1.store.newEvent().ID, b1.clock.Now(), local, "Accept",
					FollowObject(followID, follower, local.URI), []string{follower}, nil)
				return err
			})
		}, func() error {
			_, err := b2.store.DeleteActor(b2.ctx, name)
			return err
		})
		if e2 != nil {
			t.Fatalf("round %d: delete: %v", i, e2)
		}
		if e1 != nil {
			if !errors.Is(e1, &Error{Code: ENOTFOUND}) {
				t.Fatalf("round %d: follow: %v", i, e1)
			}
			refused++
			continue
		}
		var accept, del int64
		for typ, id := range map[string]*int64{"Accept": &accept, "Delete": &del} {
			if err := b1.db.Read.QueryRow(`SELECT q.id FROM activities a JOIN event_queue q ON q.event_id = a.event_id
				WHERE a.actor_id = ? AND a.type = ?`, a.ID, typ).Scan(id); err != nil {
				t.Fatalf("round %d: the %s's outbox row: %v", i, typ, err)
			}
		}
		if accept > del {
			t.Fatalf("round %d: the Accept was enqueued after the actor's Delete (rows %d, %d)", i, accept, del)
		}
	}
	t.Logf("%d of %d Follows refused, the rest accepted before the deletion", refused, clashRounds)
}

// TestClashInboundLikeAndDeleteNote: a remote Like of a local note,
// imported as the inbox does (the note read in the transaction, the
// reaction added when it is not deleted), beside the note's deletion
// leaves no reaction to the tombstone.
func TestClashInboundLikeAndDeleteNote(t *testing.T) {
	t.Parallel()
	b1, b2 := setupPair(t)
	a := b1.actor(t, "alice")
	for i := range clashRounds {
		_, note, err := createNote(b1.ctx, b1.store, a, noteInput{Content: "liked", To: []string{Public}})
		if err != nil {
			t.Fatal(err)
		}
		e1, e2 := clash(func() error {
			return b1.store.Tx(b1.ctx, func(tx *sql.Tx) error {
				o, err := b1.store.ObjectByURITx(b1.ctx, tx, note.URI)
				if err != nil || o.Deleted() {
					return err
				}
				_, err = b1.store.AddReactionTx(b1.ctx, tx, Reaction{ActivityURI: fmt.Sprintf("https://remote.test/likes/%d", i),
					Type: ReactionLike, ActorURI: "https://remote.test/users/bob", ObjectURI: o.URI})
				return err
			})
		}, func() error {
			_, err := b2.store.DeleteObject(b2.ctx, a, note.URI)
			return err
		})
		if e1 != nil || e2 != nil {
			t.Fatalf("round %d: like %v, delete %v", i, e1, e2)
		}
		if n := b1.count(t, `SELECT COUNT(*) FROM reactions WHERE object_uri = ?`, note.URI); n != 0 {
			t.Fatalf("round %d: %d reactions to a deleted note", i, n)
		}
	}
}
