package server

import (
	"context"
	"crypto"
	"crypto/rsa"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// peer is a remote server on loopback serving actor documents, each with
// its own key, at /users/{name} and /actor.
type peer struct {
	srv *httptest.Server

	mu   sync.Mutex
	keys map[string]*rsa.PrivateKey // path -> key
}

var (
	peerKeysOnce sync.Once
	peerKeys     []*rsa.PrivateKey
)

func peerKey(t *testing.T, i int) *rsa.PrivateKey {
	t.Helper()
	peerKeysOnce.Do(func() {
		for range 3 {
			k, err := activitypub.GenerateKey()
			if err != nil {
				panic(err)
			}
			peerKeys = append(peerKeys, k)
		}
	})
	return peerKeys[i]
}

func newPeer(t *testing.T, k *rsa.PrivateKey, paths ...string) *peer {
	t.Helper()
	p := &peer{keys: map[string]*rsa.PrivateKey{}}
	for _, path := range paths {
		p.keys[path] = k
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		k := p.keys[r.URL.Path]
		p.mu.Unlock()
		if k == nil {
			http.NotFound(w, r)
			return
		}
		pem, err := activitypub.EncodePublicKeyPEM(&k.PublicKey)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		id := p.srv.URL + r.URL.Path
		w.Header().Set("Content-Type", activitypub.ContentType)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"@context": []string{activitypub.ActivityStreams, activitypub.SecurityContext},
			"id":       id, "type": "Person", "inbox": id + "/inbox",
			"publicKey": map[string]string{"id": id + "#main-key", "owner": id, "publicKeyPem": pem},
		})
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *peer) actor(path string) string { return p.srv.URL + path }

// signedGET GETs path from b signed as the peer's actor at path (its key
// k), with the ActivityPub Accept header.
func (b *testBundle) signedGET(t *testing.T, path, keyID string, k *rsa.PrivateKey) response {
	t.Helper()
	req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, b.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", apJSON)
	if err := activitypub.SignRequest(req, nil, keyID, k, time.Now()); err != nil {
		t.Fatal(err)
	}
	return b.send(t, req)
}

func (b *testBundle) send(t *testing.T, req *http.Request) response {
	t.Helper()
	res, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		t.Fatal(err)
	}
	return response{Response: res, Body: data}
}

// setupSigned is a server whose Keys is a real Resolver fetching from
// loopback peers, signing as courier's instance actor.
func setupSigned(t *testing.T, authorized bool) *testBundle {
	t.Helper()
	keys := &lazyKeys{}
	b := setupBase(t, "", Config{Keys: keys, AuthorizedFetch: authorized})
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
	if keys.r, err = activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: f, Store: b.st}); err != nil {
		t.Fatal(err)
	}
	return b
}

// lazyKeys lets the test build the Resolver after the store exists.
type lazyKeys struct{ r *activitypub.Resolver }

func (l *lazyKeys) Key(ctx context.Context, keyID string, refresh bool) (crypto.PublicKey, string, error) {
	return l.r.Key(ctx, keyID, refresh)
}

// TestSignedFetchOfPrivateItems: followers-only and direct notes and their
// activities are served to a signed GET from a server one of whose actors
// may see them (a follower there, or an addressee there), whichever of its
// actors signs, and to nobody else; a signature that does not verify is
// 401.
func TestSignedFetchOfPrivateItems(t *testing.T) {
	t.Parallel()
	b := setupSigned(t, false)
	followerHost := newPeer(t, peerKey(t, 0), "/users/bob", "/actor")
	addresseeHost := newPeer(t, peerKey(t, 1), "/users/carol", "/users/dave")
	strangerHost := newPeer(t, peerKey(t, 2), "/users/eve")
	bob := followerHost.actor("/users/bob")
	if err := b.st.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: b.alice.ID, URI: bob, Inbox: bob + "/inbox"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	followersOnly := b.post(t, "alice", b.token, map[string]any{"type": "Note", "content": "for followers",
		"to": []string{b.alice.URI + "/followers"}})
	wantStatus(t, followersOnly, http.StatusCreated)
	direct := b.post(t, "alice", b.token, map[string]any{"type": "Note", "content": "for carol",
		"to": []string{addresseeHost.actor("/users/carol")}})
	wantStatus(t, direct, http.StatusCreated)
	var fo, dm struct {
		ID     string `json:"id"`
		Object struct {
			ID string `json:"id"`
		} `json:"object"`
	}
	if err := json.Unmarshal(followersOnly.Body, &fo); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(direct.Body, &dm); err != nil {
		t.Fatal(err)
	}
	path := func(u string) string { return strings.TrimPrefix(u, b.base) }
	for _, tc := range []struct {
		name   string
		doc    string
		signer *peer
		as     string
		key    int
		want   int
	}{
		{"follower, followers-only note", fo.Object.ID, followerHost, "/users/bob", 0, 200},
		{"follower's instance actor, followers-only note", fo.Object.ID, followerHost, "/actor", 0, 200},
		{"follower's instance actor, followers-only Create", fo.ID, followerHost, "/actor", 0, 200},
		{"stranger, followers-only note", fo.Object.ID, strangerHost, "/users/eve", 2, 404},
		{"addressee's server, followers-only note", fo.Object.ID, addresseeHost, "/users/dave", 1, 404},
		{"addressee, direct note", dm.Object.ID, addresseeHost, "/users/carol", 1, 200},
		{"another actor on the addressee's server, direct Create", dm.ID, addresseeHost, "/users/dave", 1, 200},
		{"follower's server, direct note", dm.Object.ID, followerHost, "/users/bob", 0, 404},
		{"forged: eve's key id, bob's key", fo.Object.ID, strangerHost, "/users/eve", 0, 401},
	} {
		r := b.signedGET(t, path(tc.doc), tc.signer.actor(tc.as)+"#main-key", peerKey(t, tc.key))
		if r.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d: %s", tc.name, r.StatusCode, tc.want, r.Body)
			continue
		}
		if tc.want == 200 && r.Header.Get("Cache-Control") != "private, no-store" {
			t.Errorf("%s: Cache-Control %q", tc.name, r.Header.Get("Cache-Control"))
		}
		if tc.want == 401 && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Signature") {
			t.Errorf("%s: WWW-Authenticate %q", tc.name, r.Header.Get("WWW-Authenticate"))
		}
	}
	for _, doc := range []string{fo.Object.ID, fo.ID, dm.Object.ID} {
		wantStatus(t, b.get(t, path(doc)), http.StatusNotFound) // unsigned
	}
}

