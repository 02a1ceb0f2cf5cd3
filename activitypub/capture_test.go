package activitypub

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// gtsHost is the GoToSocial v0.19.2 host of the captures in
// testdata/gotosocial-0.19.2 (see its README).
const gtsHost = "localhost:50441"

// capturedPeer serves documents captured from a real server, over TLS on
// loopback, at the host they were captured from: the client it returns
// dials the loopback server for that host. Like GoToSocial, it answers 401
// to a GET whose signature does not verify against courier's key, except
// at paths served unsigned (its key id).
type capturedPeer struct {
	srv *httptest.Server

	mu   sync.Mutex
	docs map[string][]byte // path -> body
	hits map[string]int
}

func newCapturedPeer(t testing.TB, host string, local *rsa.PublicKey, now func() time.Time, unsigned ...string) (*capturedPeer, *http.Client) {
	t.Helper()
	p := &capturedPeer{docs: map[string][]byte{}, hits: map[string]int{}}
	open := map[string]bool{}
	for _, u := range unsigned {
		open[u] = true
	}
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.hits[r.URL.Path]++
		doc, ok := p.docs[r.URL.Path]
		p.mu.Unlock()
		if r.Host != host {
			http.Error(w, "wrong host "+r.Host, http.StatusBadRequest)
			return
		}
		if !open[r.URL.Path] {
			if err := Verify(r, nil, local, VerifyOptions{Now: now}); err != nil {
				http.Error(w, `{"error":"Unauthorized: http request wasn't signed or http signature was invalid: (verifier)"}`, http.StatusUnauthorized)
				return
			}
		}
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", ContentType)
		_, _ = w.Write(doc)
	}))
	t.Cleanup(p.srv.Close)
	addr := p.srv.Listener.Addr().String()
	pool := x509.NewCertPool()
	pool.AddCert(p.srv.Certificate())
	var d net.Dialer
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
				if a != host && a != host+":443" {
					return nil, errors.New("test: no route to " + a)
				}
				return d.DialContext(ctx, network, addr)
			},
			// httptest's certificate names example.com.
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return p, client
}

func (p *capturedPeer) serve(path string, doc []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.docs[path] = doc
}

func (p *capturedPeer) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[path]
}

