package activitypub

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// remote is a fake fediverse server on loopback. It verifies the HTTP
// signature of every request against the local instance key (as GoToSocial
// and authorized-fetch Mastodon do), answers 401 when it does not verify,
// and serves actor documents in several servers' shapes.
type remote struct {
	t     testing.TB
	srv   *httptest.Server
	local *rsa.PublicKey   // the key courier signs fetches with
	now   func() time.Time // the remote's clock for the Date window

	mu       sync.Mutex
	keys     map[string]*rsa.PrivateKey // actor path -> its key
	hits     map[string]int
	sigFails int
	gate     chan struct{} // when set, actor responses wait for it
}

func newRemote(t testing.TB, local *rsa.PublicKey) *remote {
	t.Helper()
	rm := &remote{t: t, local: local, now: time.Now, keys: map[string]*rsa.PrivateKey{}, hits: map[string]int{}}
	rm.srv = httptest.NewServer(http.HandlerFunc(rm.serve))
	t.Cleanup(rm.srv.Close)
	return rm
}

func (rm *remote) url(path string) string { return rm.srv.URL + path }

func (rm *remote) failures() int {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return rm.sigFails
}

func (rm *remote) count(path string) int {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return rm.hits[path]
}

// setKey gives the actor at path a key (rotating it when called again).
func (rm *remote) setKey(path string, k *rsa.PrivateKey) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.keys[path] = k
}

func (rm *remote) actorDoc(path, keyID string) map[string]any {
	rm.mu.Lock()
	k := rm.keys[path]
	rm.mu.Unlock()
	pemStr, err := EncodePublicKeyPEM(&k.PublicKey)
	if err != nil {
		rm.t.Error(err)
	}
	id := rm.url(path)
	return map[string]any{
		"@context": []string{ActivityStreams, SecurityContext},
		"id":       id, "type": "Person", "preferredUsername": path[strings.LastIndexByte(path, '/')+1:],
		"inbox": id + "/inbox", "endpoints": map[string]string{"sharedInbox": rm.url("/inbox")},
		"publicKey": map[string]string{"id": keyID, "owner": id, "publicKeyPem": pemStr},
	}
}

