package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
)

// setupBase is setup with the store's base URL set to base (the server
// still listens on loopback), for replaying requests captured against
// that base, and with cfg (its Store set here). An empty base is the
// server's own URL.
func setupBase(t *testing.T, base string, cfg Config) *testBundle {
	t.Helper()
	ctx := context.Background()
	db := storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
	var handler http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	clock := &testClock{t: time.Date(2026, 12, 1, 8, 24, 12, 0, time.UTC)}
	if base == "" {
		base = srv.URL
	}
	cfg.Store = store.New(db, base, clock.Now)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	handler = s.Handler()
	b := &testBundle{ctx: ctx, db: db, st: cfg.Store, srv: srv, base: srv.URL, clock: clock}
	b.alice, b.token = b.actor(t, "alice")
	return b
}

// capturedGET is one testdata/gotosocial-0.19.2/get-*.json: a GET that a
// real GoToSocial v0.19.2 sent to courier (at https://localhost), with its
// headers and signature as sent.
type capturedGET struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
}

func (b *testBundle) replayGET(t *testing.T, file string) response {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "gotosocial-0.19.2", file))
	if err != nil {
		t.Fatal(err)
	}
	var c capturedGET
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(b.ctx, c.Method, b.base+c.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c.Headers {
		switch strings.ToLower(k) {
		case "host":
			req.Host = v
		case "accept-encoding":
		default:
			req.Header.Set(k, v)
		}
	}
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

// TestGoToSocialCapturedGETs replays the GETs a real GoToSocial v0.19.2
// sent when its user looked alice up and first met courier's instance
// actor. Two failed at capture time: WebFinger for the instance actor
// (404, so GoToSocial refused every GET courier signed) and the instance
// actor's outbox (404).
func TestGoToSocialCapturedGETs(t *testing.T) {
	t.Parallel()
	b := setupBase(t, "https://localhost", Config{})
	for _, tc := range []struct {
		file   string
		status int
		check  func(t *testing.T, r response)
	}{
		{"get-webfinger-instance-actor.json", 200, func(t *testing.T, r response) {
			var jrd activitypub.JRD
			if err := json.Unmarshal(r.Body, &jrd); err != nil || jrd.Self() != "https://localhost/actor" || jrd.Subject != "acct:localhost@localhost" {
				t.Fatalf("%s (%v)", r.Body, err)
			}
		}},
		{"get-instance-actor.json", 200, func(t *testing.T, r response) {
			a, err := activitypub.ParseActor(r.Body)
			if err != nil || a.PreferredUsername != "localhost" || a.Outbox != "https://localhost/actor/outbox" {
				t.Fatalf("%+v %v", a, err)
			}
		}},
		{"get-instance-actor-outbox.json", 200, func(t *testing.T, r response) {
			m := r.json(t)
			if m["type"] != "OrderedCollection" || m["id"] != "https://localhost/actor/outbox" || m["totalItems"] != 0.0 {
				t.Fatalf("%s", r.Body)
			}
		}},
		{"get-webfinger-alice.json", 200, func(t *testing.T, r response) {
			var jrd activitypub.JRD
			if err := json.Unmarshal(r.Body, &jrd); err != nil || jrd.Self() != "https://localhost/users/alice" {
				t.Fatalf("%s (%v)", r.Body, err)
			}
		}},
		{"get-actor-alice.json", 200, func(t *testing.T, r response) {
			if m := r.json(t); m["featured"] != "https://localhost/users/alice/featured" {
				t.Fatalf("featured %v", m["featured"])
			}
		}},
		{"get-followers-alice.json", 200, nil},
		{"get-following-alice.json", 200, nil},
		{"get-outbox-alice.json", 200, nil},
		{"get-nodeinfo-well-known.json", 200, nil},
		{"get-nodeinfo-2.1.json", 200, nil},
		{"get-robots-txt.json", 404, nil},
		{"get-api-v1-instance.json", 404, nil},
	} {
		r := b.replayGET(t, tc.file)
		if r.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d: %s", tc.file, r.StatusCode, tc.status, r.Body)
			continue
		}
		if tc.check != nil {
			tc.check(t, r)
		}
	}
}

