package inbox_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rsa"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
)

// The tests run the real acceptance path: a courier HTTP server on
// loopback (httptest) with the inbox mounted, a real SQLite file in
// t.TempDir() migrated by the real runner, a real activitypub Resolver whose
// signed GETs go to a fake remote server on loopback that serves actor
// documents and checks every fetch's signature, and requests signed with
// real RSA keys. synchronous=NORMAL keeps the suite fast; the benchmark and
// the crash test use the production FULL.

// Test keys: RSA-2048 generation is slow, so a few are made once.
var (
	keysOnce sync.Once
	testKeys []*rsa.PrivateKey
)

func key(t testing.TB, i int) *rsa.PrivateKey {
	t.Helper()
	keysOnce.Do(func() {
		for range 4 {
			k, err := activitypub.GenerateKey()
			if err != nil {
				panic(err)
			}
			testKeys = append(testKeys, k)
		}
	})
	return testKeys[i]
}

// Key roles.
const (
	keyInstance = iota // signs courier's fetches
	keyRemote          // remote actors' first key
	keyRotated         // a remote actor's key after rotation
	keyStranger        // a key nobody publishes
)

// remote is a fediverse server on loopback: it serves actor documents at
// /users/{name}, answers 410 for gone actors, and refuses fetches whose
// signature does not verify with courier's instance key.
type remote struct {
	srv         *httptest.Server
	instancePub *rsa.PublicKey

	mu      sync.Mutex
	actors  map[string]*remoteActor
	fetches map[string]int
	badGets atomic.Int64
	// posts, when not nil, records the body of every POST (answered 202
	// unverified), by path.
	posts map[string][][]byte
}

type remoteActor struct {
	key  *rsa.PrivateKey
	gone bool
	ed   ed25519.PrivateKey // published as a Multikey when set
	aka  []string           // alsoKnownAs, when set
}

func newRemote(t testing.TB) *remote {
	t.Helper()
	r := &remote{instancePub: &key(t, keyInstance).PublicKey, actors: map[string]*remoteActor{}, fetches: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *remote) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodPost && r.recordPost(req) {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if err := activitypub.Verify(req, nil, r.instancePub, activitypub.VerifyOptions{}); err != nil {
		r.badGets.Add(1)
		http.Error(w, "unsigned fetch", http.StatusUnauthorized)
		return
	}
	r.mu.Lock()
	r.fetches[req.URL.Path]++
	a := r.actors[req.URL.Path]
	r.mu.Unlock()
	switch {
	case a == nil:
		http.NotFound(w, req)
		return
	case a.gone:
		http.Error(w, "gone", http.StatusGone)
		return
	}
	pem, err := activitypub.EncodePublicKeyPEM(&a.key.PublicKey)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	id := r.srv.URL + req.URL.Path
	doc := map[string]any{
		"@context":          []string{activitypub.ActivityStreams, activitypub.SecurityContext},
		"id":                id,
		"type":              "Person",
		"preferredUsername": path.Base(req.URL.Path),
		"inbox":             id + "/inbox",
		"outbox":            id + "/outbox",
		"followers":         id + "/followers",
		"endpoints":         map[string]string{"sharedInbox": r.srv.URL + "/inbox"},
		"publicKey":         map[string]string{"id": id + "#main-key", "owner": id, "publicKeyPem": pem},
	}
	if a.ed != nil { // FEP-521a, as courier publishes its own
		doc["assertionMethod"] = []activitypub.Multikey{
			activitypub.NewEd25519Multikey(id+"#ed25519-key", id, a.ed.Public().(ed25519.PublicKey))}
	}
	if a.aka != nil {
		doc["alsoKnownAs"] = a.aka
	}
	w.Header().Set("Content-Type", activitypub.ContentType)
	_ = json.NewEncoder(w).Encode(doc)
}

// recordPost records req's body when the remote records POSTs.
func (r *remote) recordPost(req *http.Request) bool {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.posts == nil || err != nil {
		return false
	}
	r.posts[req.URL.Path] = append(r.posts[req.URL.Path], body)
	return true
}

// setAlsoKnownAs publishes ids as actor name's alsoKnownAs.
func (r *remote) setAlsoKnownAs(name string, ids ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.actors["/users/"+name].aka = ids
}

// add publishes actor name at /users/{name} with key k.
func (r *remote) add(name string, k *rsa.PrivateKey) { r.addPath("/users/"+name, k) }

// addPath publishes an actor at path with key k, or gives it key k.
func (r *remote) addPath(path string, k *rsa.PrivateKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.actors[path] = &remoteActor{key: k}
}

func (r *remote) setGone(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.actors["/users/"+name].gone = true
}

func (r *remote) fetchCount(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fetches["/users/"+name]
}

func (r *remote) actor(name string) string { return r.srv.URL + "/users/" + name }
func (r *remote) keyID(name string) string { return r.actor(name) + "#main-key" }
func (r *remote) url(path string) string   { return r.srv.URL + path }

// healthLog records signs of life.
type healthLog struct {
	mu    sync.Mutex
	hosts []string
}

func (h *healthLog) SignOfLife(_ context.Context, host string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hosts = append(h.hosts, host)
}

func (h *healthLog) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.hosts...)
}

