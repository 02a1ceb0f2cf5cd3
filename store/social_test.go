package store

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

func (b *testBundle) tx(t *testing.T, fn func(tx *sql.Tx) error) {
	t.Helper()
	if err := b.store.Tx(b.ctx, fn); err != nil {
		t.Fatal(err)
	}
}

func TestFollowerInboxesDeduplicatesSharedInboxes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	other := b.actor(t, "other")
	b.tx(t, func(tx *sql.Tx) error {
		for _, f := range []Follower{
			// Three followers on one host share its inbox: one delivery.
			{URI: "https://masto.test/users/a", Inbox: "https://masto.test/users/a/inbox", SharedInbox: "https://masto.test/inbox"},
			{URI: "https://masto.test/users/b", Inbox: "https://masto.test/users/b/inbox", SharedInbox: "https://masto.test/inbox"},
			{URI: "https://masto.test/users/c", Inbox: "https://masto.test/users/c/inbox", SharedInbox: "https://masto.test/inbox"},
			// No shared inbox: their own inboxes.
			{URI: "https://small.test/u/d", Inbox: "https://small.test/u/d/inbox"},
			{URI: "https://small.test/u/e", Inbox: "https://small.test/u/e/inbox"},
			// Pending, and on a blocked domain: none.
			{URI: "https://pending.test/u/f", Inbox: "https://pending.test/u/f/inbox", State: StatePending},
			{URI: "https://x.spam.test/u/g", Inbox: "https://x.spam.test/u/g/inbox"},
		} {
			f.ActorID = a.ID
			if _, err := b.store.AddFollowerTx(b.ctx, tx, f); err != nil {
				return err
			}
		}
		// Another actor's follower is not alice's.
		_, err := b.store.AddFollowerTx(b.ctx, tx, Follower{ActorID: other.ID, URI: "https://o.test/u", Inbox: "https://o.test/u/inbox"})
		return err
	})
	if err := b.store.AddDomainBlock(b.ctx, "SPAM.test.", "spam"); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.FollowerInboxes(b.ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://masto.test/inbox", "https://small.test/u/d/inbox", "https://small.test/u/e/inbox"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("FollowerInboxes = %v, want %v", got, want)
	}
	// Adding a known follower again refreshes it and is not new; accepted
	// is never downgraded to pending.
	b.tx(t, func(tx *sql.Tx) error {
		isNew, err := b.store.AddFollowerTx(b.ctx, tx, Follower{ActorID: a.ID, URI: "https://small.test/u/d",
			Inbox: "https://small.test/u/d/inbox2", State: StatePending})
		if isNew {
			t.Error("known follower reported new")
		}
		return err
	})
	if ok, _ := b.store.IsFollower(b.ctx, a.ID, "https://small.test/u/d"); !ok {
		t.Fatal("accepted follower downgraded")
	}
	fs, total, err := b.store.Followers(b.ctx, a.ID, StateAccepted, 0, 100)
	if err != nil || total != 6 || len(fs) != 6 {
		t.Fatalf("Followers = %d of %d, %v", len(fs), total, err)
	}
}

func TestRemoveFollowerEverywhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gone := "https://dead.test/users/x"
	ids := []int64{b.actor(t, "a1").ID, b.actor(t, "a2").ID}
	if err := b.store.PutRemoteActor(b.ctx, &activitypub.Actor{ID: gone, Inbox: gone + "/inbox"}, []byte(`{"id":"`+gone+`"}`), b.clock.Now()); err != nil {
		t.Fatal(err)
	}
	b.tx(t, func(tx *sql.Tx) error {
		for _, id := range ids {
			for _, uri := range []string{gone, "https://alive.test/users/y"} {
				if _, err := b.store.AddFollowerTx(b.ctx, tx, Follower{ActorID: id, URI: uri, Inbox: uri + "/inbox"}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	n, err := b.store.RemoveFollowerEverywhere(b.ctx, gone)
	if err != nil || n != 2 {
		t.Fatalf("RemoveFollowerEverywhere = %d, %v", n, err)
	}
	for _, id := range ids {
		in, _ := b.store.FollowerInboxes(b.ctx, id)
		if !reflect.DeepEqual(in, []string{"https://alive.test/users/y/inbox"}) {
			t.Fatalf("inboxes of %d: %v", id, in)
		}
	}
	if isGone, at, _ := b.store.RemoteActorGone(b.ctx, gone); !isGone || !at.Equal(b.clock.Now()) {
		t.Fatalf("gone %v at %v", isGone, at)
	}
	b.tx(t, func(tx *sql.Tx) error {
		removed, err := b.store.RemoveFollowerTx(b.ctx, tx, ids[0], "https://alive.test/users/y")
		if !removed {
			t.Error("RemoveFollowerTx removed nothing")
		}
		return err
	})
}

func TestUpsertRemoteObjectKeepsNewest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const uri = "https://remote.test/notes/1"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	put := func(content string, updated time.Time) (bool, error) {
		var changed bool
		err := b.store.Tx(b.ctx, func(tx *sql.Tx) error {
			var err error
			changed, err = b.store.UpsertRemoteObjectTx(b.ctx, tx, RemoteObject{
				URI: uri, AttributedTo: remoteActor, Content: content, Published: t0, Updated: updated,
				To: []string{remoteActor + "/followers"}, Document: json.RawMessage(`{"content":"` + content + `"}`),
			})
			return err
		})
		return changed, err
	}
	for i, step := range []struct {
		content string
		updated time.Time
		changed bool
		stored  string
	}{
		{"v1", time.Time{}, true, "v1"},
		{"v3", t0.Add(3 * time.Hour), true, "v3"},
		{"v2", t0.Add(2 * time.Hour), false, "v3"}, // older: ignored
		{"v0", time.Time{}, false, "v3"},           // no updated, older than v3
		{"v3b", t0.Add(3 * time.Hour), true, "v3b"},
	} {
		changed, err := put(step.content, step.updated)
		if err != nil || changed != step.changed {
			t.Fatalf("step %d: changed %v, %v; want %v", i, changed, err, step.changed)
		}
		o, err := b.store.ObjectByURI(b.ctx, uri)
		if err != nil || o.Content != step.stored {
			t.Fatalf("step %d: stored %+v, %v; want %s", i, o, err, step.stored)
		}
		if o.Visibility != VisibilityFollowers || o.Local() {
			t.Fatalf("step %d: %+v", i, o)
		}
	}
	// Another actor cannot overwrite it, nor delete it.
	err := b.store.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.store.UpsertRemoteObjectTx(b.ctx, tx, RemoteObject{URI: uri, AttributedTo: "https://remote.test/users/eve",
			Content: "x", Updated: t0.Add(9 * time.Hour), Document: json.RawMessage(`{}`)})
		return err
	})
	if !errors.Is(err, ErrForbidden) {
		t.Fatalf("overwrite by another actor: %v", err)
	}
	err = b.store.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.store.TombstoneTx(b.ctx, tx, uri, "https://remote.test/users/eve")
		return err
	})
	if !errors.Is(err, ErrForbidden) {
		t.Fatalf("delete by another actor: %v", err)
	}
	// Deleted by its author: a later Create does not resurrect it.
	b.tx(t, func(tx *sql.Tx) error {
		changed, err := b.store.TombstoneTx(b.ctx, tx, uri, remoteActor)
		if !changed {
			t.Error("tombstone changed nothing")
		}
		return err
	})
	if changed, err := put("zombie", t0.Add(99*time.Hour)); err != nil || changed {
		t.Fatalf("resurrection: %v, %v", changed, err)
	}
	// A Delete that arrives before its Create leaves a tombstone.
	const early = "https://remote.test/notes/early"
	b.tx(t, func(tx *sql.Tx) error {
		_, err := b.store.TombstoneTx(b.ctx, tx, early, remoteActor)
		return err
	})
	b.tx(t, func(tx *sql.Tx) error {
		changed, err := b.store.UpsertRemoteObjectTx(b.ctx, tx, RemoteObject{URI: early, AttributedTo: remoteActor, Content: "late", Document: json.RawMessage(`{}`)})
		if changed {
			t.Error("late Create resurrected an early Delete")
		}
		return err
	})
	// Local objects are not the inbox's to change.
	a := b.actor(t, "alice")
	_, local, err := createNote(b.ctx, b.store, a, noteInput{Content: "mine", To: []string{Public}})
	if err != nil {
		t.Fatal(err)
	}
	err = b.store.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.store.UpsertRemoteObjectTx(b.ctx, tx, RemoteObject{URI: local.URI, AttributedTo: a.URI, Content: "x", Document: json.RawMessage(`{}`)})
		return err
	})
	if !errors.Is(err, ErrForbidden) {
		t.Fatalf("overwrite local: %v", err)
	}
}