// TestInstanceActorWithPort: with a port in the base URL (the test server's
// own), the instance actor's preferredUsername is the bare host, and
// WebFinger finds it by that name and by its id; an actor's
// featured collection is served, empty.
func TestInstanceActorWithPort(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse(b.base)
	if err != nil || u.Port() == "" {
		t.Fatalf("base %s has no port", b.base)
	}
	a, err := activitypub.ParseActor(b.get(t, "/actor").Body)
	if err != nil {
		t.Fatal(err)
	}
	if a.PreferredUsername != u.Hostname() || strings.Contains(a.PreferredUsername, ":") {
		t.Fatalf("preferredUsername %q", a.PreferredUsername)
	}
	for _, res := range []string{"acct:" + a.PreferredUsername + "@" + u.Host, b.base + "/actor"} {
		r := b.do(t, http.MethodGet, "/.well-known/webfinger?resource="+url.QueryEscape(res), nil)
		wantStatus(t, r, http.StatusOK)
		var jrd activitypub.JRD
		if err := json.Unmarshal(r.Body, &jrd); err != nil || jrd.Self() != b.base+"/actor" || jrd.Subject != "acct:"+u.Hostname()+"@"+u.Host {
			t.Fatalf("%s: %s", res, r.Body)
		}
	}
	for _, res := range []string{"acct:" + a.PreferredUsername + "@elsewhere.test", "acct:other@" + u.Host} {
		r := b.do(t, http.MethodGet, "/.well-known/webfinger?resource="+url.QueryEscape(res), nil)
		wantStatus(t, r, http.StatusNotFound)
	}
	out := b.get(t, "/actor/outbox")
	wantStatus(t, out, http.StatusOK)
	if !bytes.Contains(out.Body, []byte(`"orderedItems":[]`)) {
		t.Fatalf("%s", out.Body)
	}
	f := b.get(t, "/users/alice/featured")
	wantStatus(t, f, http.StatusOK)
	if m := f.json(t); m["id"] != b.base+"/users/alice/featured" || m["totalItems"] != 0.0 {
		t.Fatalf("%s", f.Body)
	}
	wantStatus(t, b.get(t, "/users/nobody/featured"), http.StatusNotFound)
}

// TestGoToSocialSignedGETsAuthorizedFetch replays the signed GETs a real
// GoToSocial v0.19.2 sent (bob's real signatures, the clock fixed at their
// Date) against courier with --authorized-fetch: bob's key is resolved
// from the captured documents served over loopback TLS (the minimal Person
// at the key id, then the actor), and every document is served; the same
// GETs unsigned are refused 401.
func TestGoToSocialSignedGETsAuthorizedFetch(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 8, 24, 13, 0, time.UTC)
	now := func() time.Time { return at }
	keys := &lazyKeys{}
	b := setupBase(t, "https://localhost", Config{Keys: keys, AuthorizedFetch: true, Now: now})
	docs := map[string]string{"/users/bob/main-key": "key-document.json", "/users/bob": "person.json"}
	peer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		raw, err := os.ReadFile(filepath.Join("testdata", "gotosocial-0.19.2", "objects", f))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", activitypub.ContentType)
		_, _ = w.Write(raw)
	}))
	t.Cleanup(peer.Close)
	pool := x509.NewCertPool()
	pool.AddCert(peer.Certificate())
	addr := peer.Listener.Addr().String()
	var d net.Dialer
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
				if a != "localhost:50441" {
					return nil, fmt.Errorf("test: no route to %s", a)
				}
				return d.DialContext(ctx, network, addr)
			},
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"}, // httptest's certificate
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	inst, err := b.st.InstanceActor(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := activitypub.NewFetcher(activitypub.FetcherConfig{Client: client, Signer: inst.Signer(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if keys.r, err = activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: f, Store: b.st, Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"get-actor-alice.json", "get-followers-alice.json", "get-following-alice.json",
		"get-outbox-alice.json", "get-instance-actor.json", "get-instance-actor-outbox.json"} {
		if r := b.replayGET(t, file); r.StatusCode != http.StatusOK {
			t.Errorf("%s signed: %d %s", file, r.StatusCode, r.Body)
		}
	}
	for _, p := range []string{"/users/alice", "/users/alice/outbox", "/actor/outbox"} {
		wantStatus(t, b.get(t, p), http.StatusUnauthorized)
	}
	wantStatus(t, b.get(t, "/actor"), http.StatusOK)
}
