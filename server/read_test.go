package server

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// lookup follows a dotted path ("publicKey.id") in a decoded document.
func lookup(doc map[string]any, path string) (any, bool) {
	var cur any = doc
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case float64:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func fixture(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile("testdata/" + path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// sameShape checks that ours carries every field of fields that the real
// document carries, with the same JSON kind (a nullable field may be null
// in either). Listing a field the fixture lacks fails too, so the list
// stays true to what peers publish and read.
func sameShape(t *testing.T, name string, real, ours map[string]any, fields []string, nullable ...string) {
	t.Helper()
	for _, f := range fields {
		rv, ok := lookup(real, f)
		if !ok {
			t.Errorf("%s fixture has no %s: the field list is wrong", name, f)
			continue
		}
		ov, ok := lookup(ours, f)
		if !ok {
			t.Errorf("courier's document lacks %s (%s has %v)", f, name, rv)
			continue
		}
		isNullable := false
		for _, n := range nullable {
			isNullable = isNullable || n == f
		}
		if f == "@context" {
			// A single context may be a string or a list (JSON-LD).
			if k := kind(ov); k != "string" && k != "array" {
				t.Errorf("@context is a %s", k)
			}
			continue
		}
		if kind(rv) != kind(ov) && !(isNullable && (rv == nil || ov == nil)) {
			t.Errorf("%s: courier has a %s, %s a %s", f, kind(ov), name, kind(rv))
		}
	}
}

// actorFields are the actor properties Mastodon's and GoToSocial's actor
// importers read (Mastodon: ActivityPub::ProcessAccountService; GoToSocial:
// its ASRepresentationToAccount).
var actorFields = []string{
	"@context", "id", "type", "preferredUsername", "name", "summary", "url",
	"inbox", "outbox", "followers", "following", "manuallyApprovesFollowers",
	"publicKey", "publicKey.id", "publicKey.owner", "publicKey.publicKeyPem",
}

func TestActorDocumentHasWhatPeersRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.get(t, "/users/alice")
	wantStatus(t, r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); ct != apJSON {
		t.Fatalf("content type %q: Mastodon 4.2.5+ refuses other types", ct)
	}
	ours := r.json(t)
	sameShape(t, "mastodon", fixture(t, "mastodon/person.json"), ours, append(actorFields, "endpoints.sharedInbox", "published"))
	sameShape(t, "gotosocial", fixture(t, "gotosocial/person.json"), ours, actorFields)

	if ours["id"] != b.base+"/users/alice" || ours["type"] != "Person" || ours["preferredUsername"] != "alice" || ours["name"] != "ALICE" {
		t.Fatalf("actor %s", r.Body)
	}
	ctx, _ := ours["@context"].([]any)
	if len(ctx) < 2 || ctx[0] != activitypub.ActivityStreams || ctx[1] != activitypub.SecurityContext {
		t.Fatalf("@context %v", ours["@context"])
	}
	key, _ := lookup(ours, "publicKey.id")
	owner, _ := lookup(ours, "publicKey.owner")
	pemv, _ := lookup(ours, "publicKey.publicKeyPem")
	if key != b.base+"/users/alice#main-key" || owner != ours["id"] || !strings.HasPrefix(pemv.(string), "-----BEGIN PUBLIC KEY-----") {
		t.Fatalf("publicKey %v %v", key, owner)
	}
	if _, err := activitypub.ParsePublicKeyPEM(pemv.(string)); err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]string{
		"inbox": "/users/alice/inbox", "outbox": "/users/alice/outbox", "followers": "/users/alice/followers",
		"following": "/users/alice/following", "endpoints.sharedInbox": "/inbox",
	} {
		if v, _ := lookup(ours, field); v != b.base+want {
			t.Errorf("%s = %v", field, v)
		}
	}
	// The id of the fetched document is the URL fetched (Mastodon checks).
	again := b.get(t, ours["id"].(string)).json(t)
	if again["id"] != ours["id"] {
		t.Fatal("id differs from its URL")
	}
	wantStatus(t, b.get(t, "/users/nobody"), http.StatusNotFound)
	wantStatus(t, b.get(t, "/users/Bad%20Name"), http.StatusNotFound)
}

// noteFields are the Note properties Mastodon reads when it imports a
// status (ActivityPub::Activity::Create) and serves itself.
var noteFields = []string{
	"id", "type", "summary", "inReplyTo", "published", "url", "attributedTo", "to", "cc", "sensitive", "content",
}

func TestNoteDocumentHasWhatPeersRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.post(t, "alice", b.token, map[string]any{
		"type": "Note", "content": "<p>shape</p>", "to": store.Public, "cc": b.base + "/users/alice/followers",
		"inReplyTo": remoteNote,
	})
	wantStatus(t, r, http.StatusCreated)
	create := map[string]any{}
	_ = json.Unmarshal(r.Body, &create)
	sameShape(t, "mastodon create", fixture(t, "mastodon/create_note.json"), create,
		[]string{"@context", "id", "type", "actor", "published", "to", "cc", "object"})
	noteID := create["object"].(map[string]any)["id"].(string)

	// Two remote likes and a share, as the inbox would record them.
	err := b.st.Tx(b.ctx, func(tx *sql.Tx) error {
		for i, typ := range []string{store.ReactionLike, store.ReactionLike, store.ReactionAnnounce} {
			if _, err := b.st.AddReactionTx(b.ctx, tx, store.Reaction{ActivityURI: fmt.Sprintf("https://remote.test/r/%d", i),
				Type: typ, ActorURI: fmt.Sprintf("https://remote.test/users/u%d", i), ObjectURI: noteID}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	nr := b.get(t, noteID)
	wantStatus(t, nr, http.StatusOK)
	note := nr.json(t)
	sameShape(t, "mastodon", fixture(t, "mastodon/note_1.json"), note, noteFields, "summary", "inReplyTo")
	sameShape(t, "pleroma", fixture(t, "pleroma/note.json"), note,
		[]string{"id", "type", "attributedTo", "content", "published", "to", "cc", "inReplyTo"})
	if note["inReplyTo"] != remoteNote || note["content"] != "<p>shape</p>" || note["attributedTo"] != b.alice.URI {
		t.Fatalf("note %s", nr.Body)
	}
	if _, err := activitypub.ParseObject(nr.Body); err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]float64{"likes.totalItems": 2, "shares.totalItems": 1} {
		if v, _ := lookup(note, field); v != want {
			t.Errorf("%s = %v, want %v", field, v, want)
		}
	}
	likesID, _ := lookup(note, "likes.id")
	likes := b.get(t, likesID.(string))
	wantStatus(t, likes, http.StatusOK)
	if m := likes.json(t); m["type"] != "Collection" || m["totalItems"] != 2.0 {
		t.Fatalf("likes %s", likes.Body)
	}
	sharesID, _ := lookup(note, "shares.id")
	if m := b.get(t, sharesID.(string)).json(t); m["totalItems"] != 1.0 {
		t.Fatalf("shares %v", m)
	}
	wantStatus(t, b.get(t, "/objects/nope"), http.StatusNotFound)
}

func TestOutboxCollectionAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var public []string
	for i := range 5 {
		public = append(public, b.note(t, "alice", b.token, fmt.Sprint("public ", i)))
		r := b.post(t, "alice", b.token, map[string]any{"type": "Note", "content": "secret", "to": remoteActor})
		wantStatus(t, r, http.StatusCreated)
	}
	r := b.get(t, "/users/alice/outbox")
	wantStatus(t, r, http.StatusOK)
	c := r.json(t)
	sameShape(t, "mastodon collection", fixture(t, "mastodon/featured.json"), c, []string{"@context", "id", "type", "totalItems"})
	if c["type"] != "OrderedCollection" || c["totalItems"] != 5.0 || c["first"] != b.base+"/users/alice/outbox?page=true" {
		t.Fatalf("outbox %s", r.Body)
	}
	// Walk the pages (page size 3) forward with next, then back with prev.
	var seen []string
	var pages []map[string]any
	next := c["first"].(string)
	for i := 0; next != "" && i < 10; i++ {
		p := b.get(t, next).json(t)
		if p["type"] != "OrderedCollectionPage" || p["partOf"] != b.base+"/users/alice/outbox" || p["totalItems"] != 5.0 {
			t.Fatalf("page %v", p)
		}
		for _, it := range p["orderedItems"].([]any) {
			act := it.(map[string]any)
			if act["type"] != "Create" {
				t.Fatalf("item %v", act)
			}
			seen = append(seen, act["object"].(map[string]any)["id"].(string))
		}
		pages = append(pages, p)
		next, _ = p["next"].(string)
	}
	if len(pages) != 2 || len(seen) != 5 {
		t.Fatalf("%d pages, %d items", len(pages), len(seen))
	}
	for i, id := range seen {
		if id != public[4-i] {
			t.Fatalf("item %d is %s, want %s (newest first)", i, id, public[4-i])
		}
	}
	if _, ok := pages[0]["prev"]; ok {
		t.Fatal("first page has prev")
	}
	back := b.get(t, pages[1]["prev"].(string)).json(t)
	if fmt.Sprint(back["orderedItems"]) != fmt.Sprint(pages[0]["orderedItems"]) {
		t.Fatal("prev of page 2 is not page 1")
	}
	// The owner sees the private notes too; a wrong token is refused.
	own := b.get(t, "/users/alice/outbox", "Authorization", "Bearer "+b.token)
	if m := own.json(t); m["totalItems"] != 10.0 || own.Header.Get("Cache-Control") != "private, no-store" {
		t.Fatalf("owner outbox %s", own.Body)
	}
	wantStatus(t, b.get(t, "/users/alice/outbox", "Authorization", "Bearer wrong"), http.StatusUnauthorized)
	// A peer's signature in Authorization is not a bearer token: public view.
	signed := b.get(t, "/users/alice/outbox", "Authorization", `Signature keyId="https://remote.test/users/bob#main-key",signature="x"`)
	wantStatus(t, signed, http.StatusOK)
	if m := signed.json(t); m["totalItems"] != 5.0 {
		t.Fatalf("signed fetch %s", signed.Body)
	}
	wantStatus(t, b.get(t, "/users/alice/outbox?max_id=-1"), http.StatusBadRequest)
	wantStatus(t, b.get(t, "/users/nobody/outbox"), http.StatusNotFound)
}

func TestFollowersAndFollowingCollections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	err := b.st.Tx(b.ctx, func(tx *sql.Tx) error {
		for i := range 4 {
			uri := fmt.Sprintf("https://remote.test/users/f%d", i)
			b.clock.Advance(1_000_000_000)
			if _, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: b.alice.ID, URI: uri, Inbox: uri + "/inbox"}); err != nil {
				return err
			}
		}
		_, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: b.alice.ID, URI: "https://remote.test/users/p",
			Inbox: "https://remote.test/users/p/inbox", State: store.StatePending})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	c := b.get(t, "/users/alice/followers").json(t)
	if c["type"] != "OrderedCollection" || c["totalItems"] != 4.0 || c["first"] != b.base+"/users/alice/followers?page=1" {
		t.Fatalf("followers %v", c)
	}
	p1 := b.get(t, c["first"].(string)).json(t)
	items := p1["orderedItems"].([]any)
	if len(items) != 3 || items[0] != "https://remote.test/users/f0" || p1["next"] != b.base+"/users/alice/followers?page=2" || p1["prev"] != nil {
		t.Fatalf("page 1 %v", p1)
	}
	p2 := b.get(t, p1["next"].(string)).json(t)
	if items := p2["orderedItems"].([]any); len(items) != 1 || p2["next"] != nil || p2["prev"] != b.base+"/users/alice/followers?page=1" {
		t.Fatalf("page 2 %v", p2)
	}
	// Following lists accepted follows only.
	if r := b.post(t, "alice", b.token, map[string]any{"type": "Follow", "object": remoteActor}); r.StatusCode != http.StatusCreated {
		t.Fatal(r.StatusCode)
	}
	if m := b.get(t, "/users/alice/following").json(t); m["totalItems"] != 0.0 {
		t.Fatalf("pending follow listed: %v", m)
	}
	err = b.st.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.st.SetFollowingStateTx(b.ctx, tx, store.FollowingRef{Target: remoteActor, LocalActor: b.alice.URI}, store.StateAccepted)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f := b.get(t, "/users/alice/following?page=1").json(t)
	if items := f["orderedItems"].([]any); f["totalItems"] != 1.0 || len(items) != 1 || items[0] != remoteActor {
		t.Fatalf("following %v", f)
	}
	wantStatus(t, b.get(t, "/users/alice/followers?page=0"), http.StatusBadRequest)
	wantStatus(t, b.get(t, "/users/alice/followers?page=x"), http.StatusBadRequest)
}