func TestDeleteActorContent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	_, note, err := createNote(b.ctx, b.store, a, noteInput{Content: "mine", To: []string{Public}})
	if err != nil {
		t.Fatal(err)
	}
	b.tx(t, func(tx *sql.Tx) error {
		for i := range 3 {
			uri := fmt.Sprintf("https://remote.test/notes/%d", i)
			if _, err := b.store.UpsertRemoteObjectTx(b.ctx, tx, RemoteObject{URI: uri, AttributedTo: remoteActor, Content: "x", Document: json.RawMessage(`{}`)}); err != nil {
				return err
			}
		}
		if _, err := b.store.AddFollowerTx(b.ctx, tx, Follower{ActorID: a.ID, URI: remoteActor, Inbox: remoteActor + "/inbox"}); err != nil {
			return err
		}
		_, err := b.store.AddReactionTx(b.ctx, tx, Reaction{ActivityURI: "https://remote.test/likes/1", Type: ReactionLike, ActorURI: remoteActor, ObjectURI: note.URI})
		return err
	})
	if likes, _, _ := b.store.ReactionCounts(b.ctx, note.URI); likes != 1 {
		t.Fatalf("likes %d", likes)
	}
	b.tx(t, func(tx *sql.Tx) error {
		n, err := b.store.DeleteActorContentTx(b.ctx, tx, remoteActor)
		if n != 3 {
			t.Errorf("tombstoned %d, want 3", n)
		}
		return err
	})
	if n := b.count(t, `SELECT COUNT(*) FROM objects WHERE deleted_at IS NULL`); n != 1 {
		t.Fatalf("%d live objects, want only the local one", n)
	}
	if likes, _, _ := b.store.ReactionCounts(b.ctx, note.URI); likes != 0 {
		t.Fatalf("likes %d after actor deletion", likes)
	}
	if ok, _ := b.store.IsFollower(b.ctx, a.ID, remoteActor); ok {
		t.Fatal("deleted actor still follows")
	}
}

func TestReactionRemovalOnlyByItsActor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const obj = "https://courier.test/objects/x"
	r := Reaction{ActivityURI: "https://remote.test/likes/1", Type: ReactionLike, ActorURI: remoteActor, ObjectURI: obj}
	b.tx(t, func(tx *sql.Tx) error {
		for range 2 { // a redelivered Like counts once
			if _, err := b.store.AddReactionTx(b.ctx, tx, r); err != nil {
				return err
			}
		}
		_, err := b.store.AddReactionTx(b.ctx, tx, Reaction{ActivityURI: "https://remote.test/ann/1", Type: ReactionAnnounce, ActorURI: remoteActor, ObjectURI: obj})
		return err
	})
	if l, s, _ := b.store.ReactionCounts(b.ctx, obj); l != 1 || s != 1 {
		t.Fatalf("counts %d %d", l, s)
	}
	b.tx(t, func(tx *sql.Tx) error {
		removed, err := b.store.RemoveReactionTx(b.ctx, tx, Reaction{ActivityURI: r.ActivityURI, ActorURI: "https://remote.test/users/eve"})
		if removed {
			t.Error("another actor removed the like")
		}
		if err != nil {
			return err
		}
		// By type and object when the Undo does not name the Like's id.
		removed, err = b.store.RemoveReactionTx(b.ctx, tx, Reaction{Type: ReactionLike, ObjectURI: obj, ActorURI: remoteActor})
		if !removed {
			t.Error("like not removed")
		}
		return err
	})
	if l, s, _ := b.store.ReactionCounts(b.ctx, obj); l != 0 || s != 1 {
		t.Fatalf("counts %d %d", l, s)
	}
}

func TestIncomingBlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	if _, err := b.store.Follow(b.ctx, a, remoteActor); err != nil {
		t.Fatal(err)
	}
	b.tx(t, func(tx *sql.Tx) error {
		isNew, err := b.store.AddIncomingBlockTx(b.ctx, tx, a.ID, remoteActor, "https://remote.test/blocks/1")
		if !isNew {
			t.Error("block not new")
		}
		return err
	})
	if by, _ := b.store.BlockedBy(b.ctx, a.ID, remoteActor); !by {
		t.Fatal("incoming block not recorded")
	}
	if blocks, _ := b.store.Blocks(b.ctx, a.ID, remoteActor); blocks {
		t.Fatal("incoming block counted as outgoing")
	}
	if _, err := b.store.FollowingState(b.ctx, a.ID, remoteActor); !errors.Is(err, ErrNotFound) {
		t.Fatalf("follow survived the block: %v", err)
	}
	b.tx(t, func(tx *sql.Tx) error {
		removed, err := b.store.RemoveIncomingBlockTx(b.ctx, tx, a.ID, remoteActor)
		if !removed {
			t.Error("block not removed")
		}
		return err
	})
}

func TestDomainBlocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.store.AddDomainBlock(b.ctx, "https://Bad.Example:8443/some/path", "first"); err != nil {
		t.Fatal(err)
	}
	if err := b.store.AddDomainBlock(b.ctx, "bad.example", "updated"); err != nil {
		t.Fatal(err)
	}
	if err := b.store.AddDomainBlock(b.ctx, "no such/domain", ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad domain: %v", err)
	}
	list, err := b.store.DomainBlocks(b.ctx)
	if err != nil || len(list) != 1 || list[0].Domain != "bad.example" || list[0].Reason != "updated" {
		t.Fatalf("DomainBlocks = %+v, %v", list, err)
	}
	for host, want := range map[string]bool{
		"bad.example":                     true,
		"BAD.EXAMPLE:443":                 true,
		"deep.sub.bad.example":            true,
		"https://x.bad.example/users/bob": true,
		"notbad.example":                  false,
		"example":                         false,
		"bad.example.org":                 false,
		"":                                false,
	} {
		if got, err := b.store.IsDomainBlocked(b.ctx, host); err != nil || got != want {
			t.Errorf("IsDomainBlocked(%q) = %v, %v; want %v", host, got, err, want)
		}
	}
	if err := b.store.RemoveDomainBlock(b.ctx, "BAD.example"); err != nil {
		t.Fatal(err)
	}
	if err := b.store.RemoveDomainBlock(b.ctx, "bad.example"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove twice: %v", err)
	}
}

func TestRemoteActorCache(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got, at, err := b.store.GetRemoteActor(b.ctx, remoteActor)
	if got != nil || !at.IsZero() || err != nil {
		t.Fatalf("missing actor = %v, %v, %v", got, at, err)
	}
	raw := []byte(`{"@context":"https://www.w3.org/ns/activitystreams","id":"` + remoteActor + `","type":"Person",
		"inbox":"` + remoteActor + `/inbox","endpoints":{"sharedInbox":"https://remote.test/inbox"},
		"publicKey":{"id":"` + remoteActor + `#main-key","owner":"` + remoteActor + `","publicKeyPem":"PEM"}}`)
	a, err := activitypub.ParseActor(raw)
	if err != nil {
		t.Fatal(err)
	}
	fetched := b.clock.Now().Add(-time.Hour)
	if err := b.store.PutRemoteActor(b.ctx, a, raw, fetched); err != nil {
		t.Fatal(err)
	}
	got, at, err = b.store.GetRemoteActor(b.ctx, remoteActor)
	if err != nil || !at.Equal(fetched) || got.SharedInbox != "https://remote.test/inbox" || got.PublicKey.PublicKeyPem != "PEM" {
		t.Fatalf("GetRemoteActor = %+v, %v, %v", got, at, err)
	}
	var key string
	if err := b.db.Write.QueryRowContext(b.ctx, `SELECT key_id FROM remote_actors WHERE uri = ?`, remoteActor).Scan(&key); err != nil || key != remoteActor+"#main-key" {
		t.Fatalf("key_id %q, %v", key, err)
	}
	if err := b.store.PutRemoteActor(b.ctx, &activitypub.Actor{ID: remoteActor}, nil, fetched); !errors.Is(err, ErrInvalid) {
		t.Fatalf("actor without inbox: %v", err)
	}
}

func TestOutboxPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	var public []*Activity
	for i := range 7 {
		act, _, err := createNote(b.ctx, b.store, a, noteInput{Content: fmt.Sprint(i), To: []string{Public}})
		if err != nil {
			t.Fatal(err)
		}
		public = append(public, act)
		// A private note and a Like between them, not in the public view.
		if _, _, err := createNote(b.ctx, b.store, a, noteInput{Content: "p", To: []string{remoteActor}}); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Second)
	}
	// A deleted note's Create leaves the outbox; its public Delete is listed.
	if _, err := b.store.DeleteObject(b.ctx, a, public[6].ObjectURI); err != nil {
		t.Fatal(err)
	}
	uris := func(p *Page) []string {
		var out []string
		for _, it := range p.Items {
			out = append(out, it.Type+":"+it.URI)
		}
		return out
	}
	want := func(acts ...*Activity) []string {
		var out []string
		for _, a := range acts {
			out = append(out, a.Type+":"+a.URI)
		}
		return out
	}
	p1, err := b.store.OutboxPage(b.ctx, a.ID, PageQuery{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if p1.Total != 7 || len(p1.Items) != 3 || p1.Items[0].Type != "Delete" || p1.Prev != 0 || p1.Next == 0 {
		t.Fatalf("page 1: total %d %v prev %d next %d", p1.Total, uris(p1), p1.Prev, p1.Next)
	}
	if !reflect.DeepEqual(uris(p1)[1:], want(public[5], public[4])) {
		t.Fatalf("page 1 %v", uris(p1))
	}
	p2, err := b.store.OutboxPage(b.ctx, a.ID, PageQuery{Limit: 3, Before: p1.Next})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(uris(p2), want(public[3], public[2], public[1])) || p2.Prev == 0 || p2.Next == 0 {
		t.Fatalf("page 2 %v prev %d next %d", uris(p2), p2.Prev, p2.Next)
	}
	p3, err := b.store.OutboxPage(b.ctx, a.ID, PageQuery{Limit: 3, Before: p2.Next})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(uris(p3), want(public[0])) || p3.Next != 0 || p3.Prev == 0 {
		t.Fatalf("page 3 %v next %d", uris(p3), p3.Next)
	}
	back, err := b.store.OutboxPage(b.ctx, a.ID, PageQuery{Limit: 3, After: p3.Prev})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(uris(back), uris(p2)) {
		t.Fatalf("prev of page 3 %v, want page 2 %v", uris(back), uris(p2))
	}
	own, err := b.store.OutboxPage(b.ctx, a.ID, PageQuery{Limit: 100, IncludePrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	if own.Total != 14 || len(own.Items) != 14 || own.Next != 0 {
		t.Fatalf("owner view: total %d, %d items", own.Total, len(own.Items))
	}
}

func TestDeletedRemoteNoteLeavesTheOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	notes := []string{"https://remote.test/notes/a", "https://remote.test/notes/b"}
	b.tx(t, func(tx *sql.Tx) error {
		for _, uri := range notes {
			if _, err := b.store.UpsertRemoteObjectTx(b.ctx, tx, RemoteObject{URI: uri, AttributedTo: remoteActor,
				Content: "x", To: []string{Public}, Document: json.RawMessage(`{}`)}); err != nil {
				return err
			}
		}
		return nil
	})
	for _, uri := range notes {
		if _, err := b.store.Announce(b.ctx, a, uri); err != nil {
			t.Fatal(err)
		}
	}
	total := func() int {
		p, err := b.store.OutboxPage(b.ctx, a.ID, PageQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Total
	}
	if n := total(); n != 2 {
		t.Fatalf("outbox %d, want 2 announces", n)
	}
	b.tx(t, func(tx *sql.Tx) error {
		_, err := b.store.TombstoneTx(b.ctx, tx, notes[0], remoteActor)
		return err
	})
	if n := total(); n != 1 {
		t.Fatalf("outbox %d after the note's Delete, want 1", n)
	}
	b.tx(t, func(tx *sql.Tx) error {
		_, err := b.store.DeleteActorContentTx(b.ctx, tx, remoteActor)
		return err
	})
	if n := total(); n != 0 {
		t.Fatalf("outbox %d after the author's Delete, want 0", n)
	}
	if _, shares, _ := b.store.ReactionCounts(b.ctx, notes[1]); shares != 0 {
		t.Fatalf("%d shares of a deleted actor's note", shares)
	}
}

// TestLocalFollowersOfTx: the local actors whose follow of a remote actor
// is accepted, by id; not a pending follow, not a deleted actor, not a
// follow of another actor.
func TestLocalFollowersOfTx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice, bob, carol, dave := b.actor(t, "alice"), b.actor(t, "bob"), b.actor(t, "carol"), b.actor(t, "dave")
	for _, a := range []*Actor{alice, bob, carol, dave} {
		if _, err := b.store.Follow(b.ctx, a, remoteActor); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.store.Follow(b.ctx, alice, "https://remote.test/users/other"); err != nil {
		t.Fatal(err)
	}
	b.tx(t, func(tx *sql.Tx) error {
		for _, a := range []*Actor{alice, bob, dave} { // carol's stays pending
			if _, err := b.store.SetFollowingStateTx(b.ctx, tx, FollowingRef{Target: remoteActor, LocalActor: a.URI}, StateAccepted); err != nil {
				return err
			}
		}
		_, err := b.store.SetFollowingStateTx(b.ctx, tx, FollowingRef{Target: "https://remote.test/users/other", LocalActor: alice.URI}, StateAccepted)
		return err
	})
	if _, err := b.store.DeleteActor(b.ctx, "dave"); err != nil {
		t.Fatal(err)
	}
	var got []LocalFollow
	b.tx(t, func(tx *sql.Tx) error {
		var err error
		got, err = b.store.LocalFollowersOfTx(b.ctx, tx, remoteActor)
		return err
	})
	want := []LocalFollow{
		{ActorID: alice.ID, Name: "alice", URI: alice.URI, State: StateAccepted},
		{ActorID: bob.ID, Name: "bob", URI: bob.URI, State: StateAccepted},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("LocalFollowersOfTx = %+v, want %+v", got, want)
	}
	b.tx(t, func(tx *sql.Tx) error {
		none, err := b.store.LocalFollowersOfTx(b.ctx, tx, "https://remote.test/users/nobody")
		if len(none) != 0 {
			t.Errorf("followers of an actor nobody follows: %+v", none)
		}
		return err
	})
}

// TestBlocksReadTx: an outgoing block, read in a transaction; an incoming
// block (this one added in the transaction) is none.
func TestBlocksReadTx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	blocked := "https://remote.test/users/blocked"
	if _, err := b.store.Block(b.ctx, a, blocked); err != nil {
		t.Fatal(err)
	}
	b.tx(t, func(tx *sql.Tx) error {
		if _, err := b.store.AddIncomingBlockTx(b.ctx, tx, a.ID, remoteActor, ""); err != nil {
			return err
		}
		for uri, want := range map[string]bool{blocked: true, remoteActor: false, "https://remote.test/users/x": false} {
			got, err := b.store.BlocksReadTx(b.ctx, tx, a.ID, uri)
			if err != nil {
				return err
			}
			if got != want {
				t.Errorf("BlocksReadTx(%s) = %v, want %v", uri, got, want)
			}
		}
		return nil
	})
}

// TestLockActivityActorTx: a local actor's stored activity gives its actor;
// an unknown activity and a remote actor's are ENOTFOUND.
func TestLockActivityActorTx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	follow, err := b.store.Follow(b.ctx, a, remoteActor)
	if err != nil {
		t.Fatal(err)
	}
	remote := &Activity{URI: "https://remote.test/activities/1", ActorURI: remoteActor, Type: "Like",
		Document: json.RawMessage(`{"type":"Like"}`)}
	b.tx(t, func(tx *sql.Tx) error {
		if err := b.store.UpsertDeliveredActivityTx(b.ctx, tx, remote); err != nil {
			return err
		}
		id, name, err := b.store.LockActivityActorTx(b.ctx, tx, follow.URI)
		if err != nil || id != a.ID || name != "alice" {
			t.Errorf("LockActivityActorTx(the Follow) = %d, %q, %v; want %d, alice", id, name, err, a.ID)
		}
		for _, uri := range []string{remote.URI, "https://remote.test/activities/none"} {
			if _, _, err := b.store.LockActivityActorTx(b.ctx, tx, uri); !errors.Is(err, ErrNotFound) {
				t.Errorf("LockActivityActorTx(%s): %v, want ENOTFOUND", uri, err)
			}
		}
		return nil
	})
}