func (rm *remote) serve(w http.ResponseWriter, r *http.Request) {
	rm.mu.Lock()
	rm.hits[r.URL.Path]++
	gate := rm.gate
	rm.mu.Unlock()
	if err := Verify(r, nil, rm.local, VerifyOptions{Now: rm.now}); err != nil || !Accepts(r.Header.Get("Accept")) {
		rm.mu.Lock()
		rm.sigFails++
		rm.mu.Unlock()
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	writeDoc := func(v any) {
		w.Header().Set("Content-Type", ContentType)
		_ = json.NewEncoder(w).Encode(v)
	}
	p := r.URL.Path
	switch {
	case p == "/users/alice" || p == "/users/rotating":
		if gate != nil {
			<-gate
		}
		writeDoc(rm.actorDoc(p, rm.url(p)+"#main-key"))
	case p == "/gts/users/bob":
		writeDoc(rm.actorDoc(p, rm.url(p)+"/main-key"))
	case p == "/gts/users/bob/main-key":
		// GoToSocial's minimal actor: the actor's id, not the key URL, and
		// no inbox (as captured in testdata/gotosocial-0.19.2).
		doc := rm.actorDoc("/gts/users/bob", rm.url(p))
		delete(doc, "endpoints")
		delete(doc, "inbox")
		writeDoc(doc)
	case p == "/kd/users/carol":
		writeDoc(rm.actorDoc(p, rm.url(p)+"/key"))
	case p == "/kd/users/carol/key":
		doc := rm.actorDoc("/kd/users/carol", rm.url(p))
		writeDoc(doc["publicKey"])
	case p == "/kd/users/liar/key":
		// A key document naming an owner that does not list it.
		doc := rm.actorDoc("/users/alice", rm.url(p))
		pk := doc["publicKey"].(map[string]string)
		pk["owner"] = rm.url("/users/alice")
		writeDoc(pk)
	case p == "/notes/forged" || p == "/notes/forged2":
		// A note that carries what an actor carries (an inbox, a
		// preferredUsername, a key it owns itself), in the shape of the
		// object a client of a server that keeps every property could
		// publish: not an actor, whatever it carries.
		doc := rm.actorDoc("/users/alice", rm.url(p)+"#main-key")
		doc["id"], doc["type"], doc["content"] = rm.url(p), "Note", "hi"
		doc["attributedTo"], doc["preferredUsername"] = rm.url("/users/alice"), "admin"
		doc["publicKey"].(map[string]string)["owner"] = rm.url(p)
		if p == "/notes/forged2" {
			// Its key owned by the other forged note.
			doc["publicKey"].(map[string]string)["owner"] = rm.url("/notes/forged")
		}
		writeDoc(doc)
	case p == "/ldjson":
		w.Header().Set("Content-Type", LDContentType)
		doc := rm.actorDoc("/users/alice", rm.url("/users/alice")+"#main-key")
		doc["id"] = rm.url(p)
		_ = json.NewEncoder(w).Encode(doc)
	case p == "/redirect":
		http.Redirect(w, r, "/users/alice", http.StatusMovedPermanently)
	case p == "/loop":
		http.Redirect(w, r, "/loop", http.StatusFound)
	case p == "/mismatch":
		writeDoc(rm.actorDoc("/users/alice", rm.url("/users/alice")+"#main-key"))
	case p == "/gone":
		http.Error(w, "gone", http.StatusGone)
	case p == "/busy":
		w.Header().Set("Retry-After", "7")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	case p == "/html":
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html></html>")
	case p == "/big":
		w.Header().Set("Content-Type", ContentType)
		fmt.Fprintf(w, `{"id":%q,"pad":%q}`, rm.url(p), strings.Repeat("x", 2<<10))
	default:
		http.NotFound(w, r)
	}
}

// fetchBundle is what the fetch and resolver tests share.
type fetchBundle struct {
	remote  *remote
	fetcher *Fetcher
	clock   *testClock
}

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func setupFetch(t *testing.T, maxBody int64) *fetchBundle {
	t.Helper()
	local := testKey()
	rm := newRemote(t, &local.PublicKey)
	for _, p := range []string{"/users/alice", "/users/rotating", "/gts/users/bob", "/kd/users/carol", "/notes/forged", "/notes/forged2"} {
		rm.setKey(p, testKey())
	}
	// The remote checks the Date window against the same injected clock.
	clock := &testClock{now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	rm.now = clock.Now
	f, err := NewFetcher(FetcherConfig{
		Client:  NewClient(ClientOptions{AllowPrivate: true, Timeout: 10 * time.Second}),
		Signer:  Signer{KeyID: "https://courier.example/actor#main-key", Key: local},
		MaxBody: maxBody,
		Now:     clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fetchBundle{remote: rm, fetcher: f, clock: clock}
}

func TestFetchActor(t *testing.T) {
	t.Parallel()
	b := setupFetch(t, 1<<10)
	ctx := context.Background()
	a, err := b.fetcher.FetchActor(ctx, b.remote.url("/users/alice"))
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != b.remote.url("/users/alice") || a.SharedInbox != b.remote.url("/inbox") || len(a.Raw) == 0 {
		t.Errorf("actor = %+v", a)
	}
	// A key id URL with a fragment fetches the actor.
	if _, err := b.fetcher.FetchActor(ctx, b.remote.url("/users/alice#main-key")); err != nil {
		t.Errorf("with fragment: %v", err)
	}
	// A redirect is followed and re-signed for the new URL.
	if a, err := b.fetcher.FetchActor(ctx, b.remote.url("/redirect")); err != nil || a.ID != b.remote.url("/users/alice") {
		t.Errorf("redirect: %v", err)
	}
	// A redirect to another host does not vouch for the other host's id.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, b.remote.url("/users/alice"), http.StatusFound)
	}))
	t.Cleanup(other.Close)
	if _, err := b.fetcher.FetchActor(ctx, other.URL+"/users/alice"); !errors.Is(err, ErrIDMismatch) {
		t.Errorf("cross-host redirect: got %v, want ErrIDMismatch", err)
	}
	if _, err := b.fetcher.FetchActor(ctx, b.remote.url("/ldjson")); err != nil {
		t.Errorf("ld+json with profile: %v", err)
	}
	var se *StatusError
	tests := []struct {
		path string
		want error
	}{
		{"/gone", ErrGone},
		{"/nothing-here", ErrNotFound},
		{"/html", ErrContentType},
		{"/big", ErrTooLarge},
		{"/mismatch", ErrIDMismatch},
		{"/loop", nil},
	}
	for _, tt := range tests {
		_, err := b.fetcher.FetchActor(ctx, b.remote.url(tt.path))
		if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("%s: got %v, want %v", tt.path, err, tt.want)
		}
	}
	if b.remote.count("/loop") != 4 {
		t.Errorf("redirect loop fetched %d times, want 1 + 3 redirects", b.remote.count("/loop"))
	}
	_, err = b.fetcher.FetchActor(ctx, b.remote.url("/busy"))
	if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable || se.RetryAfter != 7*time.Second {
		t.Errorf("busy: got %v", err)
	}
	for _, bad := range []string{"ftp://x.example/a", "/relative", "https://user:pw@x.example/", "::"} {
		if _, err := b.fetcher.FetchActor(ctx, bad); !errors.Is(err, ErrBadURL) {
			t.Errorf("%q: got %v, want ErrBadURL", bad, err)
		}
	}
	if n := b.remote.failures(); n != 0 {
		t.Errorf("remote rejected %d signatures", n)
	}
}