func TestPrivateObjectsAndActivities(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.post(t, "alice", b.token, map[string]any{"type": "Note", "content": "for followers", "to": b.base + "/users/alice/followers"})
	wantStatus(t, r, http.StatusCreated)
	act, _ := activitypub.ParseActivity(r.Body)
	for _, url := range []string{act.ObjectID, act.ID} {
		wantStatus(t, b.get(t, url), http.StatusNotFound)
		own := b.get(t, url, "Authorization", "Bearer "+b.token)
		wantStatus(t, own, http.StatusOK)
		if own.Header.Get("Cache-Control") != "private, no-store" {
			t.Fatalf("%s: private document cacheable", url)
		}
	}
	wantStatus(t, b.get(t, "/activities/not-a-uuid"), http.StatusNotFound)
	wantStatus(t, b.get(t, "/activities/00000000-0000-0000-0000-000000000000"), http.StatusNotFound)
}

func TestActivityShapesMatchMastodon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	decode := func(r response) map[string]any {
		t.Helper()
		wantStatus(t, r, http.StatusCreated)
		return r.json(t)
	}
	follow := decode(b.post(t, "alice", b.token, map[string]any{"type": "Follow", "object": remoteActor}))
	sameShape(t, "mastodon follow", fixture(t, "mastodon/follow.json"), follow, []string{"@context", "id", "type", "actor", "object"})
	undo := decode(b.post(t, "alice", b.token, map[string]any{"type": "Undo", "object": follow["id"]}))
	sameShape(t, "mastodon undo", fixture(t, "mastodon/undo_follow.json"), undo,
		[]string{"@context", "id", "type", "actor", "object", "object.id", "object.type", "object.actor", "object.object"})
	if _, ok := undo["object"].(map[string]any)["@context"]; ok {
		t.Fatal("embedded activity carries its own @context")
	}
	like := decode(b.post(t, "alice", b.token, map[string]any{"type": "Like", "object": remoteNote}))
	sameShape(t, "mastodon like", fixture(t, "mastodon/like_page.json"), like, []string{"@context", "id", "type", "actor", "object"})
	note := b.note(t, "alice", b.token, "short-lived")
	del := decode(b.post(t, "alice", b.token, map[string]any{"type": "Delete", "object": note}))
	sameShape(t, "mastodon delete", fixture(t, "mastodon/delete.json"), del,
		[]string{"@context", "id", "type", "actor", "to", "object", "object.id", "object.type"})
	if typ, _ := lookup(del, "object.type"); typ != "Tombstone" {
		t.Fatalf("Delete object type %v", typ)
	}
}