type testBundle struct {
	ctx      context.Context
	db       *sqldb.DB
	loc      string // where db lives, to open it again as another process would
	st       *store.Store
	base     string
	srv      *httptest.Server
	remote   *remote
	prom     *prometheus.Registry
	handler  *inbox.Handler
	importer *inbox.Importer
	health   *healthLog
	resolver *activitypub.Resolver
	seq      atomic.Int64
}

type options struct {
	sync     string        // SQLite synchronous (default NORMAL)
	keyTTL   time.Duration // inbox key cache TTL (default the package's)
	actorTTL time.Duration // the resolver's actor cache TTL (default its own)
	noWorker bool          // do not run a worker (the crash test runs its own)
	// loopbackOnly makes key fetches dial only the remote server, whatever
	// host a key id names (the fuzz target names arbitrary hosts).
	loopbackOnly bool
	domainTTL    time.Duration    // inbox domain-block cache TTL (default the package's)
	now          func() time.Time // inbox clock (default time.Now)
	schemes      inbox.Schemes    // learns RFC 9421 senders (default none)
	// budget is every remote host's inbound budget, requests a minute
	// (default 1e6: the tests post hundreds of activities from the one
	// loopback remote; TestHostBudget runs the package's default). The
	// byte budget is 100 KiB per request.
	budget      float64
	budgetBytes int64 // the byte budget a minute, when set
	// gate puts the production fetch gate (activitypub.FetchGate with its
	// defaults) in front of the resolver's client, as cmd/courier does.
	gate bool
	// tombstones bounds the remote tombstones (default the package's).
	tombstones int
}

// openDB opens and migrates the store at loc (storetest.Location: a SQLite
// file, or a PostgreSQL database with COURIER_TEST_STORE=postgres).
func openDB(t testing.TB, loc, syncMode string) *sqldb.DB {
	t.Helper()
	return storetest.Open(t, loc, storetest.Options{Synchronous: syncMode})
}

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

func setup(t testing.TB, opts ...options) *testBundle {
	t.Helper()
	var o options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.sync == "" {
		o.sync = "NORMAL"
	}
	b := &testBundle{ctx: context.Background(), health: &healthLog{}, prom: prometheus.NewRegistry()}
	b.loc = storetest.Location(t)
	b.db = openDB(t, b.loc, o.sync)
	b.srv = httptest.NewUnstartedServer(nil)
	b.base = "http://" + b.srv.Listener.Addr().String()
	b.st = store.New(b.db, b.base, nil)
	b.remote = newRemote(t)

	copts := activitypub.ClientOptions{AllowPrivate: true, Timeout: 10 * time.Second}
	if o.gate {
		copts.Gate = activitypub.NewFetchGate(activitypub.FetchGateOptions{})
	}
	client := activitypub.NewClient(copts)
	if o.loopbackOnly {
		remoteAddr := b.remote.srv.Listener.Addr().String()
		var d net.Dialer
		client = &http.Client{
			Timeout: 2 * time.Second,
			Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if addr != remoteAddr {
					return nil, fmt.Errorf("test: no route to %s", addr)
				}
				return d.DialContext(ctx, network, addr)
			}},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{
		Client: client,
		Signer: activitypub.Signer{KeyID: b.base + "/actor#main-key", Key: key(t, keyInstance)},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.resolver, err = activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: b.st, TTL: o.actorTTL})
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.NewWithConfig(b.prom, metrics.Config{NoRuntimeCollectors: true})
	if err != nil {
		t.Fatal(err)
	}
	if o.budget == 0 {
		o.budget = 1e6
	}
	if o.budgetBytes == 0 {
		o.budgetBytes = max(int64(o.budget*100*1024), inbox.DefaultMaxBody)
	}
	cfg := inbox.Config{
		DB: b.db, Store: b.st, Resolver: b.resolver, Metrics: m.Inbox(), Health: b.health, KeyCacheTTL: o.keyTTL,
		DomainBlockTTL: o.domainTTL, Now: o.now, Schemes: o.schemes,
		HostRequestsPerMinute: o.budget, HostBytesPerMinute: o.budgetBytes, TombstoneLimit: o.tombstones,
	}
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

	if !o.noWorker {
		b.runWorker(t)
	}
	return b
}