// TestAuthorizedFetch: with AuthorizedFetch, every ActivityPub document
// but the instance actor (and so its key) needs a signed GET; discovery,
// HTML pages and the owner's bearer token are unaffected.
func TestAuthorizedFetch(t *testing.T) {
	t.Parallel()
	b := setupSigned(t, true)
	p := newPeer(t, peerKey(t, 0), "/users/bob")
	note := b.post(t, "alice", b.token, map[string]any{"type": "Note", "content": "public", "to": []string{activitypub.Public}})
	wantStatus(t, note, http.StatusCreated)
	var created struct {
		Object struct {
			ID string `json:"id"`
		} `json:"object"`
	}
	if err := json.Unmarshal(note.Body, &created); err != nil {
		t.Fatal(err)
	}
	notePath := strings.TrimPrefix(created.Object.ID, b.base)
	docs := []string{"/users/alice", "/users/alice/outbox", "/users/alice/followers", "/users/alice/following",
		"/users/alice/featured", notePath, notePath + "/likes", "/actor/outbox"}
	for _, d := range docs {
		r := b.get(t, d)
		wantStatus(t, r, http.StatusUnauthorized)
		if m := r.json(t); !strings.Contains(m["error"].(string), "signed") {
			t.Errorf("%s: error %v", d, m["error"])
		}
		wantStatus(t, b.signedGET(t, d, p.actor("/users/bob")+"#main-key", peerKey(t, 0)), http.StatusOK)
	}
	wantStatus(t, b.signedGET(t, "/users/alice", p.actor("/users/bob")+"#main-key", peerKey(t, 1)), http.StatusUnauthorized)
	inst := b.get(t, "/actor")
	wantStatus(t, inst, http.StatusOK)
	if a, err := activitypub.ParseActor(inst.Body); err != nil || a.PublicKey.PublicKeyPem == "" {
		t.Fatalf("instance actor: %v", err)
	}
	wantStatus(t, b.do(t, http.MethodGet, "/.well-known/webfinger?resource=acct:alice@"+strings.TrimPrefix(b.base, "http://"), nil), http.StatusOK)
	wantStatus(t, b.do(t, http.MethodGet, "/.well-known/nodeinfo", nil), http.StatusOK)
	html := b.do(t, http.MethodGet, "/users/alice", nil, "Accept", "text/html")
	wantStatus(t, html, http.StatusOK)
	wantStatus(t, b.do(t, http.MethodGet, "/users/alice/outbox", nil, "Accept", apJSON, "Authorization", "Bearer "+b.token), http.StatusOK)
	// A token that is not alice's does not stand in for a signature.
	_, bobToken := b.actor(t, "bob")
	// Another actor's token is 403 (docs/client-to-server.md).
	for _, tc := range []struct {
		path, token string
		status      int
	}{
		{"/users/alice", "junk", http.StatusUnauthorized}, {"/users/alice/outbox", bobToken, http.StatusForbidden},
		{notePath, b.token, http.StatusUnauthorized},
	} {
		wantStatus(t, b.do(t, http.MethodGet, tc.path, nil, "Accept", apJSON, "Authorization", "Bearer "+tc.token), tc.status)
	}
}