func TestFetchRefusesPrivateByDefault(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, &testKey().PublicKey)
	f, err := NewFetcher(FetcherConfig{Signer: Signer{KeyID: "k", Key: testKey()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.FetchActor(context.Background(), rm.url("/users/alice")); !errors.Is(err, ErrPrivateAddress) {
		t.Fatalf("got %v, want ErrPrivateAddress", err)
	}
	if rm.count("/users/alice") != 0 {
		t.Fatal("the request reached the server")
	}
	if _, err := NewFetcher(FetcherConfig{}); err == nil {
		t.Fatal("NewFetcher without a signer succeeded")
	}
}

func TestFetchKey(t *testing.T) {
	t.Parallel()
	b := setupFetch(t, 1<<20)
	ctx := context.Background()
	tests := []struct {
		name, keyPath, actorPath string
		fetches                  map[string]int
	}{
		{"mastodon #main-key", "/users/alice#main-key", "/users/alice", map[string]int{"/users/alice": 1}},
		{"gotosocial /main-key minimal actor", "/gts/users/bob/main-key", "/gts/users/bob", map[string]int{"/gts/users/bob/main-key": 1, "/gts/users/bob": 1}},
		{"standalone key document", "/kd/users/carol/key", "/kd/users/carol", map[string]int{"/kd/users/carol/key": 1, "/kd/users/carol": 1}},
	}
	for _, tt := range tests {
		pub, owner, err := b.fetcher.FetchKey(ctx, b.remote.url(tt.keyPath))
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		b.remote.mu.Lock()
		want := &b.remote.keys[tt.actorPath].PublicKey
		b.remote.mu.Unlock()
		if !want.Equal(pub) || owner.ID != b.remote.url(tt.actorPath) {
			t.Errorf("%s: wrong key or owner %q", tt.name, owner.ID)
		}
		for p, n := range tt.fetches {
			if got := b.remote.count(p); got != n {
				t.Errorf("%s: %s fetched %d times, want %d", tt.name, p, got, n)
			}
		}
	}
	if _, _, err := b.fetcher.FetchKey(ctx, b.remote.url("/users/alice#other-key")); !errors.Is(err, ErrKeyNotFound) {
		t.Errorf("unknown fragment: %v", err)
	}
	if _, _, err := b.fetcher.FetchKey(ctx, b.remote.url("/kd/users/liar/key")); !errors.Is(err, ErrKeyNotFound) {
		t.Errorf("key claiming an owner that does not list it: %v", err)
	}
}

// memStore is an in-memory ActorStore.
type memStore struct {
	mu     sync.Mutex
	actors map[string]*Actor
	at     map[string]time.Time
	puts   int
}

func newMemStore() *memStore {
	return &memStore{actors: map[string]*Actor{}, at: map[string]time.Time{}}
}

func (m *memStore) GetRemoteActor(_ context.Context, id string) (*Actor, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.actors[id]
	if !ok {
		return nil, time.Time{}, nil
	}
	return a, m.at[id], nil
}

func (m *memStore) PutRemoteActor(_ context.Context, a *Actor, raw []byte, fetchedAt time.Time) error {
	if len(raw) == 0 {
		return errors.New("empty raw document")
	}
	// Store what a database would: the raw document, parsed again on read.
	back, err := ParseActor(raw)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.actors[a.ID] = back
	m.at[a.ID] = fetchedAt
	m.puts++
	return nil
}

func setupResolver(t *testing.T) (*fetchBundle, *Resolver, *memStore) {
	t.Helper()
	b := setupFetch(t, 1<<20)
	st := newMemStore()
	r, err := NewResolver(ResolverConfig{Fetcher: b.fetcher, Store: st, Now: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n := b.remote.failures(); n != 0 {
			t.Errorf("remote rejected %d signed fetches", n)
		}
	})
	return b, r, st
}

func TestResolverActorTTL(t *testing.T) {
	t.Parallel()
	b, r, st := setupResolver(t)
	ctx := context.Background()
	id := b.remote.url("/users/alice")
	for range 3 {
		if a, err := r.Actor(ctx, id); err != nil || a.ID != id {
			t.Fatalf("Actor: %v", err)
		}
	}
	if n := b.remote.count("/users/alice"); n != 1 || st.puts != 1 {
		t.Fatalf("fetched %d times, stored %d, want 1 and 1", n, st.puts)
	}
	b.clock.Advance(24*time.Hour + time.Second)
	if _, err := r.Actor(ctx, id); err != nil {
		t.Fatal(err)
	}
	if n := b.remote.count("/users/alice"); n != 2 || st.puts != 2 || b.remote.failures() != 0 {
		t.Fatalf("after TTL fetched %d times, stored %d, %d rejected; want 2, 2, 0", n, st.puts, b.remote.failures())
	}
	// Gone surfaces as ErrGone.
	if _, err := r.Actor(ctx, b.remote.url("/gone")); !errors.Is(err, ErrGone) {
		t.Fatalf("gone: %v", err)
	}
	if _, err := NewResolver(ResolverConfig{Fetcher: b.fetcher}); err == nil {
		t.Fatal("NewResolver without a store succeeded")
	}
}

func TestResolverStaleFallback(t *testing.T) {
	t.Parallel()
	b, r, st := setupResolver(t)
	ctx := context.Background()
	// A stale stored copy of an actor whose server now answers 503.
	busy := b.remote.url("/busy")
	cached := &Actor{ID: busy, Inbox: busy + "/inbox", Raw: []byte(fmt.Sprintf(`{"id":%q,"type":"Person","inbox":%q}`, busy, busy+"/inbox"))}
	if err := st.PutRemoteActor(ctx, cached, cached.Raw, b.clock.Now().Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	a, err := r.Actor(ctx, busy)
	if err != nil || a.ID != busy {
		t.Fatalf("stale fallback: %v", err)
	}
	if b.remote.count("/busy") != 1 {
		t.Fatal("no refetch attempted")
	}
}

func TestResolverKeyRotation(t *testing.T) {
	t.Parallel()
	b, r, _ := setupResolver(t)
	ctx := context.Background()
	keyID := b.remote.url("/users/rotating#main-key")
	pub1, owner, err := r.Key(ctx, keyID, false)
	if err != nil || owner != b.remote.url("/users/rotating") {
		t.Fatalf("Key: %v (owner %q)", err, owner)
	}
	newKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b.remote.setKey("/users/rotating", newKey)
	// Cached: still the old key, no fetch.
	pub, _, err := r.Key(ctx, keyID, false)
	if err != nil || !pub1.(*rsa.PublicKey).Equal(pub) || b.remote.count("/users/rotating") != 1 {
		t.Fatalf("cached key: %v, fetches %d", err, b.remote.count("/users/rotating"))
	}
	// Forced refresh picks up the new key.
	pub, _, err = r.Key(ctx, keyID, true)
	if err != nil || !newKey.PublicKey.Equal(pub) || b.remote.count("/users/rotating") != 2 {
		t.Fatalf("refreshed key: %v, fetches %d", err, b.remote.count("/users/rotating"))
	}
	// A second forced refresh within MinRefresh uses the store.
	if _, _, err := r.Key(ctx, keyID, true); err != nil || b.remote.count("/users/rotating") != 2 {
		t.Fatalf("refresh storm not bounded: %v, fetches %d", err, b.remote.count("/users/rotating"))
	}
	b.clock.Advance(time.Minute)
	if _, _, err := r.Key(ctx, keyID, true); err != nil || b.remote.count("/users/rotating") != 3 {
		t.Fatalf("refresh after MinRefresh: %v, fetches %d", err, b.remote.count("/users/rotating"))
	}
}

func TestResolverGoToSocialKeyCached(t *testing.T) {
	t.Parallel()
	b, r, _ := setupResolver(t)
	ctx := context.Background()
	keyID := b.remote.url("/gts/users/bob/main-key")
	var first crypto.PublicKey
	for i := range 3 {
		pub, owner, err := r.Key(ctx, keyID, false)
		if err != nil || owner != b.remote.url("/gts/users/bob") {
			t.Fatalf("Key: %v (owner %q)", err, owner)
		}
		if i == 0 {
			first = pub
		} else if !first.(*rsa.PublicKey).Equal(pub) {
			t.Fatal("key changed")
		}
	}
	if b.remote.count("/gts/users/bob/main-key") != 1 || b.remote.count("/gts/users/bob") != 1 {
		t.Fatalf("fetches: key %d, actor %d", b.remote.count("/gts/users/bob/main-key"), b.remote.count("/gts/users/bob"))
	}
	// Nothing is stored before a signature verified with the key.
	if a, _, err := r.cfg.Store.GetRemoteActor(ctx, b.remote.url("/gts/users/bob")); err != nil || a != nil {
		t.Fatalf("stored before any signature verified: %v %v", a, err)
	}
	r.Verified(ctx, keyID)
	// A fresh resolver (restart) finds the owner in the store by path.
	r2, err := NewResolver(ResolverConfig{Fetcher: b.fetcher, Store: r.cfg.Store, Now: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r2.Key(ctx, keyID, false); err != nil || b.remote.count("/gts/users/bob/main-key") != 1 {
		t.Fatalf("after restart: %v, key fetches %d", err, b.remote.count("/gts/users/bob/main-key"))
	}
}

func TestResolverSharesConcurrentFetches(t *testing.T) {
	t.Parallel()
	b, r, _ := setupResolver(t)
	gate := make(chan struct{})
	b.remote.mu.Lock()
	b.remote.gate = gate
	b.remote.mu.Unlock()
	keyID := b.remote.url("/users/alice#main-key")
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _, err := r.Key(ctx, keyID, false)
			errs <- err
		}()
	}
	// Wait (bounded) until the one fetch is at the server, then release it.
	deadline := time.Now().Add(10 * time.Second)
	for b.remote.count("/users/alice") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no fetch reached the server")
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := b.remote.count("/users/alice"); got != 1 {
		t.Fatalf("%d concurrent resolutions made %d fetches, want 1", n, got)
	}
}

func TestResolverStaleKeyFallback(t *testing.T) {
	t.Parallel()
	b, r, _ := setupResolver(t)
	ctx := context.Background()
	keyID := b.remote.url("/users/alice#main-key")
	pub, _, err := r.Key(ctx, keyID, false)
	if err != nil {
		t.Fatal(err)
	}
	// The entry expires and the remote goes away.
	b.clock.Advance(25 * time.Hour)
	b.remote.srv.Close()
	got, owner, err := r.Key(ctx, keyID, false)
	if err != nil || !pub.(*rsa.PublicKey).Equal(got) || owner != b.remote.url("/users/alice") {
		t.Fatalf("stale fallback: %v", err)
	}
	// A forced refresh does not fall back: the stored key just failed.
	if _, _, err := r.Key(ctx, keyID, true); err == nil {
		t.Fatal("forced refresh against a dead remote succeeded")
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const limit = time.Hour
	for _, c := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"  ", 0},
		{"120", 2 * time.Minute},
		{" 7 ", 7 * time.Second},
		{"0", 0},
		{"-5", 0},
		{"999999999999999999", limit},
		{"3600", limit},
		{"3601", limit},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{now.Add(48 * time.Hour).Format(http.TimeFormat), limit},
		{"soon", 0},
	} {
		if got := RetryAfter(c.v, now, limit); got != c.want {
			t.Errorf("RetryAfter(%q) = %s, want %s", c.v, got, c.want)
		}
	}
}

// TestNoteIsNotAnActor: a document with an id and an inbox (and a
// preferredUsername and a key it owns) whose type is Note is not an actor:
// neither fetched as one nor taken as a key's owner, whether the key sits
// in the note itself or names another such note as its owner; nothing is
// stored. The same document as a Person is one.
func TestNoteIsNotAnActor(t *testing.T) {
	t.Parallel()
	b, r, st := setupResolver(t)
	ctx := context.Background()
	forged := b.remote.url("/notes/forged")
	if _, err := b.fetcher.FetchActor(ctx, forged); !errors.Is(err, ErrNotActor) || !errors.Is(err, ErrMalformed) {
		t.Fatalf("FetchActor of a note: %v, want ErrNotActor", err)
	}
	if _, err := r.Actor(ctx, forged); !errors.Is(err, ErrNotActor) {
		t.Fatalf("Resolver.Actor of a note: %v, want ErrNotActor", err)
	}
	for _, keyID := range []string{forged + "#main-key", b.remote.url("/notes/forged2") + "#main-key"} {
		if pub, owner, err := r.Key(ctx, keyID, false); err == nil {
			t.Fatalf("Resolver.Key %s: a key %T owned by %s", keyID, pub, owner)
		}
		r.Verified(ctx, keyID)
	}
	if a, _, _ := st.GetRemoteActor(ctx, forged); a != nil {
		t.Fatalf("the note was stored as an actor: %+v", a)
	}
	doc := b.remote.actorDoc("/notes/forged", forged+"#main-key")
	for typ, want := range map[string]bool{"Note": false, "Person": true, "as:Service": true, "Tombstone": false, "Key": false} {
		doc["type"] = typ
		raw, _ := json.Marshal(doc)
		if _, err := ParseActor(raw); (err == nil) != want {
			t.Errorf("ParseActor of a %s: %v", typ, err)
		}
	}
	doc["type"] = []string{"Note", "Person"}
	raw, _ := json.Marshal(doc)
	if _, err := ParseActor(raw); !errors.Is(err, ErrNotActor) {
		t.Errorf("ParseActor of a [Note, Person]: %v, want ErrNotActor", err)
	}
	doc["type"] = []string{"Person", "schema:Thing"}
	raw, _ = json.Marshal(doc)
	if a, err := ParseActor(raw); err != nil || a.Type != "Person" {
		t.Errorf("ParseActor of a [Person, schema:Thing]: %v", err)
	}
}