// TestFetchKeyGoToSocialCapture resolves bob's key id from what a real
// GoToSocial v0.19.2 serves: at /users/bob/main-key a minimal Person with
// publicKey and no inbox (which ParseActor refuses), at /users/bob the
// actor, which answers 401 to unsigned GETs.
func TestFetchKeyGoToSocialCapture(t *testing.T) {
	t.Parallel()
	local := testKey()
	now := func() time.Time { return time.Date(2026, 12, 1, 8, 24, 12, 0, time.UTC) }
	peer, client := newCapturedPeer(t, gtsHost, &local.PublicKey, now, "/users/bob/main-key")
	keyDoc := readTestdata(t, "gotosocial-0.19.2/objects/key-document.json")
	person := readTestdata(t, "gotosocial-0.19.2/objects/person.json")
	peer.serve("/users/bob/main-key", keyDoc)
	peer.serve("/users/bob", person)

	if _, err := ParseActor(keyDoc); err == nil {
		t.Fatal("the captured key document parses as an actor: the test no longer covers the minimal Person")
	}
	f, err := NewFetcher(FetcherConfig{Client: client, Signer: Signer{KeyID: "https://localhost/actor#main-key", Key: local}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	store := newMemStore()
	r, err := NewResolver(ResolverConfig{Fetcher: f, Store: store, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	keyID := "https://" + gtsHost + "/users/bob/main-key"
	pub, owner, err := r.Key(context.Background(), keyID, false)
	if err != nil {
		t.Fatalf("Key: %v", err)
	}
	var want struct {
		Inbox     string    `json:"inbox"`
		PublicKey PublicKey `json:"publicKey"`
	}
	if err := json.Unmarshal(person, &want); err != nil {
		t.Fatal(err)
	}
	wantPub, err := ParsePublicKeyPEM(want.PublicKey.PublicKeyPem)
	if err != nil {
		t.Fatal(err)
	}
	if !wantPub.(*rsa.PublicKey).Equal(pub) || owner != "https://"+gtsHost+"/users/bob" {
		t.Fatalf("key of %q does not match the actor's", owner)
	}
	if cached, _, err := store.GetRemoteActor(context.Background(), owner); err != nil || cached != nil {
		t.Fatalf("owner stored before a signature verified with its key: %v %v", cached, err)
	}
	r.Verified(context.Background(), keyID)
	cached, _, err := store.GetRemoteActor(context.Background(), owner)
	if err != nil || cached == nil || cached.Inbox != want.Inbox {
		t.Fatalf("cached owner %+v %v: want the whole actor with inbox %s", cached, err, want.Inbox)
	}
	if peer.count("/users/bob/main-key") != 1 || peer.count("/users/bob") != 1 {
		t.Fatalf("fetches: key %d, actor %d", peer.count("/users/bob/main-key"), peer.count("/users/bob"))
	}
	// The captured instance actor and the updated person parse too.
	for _, name := range []string{"instance-actor.json", "person-updated.json"} {
		a, err := ParseActor(readTestdata(t, "gotosocial-0.19.2/objects/"+name))
		if err != nil || a.PublicKey.PublicKeyPem == "" || a.SharedInbox != "" {
			t.Errorf("%s: %+v %v", name, a, err)
		}
	}
}

// TestFetchKeyShapes resolves keys from every shape the fake remote serves
// (hand-written documents, named after the servers whose shapes they
// follow; the GoToSocial capture is TestFetchKeyGoToSocialCapture), and
// refuses keys whose owner does not point back to them.
func TestFetchKeyShapes(t *testing.T) {
	t.Parallel()
	local := testKey()
	now := func() time.Time { return time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC) }
	rsaKey := testKey()
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaPEM, err := EncodePublicKeyPEM(&rsaKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	edMulti, err := EncodeMultikey(edPub)
	if err != nil {
		t.Fatal(err)
	}
	host := "keys.example"
	base := "https://" + host
	peer, client := newCapturedPeer(t, host, &local.PublicKey, now)
	doc := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	actor := func(id string, extra map[string]any) map[string]any {
		m := map[string]any{"@context": []string{ActivityStreams, SecurityContext}, "id": id, "type": "Person", "inbox": id + "/inbox"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	multikey := func(id, controller string) map[string]any {
		return map[string]any{"id": id, "type": "Multikey", "controller": controller, "publicKeyMultibase": edMulti}
	}
	// A list of keys (Mastodon-style publicKey, as an array).
	peer.serve("/list", doc(actor(base+"/list", map[string]any{"publicKey": []any{
		map[string]string{"id": base + "/list#a", "owner": base + "/list", "publicKeyPem": rsaPEM},
		map[string]string{"id": base + "/list#b", "owner": base + "/list", "publicKeyPem": rsaPEM},
	}})))
	// FEP-521a: RSA publicKey plus an Ed25519 Multikey in assertionMethod.
	peer.serve("/fep", doc(actor(base+"/fep", map[string]any{
		"publicKey":       map[string]string{"id": base + "/fep#main-key", "owner": base + "/fep", "publicKeyPem": rsaPEM},
		"assertionMethod": []any{multikey(base+"/fep#ed25519-key", base+"/fep")},
	})))
	// A Multikey served alone at its id, whose controller lists it.
	peer.serve("/mk/key", doc(multikey(base+"/mk/key", base+"/mk")))
	peer.serve("/mk", doc(actor(base+"/mk", map[string]any{"assertionMethod": []any{multikey(base+"/mk/key", base+"/mk")}})))
	// A standalone key document whose owner does not list it.
	peer.serve("/liar/key", doc(map[string]string{"id": base + "/liar/key", "owner": base + "/list", "publicKeyPem": rsaPEM}))
	// A minimal actor at a key id naming an owner on another host.
	peer.serve("/elsewhere/key", doc(map[string]any{"id": "https://other.example/u", "type": "Person",
		"publicKey": map[string]string{"id": base + "/elsewhere/key", "owner": "https://other.example/u", "publicKeyPem": rsaPEM}}))
	// An actor whose key names another owner.
	peer.serve("/stolen", doc(actor(base+"/stolen", map[string]any{
		"publicKey": map[string]string{"id": base + "/stolen#main-key", "owner": base + "/list", "publicKeyPem": rsaPEM}})))

	f, err := NewFetcher(FetcherConfig{Client: client, Signer: Signer{KeyID: "https://courier.example/actor#main-key", Key: local}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		keyID, owner string
		ed           bool
	}{
		{base + "/list#b", base + "/list", false},
		{base + "/fep#main-key", base + "/fep", false},
		{base + "/fep#ed25519-key", base + "/fep", true},
		{base + "/mk/key", base + "/mk", true},
	} {
		pub, owner, err := f.FetchKey(ctx, tc.keyID)
		if err != nil {
			t.Errorf("%s: %v", tc.keyID, err)
			continue
		}
		if owner.ID != tc.owner {
			t.Errorf("%s: owner %s, want %s", tc.keyID, owner.ID, tc.owner)
		}
		if ok := tc.ed && edPub.Equal(pub) || !tc.ed && rsaKey.PublicKey.Equal(pub); !ok {
			t.Errorf("%s: wrong key %T", tc.keyID, pub)
		}
	}
	for _, tc := range []struct {
		keyID string
		want  error
	}{
		{base + "/liar/key", ErrKeyNotFound},
		{base + "/elsewhere/key", ErrIDMismatch},
		{base + "/stolen#main-key", ErrKeyNotFound},
		{base + "/fep#other", ErrKeyNotFound},
	} {
		if _, _, err := f.FetchKey(ctx, tc.keyID); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.keyID, err, tc.want)
		}
	}
}

func TestMultikey(t *testing.T) {
	t.Parallel()
	// The Ed25519 Multikey of the W3C Controlled Identifiers examples.
	pub, err := ParseMultikey("z6MkmM42vxfqZQsv4ehtTjFFxQ4sQKS2w6WR7emozFAn5cxu")
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := pub.(ed25519.PublicKey); !ok || len(k) != ed25519.PublicKeySize {
		t.Fatalf("%T", pub)
	}
	rk := testKey()
	s, err := EncodeMultikey(&rk.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseMultikey(s)
	if err != nil || !rk.PublicKey.Equal(back) {
		t.Fatalf("RSA round trip: %v", err)
	}
	for _, bad := range []string{"", "z", "m6Mk", "z0OIl", "z" + strings.Repeat("2", 5000), "z6Mkm", "z11111"} {
		if _, err := ParseMultikey(bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestResolverGoneKeyRemembered: a key whose fetch answered 410 is
// answered ErrGone without a fetch until GoneTTL has passed.
func TestResolverGoneKeyRemembered(t *testing.T) {
	t.Parallel()
	b, r, _ := setupResolver(t)
	ctx := context.Background()
	keyID := b.remote.url("/gone#main-key")
	for range 3 {
		if _, _, err := r.Key(ctx, keyID, false); !errors.Is(err, ErrGone) {
			t.Fatalf("Key: %v, want ErrGone", err)
		}
	}
	if n := b.remote.count("/gone"); n != 1 {
		t.Fatalf("%d fetches within GoneTTL, want 1", n)
	}
	b.clock.Advance(r.cfg.GoneTTL)
	if _, _, err := r.Key(ctx, keyID, true); !errors.Is(err, ErrGone) {
		t.Fatalf("Key after GoneTTL: %v", err)
	}
	if n := b.remote.count("/gone"); n != 2 {
		t.Fatalf("%d fetches after GoneTTL, want 2", n)
	}
}