// runWorker runs the db bus with the import handler until the test ends.
func (b *testBundle) runWorker(t testing.TB) {
	t.Helper()
	reg := outbox.NewRegistry()
	b.importer.Register(reg)
	w, err := outbox.NewWorker(outbox.WorkerConfig{
		DB: b.db.Write, Read: b.db.Read, Registry: reg, Concurrency: 4, PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	b.db.OnWrite(w.Notify)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
}

// drain waits until the outbox has nothing pending or in progress.
func (b *testBundle) drain(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE status IN ('pending', 'processing')`)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events still pending after 20s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *testBundle) count(t testing.TB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := b.db.Read.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// localActor inserts a local actor (with a shared test key, so no key is
// generated per test).
func (b *testBundle) localActor(t testing.TB, name string, manual bool) *store.Actor {
	t.Helper()
	k := key(t, keyInstance)
	priv, err := activitypub.EncodePrivateKeyPEM(k)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := activitypub.EncodePublicKeyPEM(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	if err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO actors (name, manually_approves_followers, private_key_pem, public_key_pem,
			token_hash, created_at, updated_at) VALUES (?, ?, ?, ?, 'x', ?, ?)`, name, manual, priv, pub, now, now)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	a, err := b.st.ActorByName(b.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// id returns a fresh activity id on the remote host.
func (b *testBundle) id(kind string) string {
	return b.remote.url(fmt.Sprintf("/activities/%s/%d", kind, b.seq.Add(1)))
}

// signer signs requests as a remote key.
type signer struct {
	keyID string
	key   *rsa.PrivateKey
	at    time.Time // zero: now
}

// as returns the signer of remote actor name with its current key.
func (b *testBundle) as(t testing.TB, name string) signer {
	b.remote.mu.Lock()
	defer b.remote.mu.Unlock()
	return signer{keyID: b.remote.keyID(name), key: b.remote.actors["/users/"+name].key}
}

// request builds a POST of body to path signed by s (unsigned when s.key
// is nil).
func (b *testBundle) request(t testing.TB, path string, body []byte, s signer) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", activitypub.ContentType)
	if s.key != nil {
		at := s.at
		if at.IsZero() {
			at = time.Now()
		}
		if err := activitypub.SignRequest(req, body, s.keyID, s.key, at); err != nil {
			t.Fatal(err)
		}
	}
	return req
}

// do sends req and returns the status and the body.
func do(t testing.TB, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// post signs and posts an activity to the shared inbox and returns the status.
func (b *testBundle) post(t testing.TB, s signer, activity map[string]any) int {
	t.Helper()
	status, _ := do(t, b.request(t, "/inbox", mustJSON(t, activity), s))
	return status
}

// mustPost posts and requires 202.
func (b *testBundle) mustPost(t testing.TB, s signer, activity map[string]any) {
	t.Helper()
	req := b.request(t, "/inbox", mustJSON(t, activity), s)
	if status, body := do(t, req); status != http.StatusAccepted {
		t.Fatalf("POST %s %v: %d %s", activity["type"], activity["id"], status, body)
	}
}

// result returns the value of courier_inbox_requests_total{result}.
func (b *testBundle) result(t testing.TB, result string) int {
	t.Helper()
	mfs, err := b.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "courier_inbox_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// outcome returns the import outcome of the activity id ("" while not
// imported).
func (b *testBundle) outcome(t testing.TB, id string) string {
	t.Helper()
	var o sql.NullString
	err := b.db.Read.QueryRow(`SELECT outcome FROM inbox_activities WHERE activity_id = ?`, id).Scan(&o)
	if errors.Is(err, sql.ErrNoRows) {
		// Answered 202 and not recorded: the inbox found that it concerns
		// no one here (see relevance.go), which is an ignored activity.
		return inbox.OutcomeIgnored
	}
	if err != nil {
		t.Fatalf("outcome of %s: %v", id, err)
	}
	return o.String
}

// follow has local actor a follow target (a pending Follow), so that what
// target sends concerns someone here.
func (b *testBundle) follow(t testing.TB, a *store.Actor, target string) {
	t.Helper()
	if _, err := b.st.Follow(b.ctx, a, target); err != nil {
		t.Fatalf("follow %s: %v", target, err)
	}
}
