package inbox_test

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// The GoToSocial v0.19.2 captures (testdata/gotosocial-0.19.2, taken from
// ../shared/fixtures; see its README there): courier was https://localhost,
// GoToSocial https://localhost:50441 with its user bob.
const (
	gtsHost    = "localhost:50441"
	gtsBob     = "https://" + gtsHost + "/users/bob"
	gtsBase    = "https://localhost"
	gtsKeyPath = "/users/bob/main-key"
)

// capturedRequest is one requests/*.json file: an inbound request as
// courier received it, byte for byte.
type capturedRequest struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Date    string            `json:"date"`
}

func readCaptured(t testing.TB, name string) capturedRequest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "gotosocial-0.19.2", "requests", name))
	if err != nil {
		t.Fatal(err)
	}
	var c capturedRequest
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

// at is the request's Date.
func (c capturedRequest) at(t testing.TB) time.Time {
	t.Helper()
	at, err := http.ParseTime(c.Date)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// request rebuilds the captured request against base (courier's loopback
// server), with its Host, headers and body as captured.
func (c capturedRequest) request(t testing.TB, base string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(c.Method, base+c.Path, bytes.NewReader([]byte(c.Body)))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c.Headers {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		if strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Accept-Encoding") {
			continue // set by the client from the body
		}
		req.Header.Set(k, v)
	}
	return req
}

// gtsPeer serves the documents GoToSocial served, over TLS on loopback, as
// GoToSocial does: its key id unsigned, the actor only to a GET signed by
// courier's instance key (401 otherwise, as captured).
type gtsPeer struct {
	srv   *httptest.Server
	local *rsa.PublicKey
	now   func() time.Time

	mu   sync.Mutex
	docs map[string][]byte
	hits map[string]int
}

func newGTSPeer(t testing.TB, local *rsa.PublicKey, now func() time.Time) (*gtsPeer, *http.Client) {
	t.Helper()
	p := &gtsPeer{local: local, now: now, docs: map[string][]byte{}, hits: map[string]int{}}
	for path, file := range map[string]string{gtsKeyPath: "key-document.json", "/users/bob": "person.json"} {
		p.serveFile(t, path, file)
	}
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.hits[r.URL.Path]++
		doc, ok := p.docs[r.URL.Path]
		p.mu.Unlock()
		if r.URL.Path != gtsKeyPath {
			if err := activitypub.Verify(r, nil, p.local, activitypub.VerifyOptions{Now: p.now}); err != nil {
				http.Error(w, `{"error":"Unauthorized: http request wasn't signed or http signature was invalid: (verifier)"}`, http.StatusUnauthorized)
				return
			}
		}
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", activitypub.ContentType)
		_, _ = w.Write(doc)
	}))
	t.Cleanup(p.srv.Close)
	addr := p.srv.Listener.Addr().String()
	pool := x509.NewCertPool()
	pool.AddCert(p.srv.Certificate())
	var d net.Dialer
	return p, &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
				if a != gtsHost {
					return nil, errors.New("test: no route to " + a)
				}
				return d.DialContext(ctx, network, addr)
			},
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"}, // httptest's certificate
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (p *gtsPeer) serveFile(t testing.TB, path, file string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "gotosocial-0.19.2", "objects", file))
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.docs[path] = b
}

func (p *gtsPeer) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[path]
}

// fixedClock is a clock a test sets.
type fixedClock struct{ ns atomic.Int64 }

func (c *fixedClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }
func (c *fixedClock) Now() time.Time  { return time.Unix(0, c.ns.Load()).UTC() }

