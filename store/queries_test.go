package store

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// The tests of this file run the store's statements that other packages
// call (the inbox's relevance rule, the relays, the delivery fan-out) on
// the store of the run, so that each is checked on SQLite and PostgreSQL.

func TestRelevanceQueries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	follower := "https://Remote.test/users/carol"
	followed := "https://remote.test/users/dave"
	author := "https://remote.test/users/erin"
	if err := b.store.Tx(b.ctx, func(tx *sql.Tx) error {
		if _, err := b.store.AddFollowerTx(b.ctx, tx, Follower{ActorID: a.ID, URI: follower, Inbox: follower + "/inbox",
			FollowActivityID: follower + "/follows/1"}); err != nil {
			return err
		}
		_, err := b.store.UpsertRemoteObjectTx(b.ctx, tx, RemoteObject{URI: "https://remote.test/notes/1", AttributedTo: author,
			Content: "hi", To: []string{Public}, Document: []byte(`{"id":"https://remote.test/notes/1","content":"hi"}`)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Follow(b.ctx, a, followed); err != nil {
		t.Fatal(err)
	}
	like, err := b.store.Like(b.ctx, a, "https://remote.test/notes/1")
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, got bool, err error, want bool) {
		t.Helper()
		if err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", what, got, err, want)
		}
	}
	ok, err := b.store.SubscribedTo(b.ctx, followed)
	check("SubscribedTo(followed)", ok, err, true)
	ok, err = b.store.SubscribedTo(b.ctx, follower)
	check("SubscribedTo(follower)", ok, err, false)
	ok, err = b.store.HoldsObject(b.ctx, "https://remote.test/notes/1")
	check("HoldsObject", ok, err, true)
	for _, uri := range []string{follower, followed, author} {
		ok, err = b.store.HoldsRemoteActor(b.ctx, uri)
		check("HoldsRemoteActor("+uri+")", ok, err, true)
	}
	ok, err = b.store.HoldsRemoteActor(b.ctx, "https://remote.test/users/nobody")
	check("HoldsRemoteActor(nobody)", ok, err, false)
	ok, err = b.store.HoldsActivity(b.ctx, follower+"/follows/1", follower)
	check("HoldsActivity(follow)", ok, err, true)
	ok, err = b.store.HoldsActivity(b.ctx, follower+"/follows/1", author)
	check("HoldsActivity(follow, other actor)", ok, err, false)
	ok, err = b.store.HoldsActivity(b.ctx, like.URI, "")
	check("HoldsActivity(like)", ok, err, true)
	ok, err = b.store.FollowedLocally(b.ctx, followed)
	check("FollowedLocally(pending)", ok, err, false)
	if err := b.store.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.store.SetFollowingStateTx(b.ctx, tx, FollowingRef{Target: followed, LocalActor: a.URI}, StateAccepted)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ok, err = b.store.FollowedLocally(b.ctx, followed)
	check("FollowedLocally(accepted)", ok, err, true)
	// The origin is compared without regard to case.
	ok, err = b.store.HasFollowerOn(b.ctx, a.ID, "https://remote.test")
	check("HasFollowerOn(remote.test)", ok, err, true)
	ok, err = b.store.HasFollowerOn(b.ctx, a.ID, "https://remote.test.evil")
	check("HasFollowerOn(remote.test.evil)", ok, err, false)

	var removed bool
	if err := b.store.Tx(b.ctx, func(tx *sql.Tx) error {
		removed, err = b.store.RemoveFollowByActivityTx(b.ctx, tx, follower, follower+"/follows/1")
		return err
	}); err != nil || !removed {
		t.Fatalf("RemoveFollowByActivityTx = %v, %v", removed, err)
	}
	ok, err = b.store.HoldsActivity(b.ctx, follower+"/follows/1", follower)
	check("HoldsActivity(removed follow)", ok, err, false)
}

func TestRelayAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mastodon, err := b.store.AddRelay(b.ctx, "https://relay.test/inbox")
	if err != nil {
		t.Fatal(err)
	}
	litepub, err := b.store.AddRelay(b.ctx, "https://pleroma.test/relay")
	if err != nil {
		t.Fatal(err)
	}
	answer := func(followID, actor string, accepted bool) bool {
		t.Helper()
		var matched bool
		if err := b.store.Tx(b.ctx, func(tx *sql.Tx) error {
			var err error
			matched, err = b.store.AnswerRelayTx(b.ctx, tx, followID, actor, accepted)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return matched
	}
	if answer(mastodon.FollowActivityID, "https://elsewhere.test/actor", true) {
		t.Fatal("an answer from another host matched the relay")
	}
	if !answer(mastodon.FollowActivityID, "https://relay.test/actor", true) {
		t.Fatal("the relay's Accept did not match")
	}
	inboxes, err := b.store.RelayInboxes(b.ctx)
	if err != nil || len(inboxes) != 1 || inboxes[0] != "https://relay.test/inbox" {
		t.Fatalf("RelayInboxes = %v, %v", inboxes, err)
	}
	ok, err := b.store.SubscribedTo(b.ctx, "https://relay.test/actor")
	if err != nil || !ok {
		t.Fatalf("SubscribedTo(relay actor) = %v, %v", ok, err)
	}

	// The LitePub relay follows the instance actor back: accepted once
	// (the Accept's event id is derived), refused once it rejected us.
	accept := func(eventID string) bool {
		t.Helper()
		var ok bool
		if err := b.store.Tx(b.ctx, func(tx *sql.Tx) error {
			var err error
			ok, err = b.store.AcceptRelayFollowTx(b.ctx, tx, eventID, b.clock.Now(), "https://pleroma.test/follows/1", litepub.ActorURI)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	const acceptID = "00000000-0000-4000-8000-00000000000a"
	first, again := accept(acceptID), accept(acceptID)
	if !first || !again {
		t.Fatalf("the relay's Follow accepted: %v, then %v", first, again)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE event_id = ?`, acceptID); n != 1 {
		t.Fatalf("%d Accepts enqueued for one Follow", n)
	}
	if !answer(litepub.FollowActivityID, litepub.ActorURI, false) {
		t.Fatal("the LitePub relay's Reject did not match")
	}
	if accept("00000000-0000-4000-8000-00000000000b") {
		t.Fatal("a relay that rejected us was accepted")
	}
	relays, err := b.store.Relays(b.ctx)
	if err != nil || len(relays) != 2 || relays[0].State != StateAccepted || relays[1].State != StateRejected {
		t.Fatalf("Relays = %+v, %v", relays, err)
	}
}

func TestDeliveryQueries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	// Followers: two behind remote.test's shared inbox; one there with an
	// inbox of its own whom the actor blocks; one with an inbox of its own
	// on another host; one pending; and four
	// on a blocked domain by their id or their inbox, a subdomain and a
	// host written with capitals and a port among them.
	for i, f := range []Follower{
		{URI: "https://remote.test/users/f1", Inbox: "https://remote.test/users/f1/inbox", SharedInbox: "https://remote.test/inbox"},
		{URI: "https://remote.test/users/f2", Inbox: "https://remote.test/users/f2/inbox"},
		{URI: "https://remote.test/users/f4", Inbox: "https://remote.test/users/f4/inbox", SharedInbox: "https://remote.test/inbox"},
		{URI: "https://personal.test/users/p1", Inbox: "https://personal.test/users/p1/inbox"},
		{URI: "https://pending.test/users/q", Inbox: "https://pending.test/users/q/inbox", State: StatePending},
		{URI: "https://blocked.test/users/f3", Inbox: "https://blocked.test/users/f3/inbox", SharedInbox: "https://blocked.test/inbox"},
		{URI: "https://sub.blocked.test/users/f5", Inbox: "https://sub.blocked.test/users/f5/inbox"},
		{URI: "https://Blocked.Test:8443/users/f6", Inbox: "https://relay.test/f6"},
		{URI: "https://ok.test/users/x", Inbox: "https://blocked.test/inboxes/x"},
	} {
		f.ActorID = a.ID
		if err := b.store.Tx(b.ctx, func(tx *sql.Tx) error {
			_, err := b.store.AddFollowerTx(b.ctx, tx, f)
			return err
		}); err != nil {
			t.Fatalf("follower %d: %v", i, err)
		}
	}
	if _, err := b.store.Block(b.ctx, a, "https://remote.test/users/f2"); err != nil {
		t.Fatal(err)
	}
	if err := b.store.AddDomainBlock(b.ctx, "blocked.test", "spam"); err != nil {
		t.Fatal(err)
	}
	boxes, err := b.store.DeliveryInboxes(b.ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []DeliveryInbox{
		{URL: "https://personal.test/users/p1/inbox", Recipient: "https://personal.test/users/p1"},
		{URL: "https://remote.test/inbox", Shared: true, Recipient: "https://remote.test/users/f1", Several: true},
	}
	if !slices.Equal(boxes, want) {
		t.Fatalf("DeliveryInboxes = %+v\nwant %+v", boxes, want)
	}
	for uri, want := range map[string]bool{
		"https://remote.test/users/f1":  false,
		"https://remote.test/users/f2":  true,
		"https://blocked.test/users/f3": true,
	} {
		if got, err := b.store.DeliveryBlocked(b.ctx, a.ID, uri); err != nil || got != want {
			t.Errorf("DeliveryBlocked(%s) = %v, %v; want %v", uri, got, err, want)
		}
	}

	// An activity stored by the fan-out: inserted, then left alone when
	// equal, its bytes replaced when not.
	act := &Activity{URI: "https://courier.test/activities/x", ActorURI: a.URI, ActorID: a.ID, Type: "Create",
		Document: json.RawMessage(`{"id":"https://courier.test/activities/x"}`), Public: true}
	for _, doc := range []string{`{"id":"https://courier.test/activities/x"}`, `{"id":"https://courier.test/activities/x","n":2}`} {
		act.Document = json.RawMessage(doc)
		if err := b.store.Tx(b.ctx, func(tx *sql.Tx) error { return b.store.UpsertDeliveredActivityTx(b.ctx, tx, act) }); err != nil {
			t.Fatal(err)
		}
		got, err := b.store.ActivityByURI(b.ctx, act.URI)
		if err != nil || string(got.Document) != doc || !got.Public {
			t.Fatalf("stored %+v, %v; want %s", got, err, doc)
		}
	}

	// A remote actor marked gone answers so until a fresh fetch.
	if err := b.store.Tx(b.ctx, func(tx *sql.Tx) error {
		return b.store.MarkRemoteActorGoneTx(b.ctx, tx, "https://remote.test/users/unknown")
	}); err != nil {
		t.Fatal(err)
	}
	if gone, _, err := b.store.RemoteActorGone(b.ctx, "https://remote.test/users/unknown"); err != nil || gone {
		t.Fatalf("an uncached actor marked gone: %v, %v", gone, err)
	}

	notes, err := b.store.RecentPublicNotes(b.ctx, a.ID, 5)
	if err != nil || len(notes) != 0 {
		t.Fatalf("RecentPublicNotes = %v, %v", notes, err)
	}
	for i := range 3 {
		b.clock.Advance(time.Second)
		if _, _, err := createNote(b.ctx, b.store, a, noteInput{Content: fmt.Sprint(i), To: []string{Public}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := createNote(b.ctx, b.store, a, noteInput{Content: "private", To: []string{b.store.URIs().Followers("alice")}}); err != nil {
		t.Fatal(err)
	}
	notes, err = b.store.RecentPublicNotes(b.ctx, a.ID, 2)
	if err != nil || len(notes) != 2 || notes[0].Content != "2" || notes[1].Content != "1" {
		t.Fatalf("RecentPublicNotes = %v, %v", notes, err)
	}
	if _, err := b.store.ActivityByURI(b.ctx, "https://courier.test/activities/none"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown activity: %v", err)
	}
}
