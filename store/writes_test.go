package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/sqldb"
)

const remoteActor = "https://remote.test/users/bob"

func TestCreateObjectStoresDataAndEventTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	u := b.store.URIs()
	act, o, err := createNote(b.ctx, b.store, a, noteInput{
		Content: "<p>hello & <b>world</b></p>", Summary: "cw", Sensitive: true,
		To: []string{"as:Public"}, CC: []string{u.Followers("alice"), remoteActor, u.Followers("alice")},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.checkOutgoing(t, act, "Create")
	if out.Actor != a.URI {
		t.Fatalf("outgoing actor %s", out.Actor)
	}
	if o.URI != activitypub.ObjectID(testBase, act.EventID) || o.URI != u.Object(o.LocalID) {
		t.Fatalf("object id %s not derived from event %s", o.URI, act.EventID)
	}
	got, err := b.store.ObjectByLocalID(b.ctx, o.LocalID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Content != "<p>hello & <b>world</b></p>" || got.Visibility != VisibilityPublic || got.ActorID != a.ID ||
		strings.Join(got.To, ",") != Public || len(got.CC) != 2 {
		t.Fatalf("stored %+v", got)
	}
	parsed, err := activitypub.ParseActivity(act.Document)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Object == nil || parsed.Object.ID != o.URI || parsed.Object.Content != got.Content ||
		parsed.Object.AttributedTo[0] != a.URI || !parsed.Object.Sensitive || parsed.Object.Summary != "cw" {
		t.Fatalf("embedded note %+v", parsed.Object)
	}
	if !act.Public || act.ObjectURI != o.URI {
		t.Fatalf("activity %+v", act)
	}
	// The note's own document is the embedded one, byte for byte.
	var embedded struct {
		Object json.RawMessage `json:"object"`
	}
	_ = json.Unmarshal(act.Document, &embedded)
	if string(embedded.Object) != string(got.Document) {
		t.Fatalf("embedded %s\nstored %s", embedded.Object, got.Document)
	}
}

func TestVisibility(t *testing.T) {
	t.Parallel()
	f := testBase + "/users/alice/followers"
	for _, tc := range []struct {
		to, cc []string
		want   string
	}{
		{[]string{Public}, []string{f}, VisibilityPublic},
		{[]string{"as:Public"}, nil, VisibilityPublic},
		{[]string{f}, []string{Public}, VisibilityUnlisted},
		{[]string{f}, nil, VisibilityFollowers},
		{nil, []string{f, remoteActor}, VisibilityFollowers},
		{[]string{remoteActor}, nil, VisibilityDirect},
		{nil, nil, VisibilityDirect},
	} {
		if got := Visibility(tc.to, tc.cc, f); got != tc.want {
			t.Errorf("Visibility(%v, %v) = %s, want %s", tc.to, tc.cc, got, tc.want)
		}
	}
}

func TestCreateObjectValidates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	// An object needs a type; that a note needs content (or an
	// attachment) is the outbox's rule (server's TestC2SBadInput).
	if _, _, err := b.store.CreateObject(b.ctx, a, ObjectInput{Content: "x", To: []string{Public}}); ErrorCode(err) != EINVALID {
		t.Errorf("no type: %v, want invalid", err)
	}
	for name, in := range map[string]noteInput{
		"no audience":  {Content: "x"},
		"bad audience": {Content: "x", To: []string{"mailto:x@y"}},
		"relative":     {Content: "x", To: []string{"/users/bob"}},
		"bad reply":    {Content: "x", To: []string{Public}, InReplyTo: "nope"},
		"invalid utf8": {Content: "\xff", To: []string{Public}},
	} {
		if _, _, err := createNote(b.ctx, b.store, a, in); ErrorCode(err) != EINVALID {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
	// Content is bounded as an object's document is (1 MiB), and what
	// courier cannot carry is EUNPROCESSABLE; 60,000 characters pass.
	if _, _, err := createNote(b.ctx, b.store, a, noteInput{Content: strings.Repeat("x", MaxContentLen+1), To: []string{Public}}); ErrorCode(err) != EUNPROCESSABLE {
		t.Errorf("content over the bound: %v, want unprocessable", err)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue`) + b.count(t, `SELECT COUNT(*) FROM objects`); n != 0 {
		t.Fatalf("rejected writes left %d rows", n)
	}
	if _, _, err := createNote(b.ctx, b.store, a, noteInput{Content: strings.Repeat("é", 60_000), To: []string{Public}}); err != nil {
		t.Errorf("60,000 characters of content: %v", err)
	}
}

// failOn creates a trigger that aborts every insert into table, so a test
// can force one half of a write to fail.
func (b *testBundle) failOn(t *testing.T, table string) {
	t.Helper()
	failOn(t, b.ctx, b.db, table)
}

// failOn creates a trigger on db that aborts every insert into table with
// the message "forced failure"; the trigger is written in each store's
// dialect.
func failOn(t *testing.T, ctx context.Context, db *sqldb.DB, table string) {
	t.Helper()
	stmts := []string{`CREATE TRIGGER fail_` + table + ` BEFORE INSERT ON ` + table +
		` BEGIN SELECT RAISE(ABORT, 'forced failure'); END`}
	if db.Postgres() {
		stmts = []string{
			`CREATE FUNCTION fail_` + table + `() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN RAISE EXCEPTION 'forced failure'; END $$`,
			`CREATE TRIGGER fail_` + table + ` BEFORE INSERT ON ` + table +
				` FOR EACH ROW EXECUTE FUNCTION fail_` + table + `()`,
		}
	}
	for _, q := range stmts {
		if _, err := db.Write.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriteRollsBackWhenEnqueueFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	b.failOn(t, "event_queue")
	_, _, err := createNote(b.ctx, b.store, a, noteInput{Content: "x", To: []string{Public}})
	if err == nil || !strings.Contains(err.Error(), "forced failure") {
		t.Fatalf("CreateObject = %v, want the enqueue failure", err)
	}
	if _, err := b.store.Follow(b.ctx, a, remoteActor); err == nil {
		t.Fatal("Follow succeeded without its event")
	}
	if _, err := b.store.Like(b.ctx, a, "https://remote.test/notes/1"); err == nil {
		t.Fatal("Like succeeded without its event")
	}
	for _, table := range []string{"objects", "activities", "following", "reactions", "event_queue"} {
		if n := b.count(t, `SELECT COUNT(*) FROM `+table); n != 0 {
			t.Errorf("%s has %d rows after failed enqueues", table, n)
		}
	}
}

func TestEnqueueRolledBackWhenDataFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	b.failOn(t, "objects")
	if _, _, err := createNote(b.ctx, b.store, a, noteInput{Content: "x", To: []string{Public}}); err == nil {
		t.Fatal("CreateObject succeeded")
	}
	b.failOn(t, "activities")
	if _, err := b.store.Follow(b.ctx, a, remoteActor); err == nil {
		t.Fatal("Follow succeeded")
	}
	for _, table := range []string{"objects", "activities", "following", "event_queue"} {
		if n := b.count(t, `SELECT COUNT(*) FROM `+table); n != 0 {
			t.Errorf("%s has %d rows after failed writes", table, n)
		}
	}
}

func TestUpdateAndDeleteObject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	other := b.actor(t, "mallory")
	_, o, err := createNote(b.ctx, b.store, a, noteInput{Content: "v1", To: []string{b.store.URIs().Followers("alice")}})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Minute)
	if _, _, err := updateNote(b.ctx, b.store, other, o.URI, noteInput{Content: "hijack"}); !errors.Is(err, ErrForbidden) {
		t.Fatalf("update by another actor: %v", err)
	}
	// An Update naming no recipients keeps the audience.
	up, o2, err := updateNote(b.ctx, b.store, a, o.URI, noteInput{Content: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, up, "Update")
	if o2.Content != "v2" || o2.Visibility != VisibilityFollowers || !o2.Updated.Equal(b.clock.Now()) ||
		strings.Join(o2.To, ",") != b.store.URIs().Followers("alice") || len(o2.CC) != 0 {
		t.Fatalf("updated %+v (audience must not change)", o2)
	}
	if up.Public {
		t.Fatal("Update of a followers-only note is public")
	}
	p, _ := activitypub.ParseActivity(up.Document)
	if p.Object.Content != "v2" || p.Object.Updated.IsZero() || p.Object.ID != o.URI {
		t.Fatalf("Update object %+v", p.Object)
	}
	// One naming an actor (newly mentioned) adds it and keeps the rest;
	// the note stays followers-only.
	up, o2, err = updateNote(b.ctx, b.store, a, o.URI, noteInput{Content: "v2, @bob", CC: []string{remoteActor}})
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, up, "Update")
	if strings.Join(o2.To, ",") != b.store.URIs().Followers("alice") || strings.Join(o2.CC, ",") != remoteActor || up.Public {
		t.Fatalf("updated audience %v %v (public %v), want the followers and bob", o2.To, o2.CC, up.Public)
	}
	if got, _ := b.store.ObjectByURI(b.ctx, o.URI); got.Visibility != VisibilityFollowers || strings.Join(got.CC, ",") != remoteActor {
		t.Fatalf("stored %+v", got)
	}
	// One naming the public (or another collection) would widen the
	// audience of a followers-only note: refused, nothing changed.
	for _, wider := range []string{Public, "as:Public", "https://remote.example/users/carol/followers"} {
		if _, _, err := updateNote(b.ctx, b.store, a, o.URI, noteInput{Content: "now for everyone", To: []string{wider}}); ErrorCode(err) != EUNPROCESSABLE {
			t.Fatalf("an Update addressed to %s: %v, want EUNPROCESSABLE", wider, err)
		}
	}
	if got, _ := b.store.ObjectByURI(b.ctx, o.URI); got.Content == "now for everyone" || slices.ContainsFunc(got.To, activitypub.IsPublic) {
		t.Fatalf("a refused Update changed the note: %+v", got)
	}

	if _, err := b.store.DeleteObject(b.ctx, other, o.URI); !errors.Is(err, ErrForbidden) {
		t.Fatalf("delete by another actor: %v", err)
	}
	del, err := b.store.DeleteObject(b.ctx, a, o.URI)
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, del, "Delete")
	var doc struct {
		Object TombstoneDocument `json:"object"`
		To     []string          `json:"to"`
	}
	if err := json.Unmarshal(del.Document, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Object.Type != "Tombstone" || doc.Object.FormerType != "Note" || doc.Object.ID != o.URI || doc.Object.Deleted == "" ||
		len(doc.To) != 1 || doc.To[0] != b.store.URIs().Followers("alice") {
		t.Fatalf("Delete %s", del.Document)
	}
	got, err := b.store.ObjectByURI(b.ctx, o.URI)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Deleted() || got.FormerType != "Note" || got.Content != "" || len(got.Document) != 0 {
		t.Fatalf("tombstone %+v", got)
	}
	if _, err := b.store.DeleteObject(b.ctx, a, o.URI); !errors.Is(err, ErrGone) {
		t.Fatalf("second delete: %v", err)
	}
	if _, _, err := updateNote(b.ctx, b.store, a, o.URI, noteInput{Content: "v3"}); !errors.Is(err, ErrGone) {
		t.Fatalf("update after delete: %v", err)
	}
	if n, _ := b.store.CountLocalNotes(b.ctx); n != 0 {
		t.Fatalf("%d local notes after delete", n)
	}
}

func TestFollowAndAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	f, err := b.store.Follow(b.ctx, a, remoteActor)
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, f, "Follow")
	if f.ObjectURI != remoteActor || f.Public {
		t.Fatalf("Follow %+v", f)
	}
	if st, _ := b.store.FollowingState(b.ctx, a.ID, remoteActor); st != StatePending {
		t.Fatalf("state %q", st)
	}
	// A pending follow is not sent twice: the second names the first.
	var ex *ExistingError
	if _, err := b.store.Follow(b.ctx, a, remoteActor); !errors.Is(err, ErrConflict) || !errors.As(err, &ex) || ex.ID != f.URI {
		t.Fatalf("follow while pending: %v", err)
	}
	f2 := f
	// An answer from someone else, or for the old Follow, changes nothing.
	b.tx(t, func(tx *sql.Tx) error {
		n, err := b.store.SetFollowingStateTx(b.ctx, tx, FollowingRef{Target: "https://evil.test/users/eve", FollowActivityID: f2.URI}, StateAccepted)
		if n != 0 || err != nil {
			t.Errorf("foreign accept: %d, %v", n, err)
		}
		n, err = b.store.SetFollowingStateTx(b.ctx, tx, FollowingRef{Target: remoteActor, FollowActivityID: f.URI + "-old"}, StateAccepted)
		if n != 0 || err != nil {
			t.Errorf("stale accept: %d, %v", n, err)
		}
		n, err = b.store.SetFollowingStateTx(b.ctx, tx, FollowingRef{Target: remoteActor, LocalActor: a.URI}, StateAccepted)
		if n != 1 || err != nil {
			t.Errorf("accept: %d, %v", n, err)
		}
		return nil
	})
	if st, _ := b.store.FollowingState(b.ctx, a.ID, remoteActor); st != StateAccepted {
		t.Fatalf("state %q", st)
	}
	if _, err := b.store.Follow(b.ctx, a, remoteActor); !errors.Is(err, ErrConflict) || !errors.As(err, &ex) || ex.ID != f.URI {
		t.Fatalf("follow again: %v", err)
	}
	fs, total, err := b.store.FollowingOf(b.ctx, a.ID, 0, 10)
	if err != nil || total != 1 || fs[0].TargetURI != remoteActor || fs[0].FollowActivityID != f2.URI {
		t.Fatalf("FollowingOf = %+v, %d, %v", fs, total, err)
	}
	// Oneself, unknown local actors and malformed targets are refused; a
	// blocked domain is forbidden.
	if _, err := b.store.Follow(b.ctx, a, testBase+"/users/alice"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("follow oneself: %v", err)
	}
	if _, err := b.store.Follow(b.ctx, a, testBase+"/users/nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("follow an unknown local actor: %v", err)
	}
	if _, err := b.store.Follow(b.ctx, a, "not a url"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("follow garbage: %v", err)
	}
	if err := b.store.AddDomainBlock(b.ctx, "blocked.test", "spam"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Follow(b.ctx, a, "https://sub.blocked.test/users/x"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("follow blocked domain: %v", err)
	}
	// Reject removes the follow.
	b.tx(t, func(tx *sql.Tx) error {
		n, err := b.store.SetFollowingStateTx(b.ctx, tx, FollowingRef{Target: remoteActor, FollowActivityID: f2.URI}, StateRejected)
		if n != 1 {
			t.Errorf("reject changed %d", n)
		}
		return err
	})
	if _, err := b.store.FollowingState(b.ctx, a.ID, remoteActor); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after reject: %v", err)
	}
}

func TestReactionsAndUndo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	carol := b.actor(t, "carol")
	const remoteNote = "https://remote.test/notes/1"
	b.tx(t, func(tx *sql.Tx) error {
		_, err := b.store.UpsertRemoteObjectTx(b.ctx, tx, RemoteObject{
			URI: remoteNote, AttributedTo: remoteActor, Content: "hi", To: []string{Public},
			Document: json.RawMessage(`{"id":"` + remoteNote + `","type":"Note"}`),
		})
		return err
	})
	like, err := b.store.Like(b.ctx, a, remoteNote)
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, like, "Like")
	p, _ := activitypub.ParseActivity(like.Document)
	if len(p.To) != 1 || p.To[0] != remoteActor || like.Public {
		t.Fatalf("Like addressed %v (public %v), want the author only", p.To, like.Public)
	}
	if _, err := b.store.Like(b.ctx, a, remoteNote); !errors.Is(err, ErrConflict) {
		t.Fatalf("second like: %v", err)
	}
	ann, err := b.store.Announce(b.ctx, a, remoteNote)
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, ann, "Announce")
	p, _ = activitypub.ParseActivity(ann.Document)
	if !ann.Public || p.To[0] != Public || len(p.Cc) != 2 {
		t.Fatalf("Announce to %v cc %v", p.To, p.Cc)
	}
	if likes, shares, _ := b.store.ReactionCounts(b.ctx, remoteNote); likes != 1 || shares != 1 {
		t.Fatalf("counts %d %d", likes, shares)
	}
	// A followers-only note cannot be announced.
	_, private, err := createNote(b.ctx, b.store, carol, noteInput{Content: "p", To: []string{b.store.URIs().Followers("carol")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Announce(b.ctx, a, private.URI); !errors.Is(err, ErrForbidden) {
		t.Fatalf("announce private: %v", err)
	}

	// Undo: by another actor forbidden; by id; by (type, object); twice is a conflict.
	if _, err := b.store.Undo(b.ctx, carol, like.URI); !errors.Is(err, ErrForbidden) {
		t.Fatalf("undo by another actor: %v", err)
	}
	undo, err := b.store.Undo(b.ctx, a, like.URI)
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, undo, "Undo")
	up, _ := activitypub.ParseActivity(undo.Document)
	if up.Object == nil || up.Object.ID != like.URI || up.Object.Type != "Like" || up.Object.ObjectID != remoteNote || up.To[0] != remoteActor {
		t.Fatalf("Undo %s", undo.Document)
	}
	if _, err := b.store.Undo(b.ctx, a, like.URI); !errors.Is(err, ErrConflict) {
		t.Fatalf("second undo: %v", err)
	}
	id, err := b.store.ActiveActivity(b.ctx, a, "Announce", remoteNote)
	if err != nil || id != ann.URI {
		t.Fatalf("ActiveActivity = %q, %v", id, err)
	}
	if _, err := b.store.Undo(b.ctx, a, id); err != nil {
		t.Fatal(err)
	}
	if likes, shares, _ := b.store.ReactionCounts(b.ctx, remoteNote); likes != 0 || shares != 0 {
		t.Fatalf("counts after undo %d %d", likes, shares)
	}
	// Undoing a Create is not supported.
	create, _, err := createNote(b.ctx, b.store, a, noteInput{Content: "x", To: []string{Public}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Undo(b.ctx, a, create.URI); !errors.Is(err, ErrUnprocessable) {
		t.Fatalf("undo create: %v", err)
	}
	// After Undo of a Like, liking again works.
	if _, err := b.store.Like(b.ctx, a, remoteNote); err != nil {
		t.Fatalf("like after undo: %v", err)
	}
}

func TestBlockSeversAndUndo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	if _, err := b.store.Follow(b.ctx, a, remoteActor); err != nil {
		t.Fatal(err)
	}
	b.tx(t, func(tx *sql.Tx) error {
		_, err := b.store.AddFollowerTx(b.ctx, tx, Follower{ActorID: a.ID, URI: remoteActor, Inbox: remoteActor + "/inbox"})
		return err
	})
	blk, err := b.store.Block(b.ctx, a, remoteActor)
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, blk, "Block")
	if ok, _ := b.store.Blocks(b.ctx, a.ID, remoteActor); !ok {
		t.Fatal("block not recorded")
	}
	if n := b.count(t, `SELECT COUNT(*) FROM followers`) + b.count(t, `SELECT COUNT(*) FROM following`); n != 0 {
		t.Fatalf("block left %d follow rows", n)
	}
	if _, err := b.store.Block(b.ctx, a, remoteActor); !errors.Is(err, ErrConflict) {
		t.Fatalf("second block: %v", err)
	}
	if _, err := b.store.Follow(b.ctx, a, remoteActor); !errors.Is(err, ErrConflict) {
		t.Fatalf("follow a blocked actor: %v", err)
	}
	undo, err := b.store.Undo(b.ctx, a, blk.URI)
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, undo, "Undo")
	if ok, _ := b.store.Blocks(b.ctx, a.ID, remoteActor); ok {
		t.Fatal("block still recorded after undo")
	}
}

func TestUndoFollow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	f, err := b.store.Follow(b.ctx, a, remoteActor)
	if err != nil {
		t.Fatal(err)
	}
	id, err := b.store.ActiveActivity(b.ctx, a, "Follow", remoteActor)
	if err != nil || id != f.URI {
		t.Fatalf("ActiveActivity = %q, %v", id, err)
	}
	u, err := b.store.Undo(b.ctx, a, f.URI)
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, u, "Undo")
	if _, err := b.store.FollowingState(b.ctx, a.ID, remoteActor); !errors.Is(err, ErrNotFound) {
		t.Fatalf("following after undo: %v", err)
	}
	if _, err := b.store.ActiveActivity(b.ctx, a, "Follow", remoteActor); !errors.Is(err, ErrNotFound) {
		t.Fatalf("active after undo: %v", err)
	}
}

func TestUpdateActorEnqueuesUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	name := "Alice Two"
	got, act, err := b.store.UpdateActor(b.ctx, "alice", ActorUpdate{DisplayName: &name, RotateKey: true})
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, act, "Update")
	if got.DisplayName != name || act.ObjectURI != a.URI || !act.Public {
		t.Fatalf("actor %+v activity %+v", got, act)
	}
	p, _ := activitypub.ParseActivity(act.Document)
	person, err := activitypub.ParseActor(p.ObjectRaw)
	if err != nil || person.Name != name || person.PublicKey.ID != a.URI+"#main-key" {
		t.Fatalf("Update object %+v, %v", person, err)
	}
	long := strings.Repeat("s", MaxSummaryLen+1)
	if _, _, err := b.store.UpdateActor(b.ctx, "alice", ActorUpdate{Summary: &long}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("long summary: %v", err)
	}
	if _, _, err := b.store.UpdateActor(b.ctx, "nobody", ActorUpdate{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown actor: %v", err)
	}
}

func TestApproveAndRejectFollower(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, _, err := b.store.CreateActor(b.ctx, NewActor{Name: "alice", ManuallyApprovesFollowers: true})
	if err != nil {
		t.Fatal(err)
	}
	const followID = "https://remote.test/follows/1"
	b.tx(t, func(tx *sql.Tx) error {
		for _, uri := range []string{remoteActor, "https://remote.test/users/carl"} {
			if _, err := b.store.AddFollowerTx(b.ctx, tx, Follower{ActorID: a.ID, URI: uri, Inbox: uri + "/inbox",
				FollowActivityID: followID, State: StatePending}); err != nil {
				return err
			}
		}
		return nil
	})
	if in, _ := b.store.FollowerInboxes(b.ctx, a.ID); len(in) != 0 {
		t.Fatalf("pending followers get deliveries: %v", in)
	}
	acc, err := b.store.ApproveFollower(b.ctx, a, remoteActor)
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, acc, "Accept")
	p, _ := activitypub.ParseActivity(acc.Document)
	if p.Object.ID != followID || p.Object.Actor != remoteActor || p.Object.ObjectID != a.URI || p.To[0] != remoteActor {
		t.Fatalf("Accept %s", acc.Document)
	}
	if ok, _ := b.store.IsFollower(b.ctx, a.ID, remoteActor); !ok {
		t.Fatal("not accepted")
	}
	if _, err := b.store.ApproveFollower(b.ctx, a, remoteActor); !errors.Is(err, ErrConflict) {
		t.Fatalf("approve twice: %v", err)
	}
	rej, err := b.store.RejectFollower(b.ctx, a, "https://remote.test/users/carl")
	if err != nil {
		t.Fatal(err)
	}
	b.checkOutgoing(t, rej, "Reject")
	if _, total, _ := b.store.Followers(b.ctx, a.ID, StatePending, 0, 10); total != 0 {
		t.Fatalf("%d pending after reject", total)
	}
}
