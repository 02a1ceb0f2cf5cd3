package server

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store/notetest"

	"github.com/courier-ap/courier/store"
)

// pendingFollowers makes alice lock her account and gives her a pending
// follower per uri, each with the Follow uri + "/follows/1".
func (b *testBundle) pendingFollowers(t *testing.T, uris ...string) {
	t.Helper()
	locked := true
	a, _, err := b.st.UpdateActor(b.ctx, "alice", store.ActorUpdate{ManuallyApprovesFollowers: &locked})
	if err != nil {
		t.Fatal(err)
	}
	b.alice = a
	if err := b.st.Tx(b.ctx, func(tx *sql.Tx) error {
		for _, uri := range uris {
			if _, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: a.ID, URI: uri, Inbox: uri + "/inbox",
				FollowActivityID: uri + "/follows/1", State: store.StatePending}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func wantErrorBody(t *testing.T, r response, status int, substr string) {
	t.Helper()
	wantStatus(t, r, status)
	var body struct{ Error string }
	if err := json.Unmarshal(r.Body, &body); err != nil || !strings.Contains(body.Error, substr) {
		t.Fatalf("error body %s, want one naming %q", r.Body, substr)
	}
}

// TestC2SAcceptRejectFollow: a locked actor accepts a pending Follow by its
// id and rejects another embedded; a Reject of an accepted follower ends
// its follow; each answer goes to the follower with the Follow embedded.
func TestC2SAcceptRejectFollow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	carl := "https://remote.test/users/carl"
	b.pendingFollowers(t, remoteActor, carl)

	act := b.created(t, b.post(t, "alice", b.token, map[string]any{
		"type": "Accept", "object": remoteActor + "/follows/1"}), "Accept")
	if act.Object == nil || act.Object.Type != "Follow" || act.Object.ID != remoteActor+"/follows/1" ||
		act.Object.Actor != remoteActor || act.Object.ObjectID != b.alice.URI || strings.Join(act.To, " ") != remoteActor {
		t.Fatalf("Accept %+v to %v", act.Object, act.To)
	}
	if ok, _ := b.st.IsFollower(b.ctx, b.alice.ID, remoteActor); !ok {
		t.Fatal("the accepted follower does not follow")
	}
	wantErrorBody(t, b.post(t, "alice", b.token, map[string]any{
		"type": "Accept", "object": remoteActor + "/follows/1"}), http.StatusConflict, "already an accepted follower")

	b.created(t, b.post(t, "alice", b.token, map[string]any{
		"type": "Reject", "object": map[string]any{"type": "Follow", "actor": carl, "object": b.alice.URI}}), "Reject")
	if _, total, _ := b.st.Followers(b.ctx, b.alice.ID, store.StatePending, 0, 10); total != 0 {
		t.Fatalf("%d pending after the Reject", total)
	}
	// Mastodon's way to remove a follower: Reject its accepted Follow.
	rej := b.created(t, b.post(t, "alice", b.token, map[string]any{
		"type": "Reject", "object": map[string]any{"id": remoteActor + "/follows/1", "type": "Follow"}}), "Reject")
	if rej.Object == nil || rej.Object.Actor != remoteActor {
		t.Fatalf("Reject %+v", rej.Object)
	}
	if ok, _ := b.st.IsFollower(b.ctx, b.alice.ID, remoteActor); ok {
		t.Fatal("a rejected follower still follows")
	}

	for _, c := range []struct {
		name   string
		body   map[string]any
		status int
		msg    string
	}{
		{"unknown Follow", map[string]any{"type": "Accept", "object": "https://remote.test/follows/none"}, http.StatusNotFound, "no Follow"},
		{"no object", map[string]any{"type": "Accept"}, http.StatusBadRequest, "needs the Follow"},
		{"another actor's Follow", map[string]any{"type": "Accept", "object": map[string]any{
			"type": "Follow", "actor": carl, "object": b.base + "/users/bob"}}, http.StatusForbidden, "not of"},
		{"not a Follow", map[string]any{"type": "Reject", "object": map[string]any{
			"type": "Like", "actor": carl, "object": b.alice.URI}}, http.StatusUnprocessableEntity, "only a Follow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantErrorBody(t, b.post(t, "alice", b.token, c.body), c.status, c.msg)
		})
	}
	if n := b.count(t, `SELECT COUNT(*) FROM activities WHERE type IN ('Accept', 'Reject')`); n != 3 {
		t.Fatalf("%d answers stored, want 3", n)
	}
}

// TestC2SFollowTwice: a second Follow of an actor followed or asked
// answers 409 with JSON naming the standing Follow, as a second Like is
// refused; nothing more is enqueued.
func TestC2SFollowTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	follow := b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Follow", "object": remoteActor}), "Follow")
	again := b.post(t, "alice", b.token, map[string]any{"type": "Follow", "object": remoteActor})
	wantErrorBody(t, again, http.StatusConflict, "already follow")
	var body struct{ Existing string }
	if err := json.Unmarshal(again.Body, &body); err != nil || body.Existing != follow.ID {
		t.Fatalf("409 body %s, want existing %s", again.Body, follow.ID)
	}
	// Accepted, the same.
	if err := b.st.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.st.SetFollowingStateTx(b.ctx, tx, store.FollowingRef{Target: remoteActor, FollowActivityID: follow.ID}, store.StateAccepted)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	again = b.post(t, "alice", b.token, map[string]any{"type": "Follow", "object": map[string]any{"id": remoteActor}})
	wantErrorBody(t, again, http.StatusConflict, "(accepted)")
	if err := json.Unmarshal(again.Body, &body); err != nil || body.Existing != follow.ID {
		t.Fatalf("409 body %s, want existing %s", again.Body, follow.ID)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM activities WHERE type = 'Follow'`); n != 1 {
		t.Fatalf("%d Follows stored", n)
	}
	// Oneself is refused.
	wantErrorBody(t, b.post(t, "alice", b.token, map[string]any{"type": "Follow", "object": b.alice.URI}),
		http.StatusBadRequest, "cannot follow itself")
}

// lazyActors lets a test build the Resolver after the store exists.
type lazyActors struct{ r *activitypub.Resolver }

func (l *lazyActors) Refresh(ctx context.Context, id string) (*activitypub.Actor, error) {
	return l.r.Refresh(ctx, id)
}

// TestC2SMoveRefused: a Move names the actor itself and a remote account
// courier can fetch, which lists the actor in alsoKnownAs; anything else is
// refused by name, and an account that cannot be reached now is 503 with
// Retry-After. Nothing is enqueued.
func TestC2SMoveRefused(t *testing.T) {
	t.Parallel()
	actors := &lazyActors{}
	b := setupBase(t, "", Config{Actors: actors})
	inst, err := b.st.InstanceActor(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := activitypub.NewFetcher(activitypub.FetcherConfig{
		Client: activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true, Timeout: 10 * time.Second}),
		Signer: inst.Signer(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if actors.r, err = activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: f, Store: b.st}); err != nil {
		t.Fatal(err)
	}
	peer := newPeer(t, peerKey(t, 0), "/users/new") // its document has no alsoKnownAs
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	for _, c := range []struct {
		name   string
		body   map[string]any
		status int
		msg    string
	}{
		{"no target", map[string]any{"type": "Move", "object": b.alice.URI}, http.StatusBadRequest, "needs the actor"},
		{"another actor", map[string]any{"type": "Move", "object": b.base + "/users/bob", "target": peer.actor("/users/new")},
			http.StatusForbidden, "can be moved"},
		{"to itself", map[string]any{"type": "Move", "object": b.alice.URI, "target": b.alice.URI}, http.StatusBadRequest, "itself"},
		{"to a local actor", map[string]any{"type": "Move", "object": b.alice.URI, "target": b.base + "/users/bob"},
			http.StatusUnprocessableEntity, "local actor"},
		{"not a URL", map[string]any{"type": "Move", "object": b.alice.URI, "target": "acct:x@y"}, http.StatusBadRequest, "not an absolute"},
		{"no alias", map[string]any{"type": "Move", "object": b.alice.URI, "target": peer.actor("/users/new")},
			http.StatusUnprocessableEntity, "alsoKnownAs"},
		{"no such account", map[string]any{"type": "Move", "object": b.alice.URI, "target": peer.srv.URL + "/users/none"},
			http.StatusUnprocessableEntity, "not an actor courier can fetch"},
		{"unreachable", map[string]any{"type": "Move", "object": b.alice.URI, "target": gone.URL + "/users/x"},
			http.StatusServiceUnavailable, "could not be fetched now"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := b.post(t, "alice", b.token, c.body)
			wantErrorBody(t, r, c.status, c.msg)
			if c.status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
		})
	}
	if n := b.count(t, `SELECT COUNT(*) FROM activities WHERE type = 'Move'`); n != 0 {
		t.Fatalf("%d Moves stored", n)
	}
	// A server that cannot fetch refuses every Move.
	plain := setup(t)
	wantErrorBody(t, plain.post(t, "alice", plain.token, map[string]any{"type": "Move", "object": plain.alice.URI,
		"target": peer.actor("/users/new")}), http.StatusUnprocessableEntity, "cannot fetch")
}

// TestC2SVote: an application votes as Mastodon does, a Note with the
// option's name and the poll in inReplyTo, without content; a local actor's
// vote on a local poll counts under the rules of a remote one (one answer
// per voter on a oneOf poll, options the poll has, not the author's own),
// is addressed to the poll's author, and is not stored as a note.
func TestC2SVote(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bob, bobTok := b.actor(t, "bob")
	poll := b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Question", "content": "tea or coffee?",
		"to": []any{activitypub.Public}, "oneOf": []any{map[string]any{"type": "Note", "name": "tea"},
			map[string]any{"type": "Note", "name": "coffee"}}}), "Create")
	question := poll.ObjectID
	vote := func(option string) response {
		return b.post(t, "bob", bobTok, map[string]any{"type": "Note", "name": option, "inReplyTo": question})
	}
	r := vote("tea")
	wantStatus(t, r, http.StatusCreated)
	act, err := activitypub.ParseActivity(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(act.To) != 1 || act.To[0] != b.alice.URI || act.Object == nil || act.Object.Name != "tea" ||
		act.Object.InReplyTo != question || len(act.Object.AttributedTo) != 1 || act.Object.AttributedTo[0] != bob.URI {
		t.Fatalf("the vote's Create: %s", act.Raw)
	}
	o, err := b.st.ObjectByURI(b.ctx, question)
	if err != nil || o.Type != "Question" {
		t.Fatal(err)
	}
	if c, err := b.st.PollCounts(b.ctx, o); err != nil || c["tea"] != 1 || c[""] != 1 {
		t.Fatalf("counts %v, %v", c, err)
	}
	wantErrorBody(t, vote("coffee"), http.StatusUnprocessableEntity, "cannot count")
	wantErrorBody(t, vote("milk"), http.StatusUnprocessableEntity, "cannot count")
	wantErrorBody(t, b.post(t, "alice", b.token, map[string]any{"type": "Note", "name": "tea", "inReplyTo": question}),
		http.StatusUnprocessableEntity, "cannot count")
	// A Create around it is the same vote shape.
	_, carolTok := b.actor(t, "carol")
	wantStatus(t, b.post(t, "carol", carolTok, map[string]any{"type": "Create",
		"object": map[string]any{"type": "Note", "name": "coffee", "inReplyTo": question}}), http.StatusCreated)
	if c, _ := b.st.PollCounts(b.ctx, o); c["coffee"] != 1 || c[""] != 2 {
		t.Fatalf("counts after carol's vote %v", c)
	}
	// With content too, as some servers send votes, when it names a poll.
	_, daveTok := b.actor(t, "dave")
	wantStatus(t, b.post(t, "dave", daveTok, map[string]any{"type": "Note", "name": "tea", "content": "tea",
		"inReplyTo": question, "to": []any{b.alice.URI}}), http.StatusCreated)
	if c, _ := b.st.PollCounts(b.ctx, o); c["tea"] != 2 || c[""] != 3 {
		t.Fatalf("counts after dave's vote %v", c)
	}
	// A named note without content replying to what is no poll is refused.
	_, plain, err := notetest.Create(b.ctx, b.st, b.alice, notetest.Input{Content: "plain", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}
	wantErrorBody(t, b.post(t, "bob", bobTok, map[string]any{"type": "Note", "name": "tea", "inReplyTo": plain.URI}),
		http.StatusUnprocessableEntity, "not a poll")
	if n := b.count(t, `SELECT COUNT(*) FROM objects WHERE in_reply_to = ?`, question); n != 0 {
		t.Fatalf("%d votes stored as notes", n)
	}
}

// TestC2SOtherActorsThings: what is another local actor's is 403, as
// documented: accepting its Follow by id, updating its profile; content is
// bounded as the whole document is (1 MiB), not at 50,000 characters.
func TestC2SOtherActorsThings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bob, bobTok := b.actor(t, "bob")
	if err := b.st.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: bob.ID, URI: remoteActor, Inbox: remoteActor + "/inbox",
			FollowActivityID: remoteActor + "/follows/bob", State: store.StatePending})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wantErrorBody(t, b.post(t, "alice", b.token, map[string]any{"type": "Accept", "object": remoteActor + "/follows/bob"}),
		http.StatusForbidden, "not of")
	wantErrorBody(t, b.post(t, "alice", b.token, map[string]any{"type": "Update",
		"object": map[string]any{"id": bob.URI, "type": "Person", "name": "Not Bob"}}), http.StatusForbidden, "own profile")
	// bob's own answer still works.
	wantStatus(t, b.post(t, "bob", bobTok, map[string]any{"type": "Accept", "object": remoteActor + "/follows/bob"}),
		http.StatusCreated)
	long := strings.Repeat("é", 60_000)
	b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Note", "content": long,
		"to": []any{activitypub.Public}}), "Create")
}
