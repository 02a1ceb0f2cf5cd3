package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// mastodonPeer serves a real Mastodon actor document (testdata, from
// ../shared/fixtures/fediverse/mastodon/objects/person.json), moved to the
// peer's origin,
// with the aliases the test sets, as its owner adds them in Mastodon's
// settings before moving.
type mastodonPeer struct {
	srv  *httptest.Server
	path string
	mu   sync.Mutex
	aka  []string
}

func newMastodonPeer(t *testing.T) *mastodonPeer {
	t.Helper()
	raw, err := os.ReadFile("testdata/mastodon_person.json")
	if err != nil {
		t.Fatal(err)
	}
	p := &mastodonPeer{path: "/users/mastodon"}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != p.path {
			http.NotFound(w, r)
			return
		}
		var doc map[string]any
		if err := json.Unmarshal(bytes.ReplaceAll(raw, []byte("https://masto.qa.urbanwildlife.biz"), []byte(p.srv.URL)), &doc); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		p.mu.Lock()
		if p.aka != nil {
			doc["alsoKnownAs"] = p.aka
		}
		p.mu.Unlock()
		w.Header().Set("Content-Type", activitypub.ContentType)
		_ = json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *mastodonPeer) actor() string { return p.srv.URL + p.path }

// TestMoveToAliasedAccount: a C2S Move of alice to a Mastodon account is
// refused (422) while that account's document does not list her in
// alsoKnownAs; once it does, the Move is delivered, signed, to her remote
// follower and imported for her local follower, and her actor document
// names the account as movedTo.
func TestMoveToAliasedAccount(t *testing.T) {
	t.Parallel()
	remote := newScriptedInbox(t)
	remote.status.Store(http.StatusAccepted)
	peer := newMastodonPeer(t)
	a, _ := startApp(t, func(c *Config) { c.AllowPrivateAddresses = true })
	ctx := context.Background()
	alice, token, err := a.store.CreateActor(ctx, store.NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	_, bobToken, err := a.store.CreateActor(ctx, store.NewActor{Name: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	remote.verifyWith(t, alice)
	remote.follow(t, a.cfg.BaseURL+"/inbox", remote.srv.URL+"/follows/1", alice.URI)
	if st, body := c2s(t, a, "bob", bobToken, map[string]any{"type": "Follow", "object": alice.URI}); st != http.StatusCreated {
		t.Fatalf("bob's Follow: %d %v", st, body)
	}
	waitFor(t, "alice's two followers", func() bool {
		_, n, err := a.store.Followers(ctx, alice.ID, store.StateAccepted, 0, 10)
		return err == nil && n == 2
	})

	move := map[string]any{"type": "Move", "object": alice.URI, "target": peer.actor()}
	if st, body := c2s(t, a, "alice", token, move); st != http.StatusUnprocessableEntity ||
		!strings.Contains(body["error"].(string), "alsoKnownAs") {
		t.Fatalf("Move to an account without the alias: %d %v", st, body)
	}
	peer.mu.Lock()
	peer.aka = []string{"https://elsewhere.example/users/x", alice.URI}
	peer.mu.Unlock()
	st, act := c2s(t, a, "alice", token, move)
	if st != http.StatusCreated || act["type"] != "Move" || act["object"] != alice.URI || act["target"] != peer.actor() {
		t.Fatalf("Move: %d %v", st, act)
	}
	waitFor(t, "the Move delivered", func() bool { return slices.Contains(remote.received(), "Move") })
	if got := remote.received(); slices.Contains(got, "bad-signature") {
		t.Fatalf("received %v: want every POST signed with alice's key", got)
	}
	id, _ := act["id"].(string)
	waitFor(t, "the Move imported for bob", func() bool {
		var n int
		_ = a.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM inbox_activities WHERE activity_id = ? AND imported_at IS NOT NULL`, id).Scan(&n)
		return n == 1
	})
	r, err := http.NewRequest(http.MethodGet, alice.URI, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Accept", activitypub.ContentType)
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil || doc["movedTo"] != peer.actor() || !strings.Contains(string(raw), `"as:movedTo"`) {
		t.Fatalf("alice's document after the Move: %s", raw)
	}
}