// setupGTS builds courier as it was captured: base https://localhost, its
// inbox on a loopback server, key fetches routed to the GoToSocial peer,
// and the inbox, resolver and peer on one fixed clock.
func setupGTS(t testing.TB) (*testBundle, *gtsPeer, *fixedClock) {
	t.Helper()
	clock := &fixedClock{}
	clock.set(time.Date(2026, 12, 1, 8, 24, 12, 0, time.UTC))
	b := &testBundle{ctx: context.Background(), health: &healthLog{}, prom: prometheus.NewRegistry()}
	b.loc = storetest.Location(t)
	b.db = openDB(t, b.loc, "NORMAL")
	b.srv = httptest.NewUnstartedServer(nil)
	b.base = "http://" + b.srv.Listener.Addr().String()
	b.st = store.New(b.db, gtsBase, nil)
	peer, client := newGTSPeer(t, &key(t, keyInstance).PublicKey, clock.Now)
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{
		Client: client, Now: clock.Now,
		Signer: activitypub.Signer{KeyID: gtsBase + "/actor#main-key", Key: key(t, keyInstance)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if b.resolver, err = activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: b.st, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.NewWithConfig(b.prom, metrics.Config{NoRuntimeCollectors: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := inbox.Config{DB: b.db, Store: b.st, Resolver: b.resolver, Metrics: m.Inbox(), Health: b.health, Now: clock.Now}
	if b.handler, err = inbox.New(cfg); err != nil {
		t.Fatal(err)
	}
	if b.importer, err = inbox.NewImporter(cfg); err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	b.handler.Register(r)
	b.srv.Config.Handler = r
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	b.runWorker(t)
	return b, peer, clock
}

// TestGoToSocialReplay replays every inbox POST captured from a real
// GoToSocial v0.19.2, byte for byte with its real signature, through the
// real inbox with the clock fixed at the request's Date; bob's key is
// resolved from the captured documents served over loopback TLS (the
// minimal Person at the key id, then the actor). Each request must be
// answered 202 and imported with its effect, in the order GoToSocial sent
// them.
func TestGoToSocialReplay(t *testing.T) {
	b, peer, clock := setupGTS(t)
	ctx := b.ctx
	alice := b.localActor(t, "alice", false)
	if alice.URI != gtsBase+"/users/alice" {
		t.Fatalf("alice is %s", alice.URI)
	}
	// The note bob reacts to and alice's Follow of bob, with the ids they
	// had when captured (the store derives ids from random event ids).
	const noteURI = gtsBase + "/objects/c6bf58a7-ea87-587f-9137-6d7a6a6f06b9"
	const followID = gtsBase + "/activities/43bb37f0-a838-5392-b3a7-f150047e0028"
	_, note, err := notetest.Create(ctx, b.st, alice, notetest.Input{Content: "Hello GoToSocial", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.Follow(ctx, alice, gtsBob); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Write.ExecContext(ctx, `UPDATE objects SET uri = ? WHERE uri = ?`, noteURI, note.URI); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Write.ExecContext(ctx, `UPDATE following SET follow_activity_id = ? WHERE target_uri = ?`, followID, gtsBob); err != nil {
		t.Fatal(err)
	}
	status := func(id string) *store.Object {
		t.Helper()
		o, err := b.st.ObjectByURI(ctx, gtsBob+"/statuses/"+id)
		if err != nil {
			t.Fatalf("status %s: %v", id, err)
		}
		return o
	}
	counts := func(likes, shares int) {
		t.Helper()
		l, s, err := b.st.ReactionCounts(ctx, noteURI)
		if err != nil || l != likes || s != shares {
			t.Fatalf("likes %d shares %d (%v), want %d %d", l, s, err, likes, shares)
		}
	}
	follower := func(want bool) {
		t.Helper()
		if ok, err := b.st.IsFollower(ctx, alice.ID, gtsBob); err != nil || ok != want {
			t.Fatalf("bob follows alice: %v (%v), want %v", ok, err, want)
		}
	}
	blocked := func(want int) {
		t.Helper()
		if n := b.count(t, `SELECT COUNT(*) FROM blocks WHERE direction = 'incoming' AND remote_uri = ?`, gtsBob); n != want {
			t.Fatalf("%d incoming blocks, want %d", n, want)
		}
	}

	for _, tc := range []struct {
		name    string
		outcome string
		before  func()
		check   func()
	}{
		{"follow", inbox.OutcomeFollowed, nil, func() {
			follower(true)
			if n := b.count(t, `SELECT COUNT(*) FROM activities WHERE type = 'Accept' AND object_uri LIKE '%/follow/0253YW295DB4MTEV4HXWV6R9KC'`); n != 1 {
				t.Fatalf("%d Accepts enqueued", n)
			}
		}},
		{"accept-follow", inbox.OutcomeAnswered, nil, func() {
			if st, err := b.st.FollowingState(ctx, alice.ID, gtsBob); err != nil || st != store.StateAccepted {
				t.Fatalf("alice follows bob: %q %v", st, err)
			}
		}},
		{"create-note", inbox.OutcomeStored, nil, func() {
			if o := status("01M8RB8NGF1SCYDTW51SDNST7E"); o.AttributedTo != gtsBob || !strings.Contains(o.Content, "courier") {
				t.Fatalf("%+v", o)
			}
		}},
		{"like", inbox.OutcomeCounted, nil, func() { counts(1, 0) }},
		{"announce", inbox.OutcomeCounted, nil, func() { counts(1, 1) }},
		{"undo-follow", inbox.OutcomeUnfollowed, nil, func() { follower(false) }},
		{"update-note", inbox.OutcomeStored, nil, func() {
			if o := status("01M8RB8NGF1SCYDTW51SDNST7E"); !strings.Contains(o.Content, "edited") || o.Updated.IsZero() {
				t.Fatalf("not edited: %+v", o)
			}
		}},
		{"create-note-reply", inbox.OutcomeStored, nil, func() {
			o := status("01M8RB8QM59C2ETQWE6DKGESMF")
			if o.InReplyTo != noteURI {
				t.Fatalf("reply to %q", o.InReplyTo)
			}
			// Its Mention of alice is kept with the note.
			var doc struct {
				Tag struct{ Type, Href, Name string } `json:"tag"`
			}
			if err := json.Unmarshal(o.Document, &doc); err != nil || doc.Tag.Type != "Mention" ||
				doc.Tag.Href != alice.URI || doc.Tag.Name != "@alice@localhost" {
				t.Fatalf("stored tag %+v (%v)", doc.Tag, err)
			}
		}},
		{"create-note-followers-only", inbox.OutcomeStored, nil, func() {
			if o := status("01M8RB8QNNRKEG3YY4QBBT32P4"); len(o.To) != 1 || o.To[0] != gtsBob+"/followers" {
				t.Fatalf("to %v", o.To)
			}
		}},
		{"undo-like", inbox.OutcomeUndone, nil, func() { counts(0, 1) }},
		{"undo-announce", inbox.OutcomeUndone, nil, func() { counts(0, 0) }},
		{"update-person", inbox.OutcomeActorUpdate, func() { peer.serveFile(t, "/users/bob", "person-updated.json") }, func() {
			a, _, err := b.st.GetRemoteActor(ctx, gtsBob)
			if err != nil || a == nil || !strings.HasPrefix(a.Name, "Bob ") {
				t.Fatalf("cached bob not refreshed: %+v %v", a, err)
			}
		}},
		{"create-note-direct", inbox.OutcomeStored, nil, func() {
			if o := status("01M8RB8R7HBCECME4Q01PT0MBT"); len(o.To) != 1 || o.To[0] != alice.URI {
				t.Fatalf("to %v", o.To)
			}
		}},
		{"create-note-later-deleted", inbox.OutcomeStored, nil, nil},
		{"delete-note", inbox.OutcomeDeleted, nil, func() {
			if o := status("01M8RB8RVG1NEKBT4B4ZGN26ER"); !o.Deleted() {
				t.Fatal("not tombstoned")
			}
		}},
		{"block", inbox.OutcomeBlocked, nil, func() { blocked(1) }},
		{"undo-block", inbox.OutcomeUndone, nil, func() { blocked(0) }},
	} {
		c := readCaptured(t, "inbox-post-"+tc.name+".json")
		clock.set(c.at(t).Add(time.Second))
		if tc.before != nil {
			tc.before()
		}
		if st, resp := do(t, c.request(t, b.base)); st != http.StatusAccepted {
			t.Fatalf("%s: %d %s", tc.name, st, resp)
		}
		b.drain(t)
		var head struct{ ID string }
		if err := json.Unmarshal([]byte(c.Body), &head); err != nil {
			t.Fatal(err)
		}
		if got := b.outcome(t, head.ID); got != tc.outcome {
			t.Fatalf("%s: outcome %q, want %q", tc.name, got, tc.outcome)
		}
		if tc.check != nil {
			tc.check()
		}
	}
	// bob's key was fetched once, from the minimal Person, and his actor
	// twice: for the key, and again for his Update.
	if k, a := peer.count(gtsKeyPath), peer.count("/users/bob"); k != 1 || a != 2 {
		t.Fatalf("fetches: key %d, actor %d", k, a)
	}
}

// TestGoToSocialReplayFirstContact is the first handshake that failed: a
// GoToSocial Follow from an actor courier has never seen is accepted (not
// 400 missing_field), and the same bytes two hours after their Date are
// refused 401.
func TestGoToSocialReplayFirstContact(t *testing.T) {
	b, _, clock := setupGTS(t)
	alice := b.localActor(t, "alice", true)
	c := readCaptured(t, "inbox-post-follow.json")
	clock.set(c.at(t).Add(2 * time.Hour))
	if st, resp := do(t, c.request(t, b.base)); st != http.StatusUnauthorized {
		t.Fatalf("two hours late: %d %s", st, resp)
	}
	clock.set(c.at(t))
	if st, resp := do(t, c.request(t, b.base)); st != http.StatusAccepted {
		t.Fatalf("at its Date: %d %s", st, resp)
	}
	b.drain(t)
	if got := b.outcome(t, "https://"+gtsHost+"/users/bob/follow/0253YW295DB4MTEV4HXWV6R9KC"); got != inbox.OutcomePending {
		t.Fatalf("outcome %q", got)
	}
	if ok, err := b.st.IsFollower(b.ctx, alice.ID, gtsBob); err != nil || ok {
		t.Fatalf("a locked actor's pending follower counts as a follower: %v %v", ok, err)
	}
}
