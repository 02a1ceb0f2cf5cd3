package delivery_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
)

// The tests run against real SQLite files in t.TempDir() migrated by the
// real runner (synchronous=NORMAL keeps them fast), the real outbox db
// worker, and httptest remote servers on 127.0.0.1 that verify the
// signature and digest of every request with a verifier written here from
// the draft-cavage text, independent of the signing code.

const baseURL = "https://courier.example"

// testClock is an injected clock that moves only when told. It starts an
// hour ahead of the real clock: outbox.Enqueue stamps rows with the real
// time, so every row is due on the test clock, and everything the outbox
// and the delivery service compute afterwards follows the test clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *testClock {
	return &testClock{now: time.Now().Add(time.Hour).Truncate(time.Millisecond)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// instanceKey signs the resolver's GETs; one key for every test.
var instanceKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := activitypub.GenerateKey()
	if err != nil {
		panic(err)
	}
	return k
})

type bundle struct {
	t       *testing.T
	ctx     context.Context
	db      *sqldb.DB
	loc     string // where db lives, for a second pool on it
	st      *store.Store
	clock   *testClock
	reg     *outbox.Registry
	svc     *delivery.Service
	queue   *outbox.Queue
	cfg     delivery.Config
	keys    *keyring
	stopSvc context.CancelFunc
	svcDone chan struct{}
	// workers are the running workers' concurrencies and stops, so that
	// restart runs them again on the new service's handlers.
	workers []runningWorker
}

type runningWorker struct {
	concurrency int
	stop        func()
	stopped     *atomic.Bool // stopped by the test: restart leaves it stopped
}

// options tweak a bundle's delivery.Config.
type options func(*delivery.Config)

func setup(t *testing.T, opts ...options) *bundle {
	t.Helper()
	ctx := t.Context()
	loc := storetest.Location(t)
	db := storetest.Open(t, loc, storetest.Options{Synchronous: "NORMAL"})
	b := &bundle{t: t, ctx: ctx, db: db, loc: loc, clock: newClock(), reg: outbox.NewRegistry(), keys: &keyring{m: map[string]*rsa.PublicKey{}}}
	b.st = store.New(db, baseURL, b.clock.Now)
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{
		Client: activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true}),
		Signer: activitypub.Signer{KeyID: baseURL + "/actor#main-key", Key: instanceKey()},
		Now:    b.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: b.st, Now: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	b.keys.put(baseURL+"/actor#main-key", &instanceKey().PublicKey)
	b.cfg = delivery.Config{
		DB: db, Store: b.st, Resolver: resolver, Objects: fetcher, LocalInbox: inbox.Local{}, BaseURL: baseURL, AllowPrivate: true,
		Timeout: 5 * time.Second, Version: "1.2.3", Now: b.clock.Now,
		SlotWait: 200 * time.Millisecond,
	}
	for _, o := range opts {
		o(&b.cfg)
	}
	b.svc, err = delivery.New(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.svc.Register(b.reg)
	b.queue = outbox.NewQueue(db.Write, outbox.QueueOptions{Read: db.Read, Now: b.clock.Now})
	b.startService()
	return b
}

// startService runs the service's recorder until the test ends.
func (b *bundle) startService() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.svc.Run(ctx)
	}()
	b.stopSvc, b.svcDone = cancel, done
	b.t.Cleanup(func() { cancel(); <-done })
}

// restart replaces the service with a new one on the same database, as a
// worker restart does (fresh memory, same tables).
func (b *bundle) restart() {
	b.t.Helper()
	workers := b.workers
	b.workers = nil
	var again []int
	for _, w := range workers {
		if !w.stopped.Load() {
			again = append(again, w.concurrency)
		}
		w.stop()
	}
	b.stopSvc()
	<-b.svcDone
	var err error
	if b.svc, err = delivery.New(b.cfg); err != nil {
		b.t.Fatal(err)
	}
	b.reg = outbox.NewRegistry()
	b.svc.Register(b.reg)
	b.startService()
	for _, n := range again {
		b.startWorker(n)
	}
}

// startWorker runs a real outbox db worker with the bundle's handlers
// until the test ends (or the returned stop is called).
func (b *bundle) startWorker(concurrency int) (stop func()) {
	b.t.Helper()
	w, err := outbox.NewWorker(outbox.WorkerConfig{
		DB: b.db.Write, Read: b.db.Read, Registry: b.reg, Concurrency: concurrency,
		PollInterval: 5 * time.Millisecond, Now: b.clock.Now, ShutdownGrace: time.Second,
	})
	if err != nil {
		b.t.Fatal(err)
	}
	b.db.OnWrite(w.Notify)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	var once sync.Once
	stopped := new(atomic.Bool)
	halt := func() { once.Do(func() { cancel(); <-done }) }
	b.t.Cleanup(halt)
	b.workers = append(b.workers, runningWorker{concurrency: concurrency, stop: halt, stopped: stopped})
	return func() { stopped.Store(true); halt() }
}

// actor creates a local actor and registers its key with the verifiers.
func (b *bundle) actor(name string) *store.Actor {
	b.t.Helper()
	a, _, err := b.st.CreateActor(b.ctx, store.NewActor{Name: name})
	if err != nil {
		b.t.Fatal(err)
	}
	b.trustKey(a)
	return a
}

func (b *bundle) trustKey(a *store.Actor) {
	b.t.Helper()
	key, err := activitypub.ParsePrivateKeyPEM(a.PrivateKeyPEM)
	if err != nil {
		b.t.Fatal(err)
	}
	b.keys.put(activitypub.KeyID(a.URI), &key.PublicKey)
}

// follower records an accepted remote follower of a.
func (b *bundle) follower(a *store.Actor, uri, inbox, shared string) {
	b.t.Helper()
	err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: a.ID, URI: uri, Inbox: inbox, SharedInbox: shared})
		return err
	})
	if err != nil {
		b.t.Fatal(err)
	}
}

// rows returns the outbox rows of type typ.
func (b *bundle) rows(typ string) []outbox.Row {
	b.t.Helper()
	rs, err := b.queue.List(b.ctx, outbox.Filter{Type: typ, Limit: 1000})
	if err != nil {
		b.t.Fatal(err)
	}
	return rs
}

// handle runs the registered handlers of ev directly (not through a bus)
// and, as a bus would, marks those that succeeded done in the ledger (a
// later fan-out of the same object waits for the mark).
func (b *bundle) handle(ev outbox.Event) error {
	var errs []error
	for _, h := range b.reg.Handlers(ev.Type) {
		err := h.Handler(b.ctx, ev)
		errs = append(errs, err)
		if err == nil {
			now := b.clock.Now().UnixMilli()
			if _, err := b.db.Write.ExecContext(b.ctx, `INSERT INTO processed_events
				(event_id, handler, status, started_at, processed_at) VALUES (?, ?, 'done', ?, ?)
				ON CONFLICT (event_id, handler) DO NOTHING`, ev.ID, h.Name, now, now); err != nil {
				b.t.Fatal(err)
			}
		}
	}
	return errors.Join(errs...)
}

// eventOf returns the outbox event of the outgoing activity act.
func (b *bundle) eventOf(act *store.Activity) outbox.Event {
	b.t.Helper()
	rs, err := b.queue.List(b.ctx, outbox.Filter{EventID: act.EventID})
	if err != nil || len(rs) != 1 {
		b.t.Fatalf("event of %s: %v (%d rows)", act.URI, err, len(rs))
	}
	return rs[0].Event
}

// waitFor polls cond every 5 ms for up to 60 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// Generous: under the race detector on a loaded machine a step of a
	// few milliseconds can take seconds. Nothing here times courier.
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitTicking is waitFor for tests that do not care about exact times:
// every 100 ms of waiting it advances the test clock by a second, so that
// deliveries deferred for a moment (a busy host's slot) come due.
func (b *bundle) waitTicking(what string, cond func() bool) {
	b.t.Helper()
	last := time.Now()
	waitFor(b.t, what, func() bool {
		if cond() {
			return true
		}
		if time.Since(last) > 100*time.Millisecond {
			b.clock.Advance(time.Second)
			last = time.Now()
		}
		return false
	})
}

// status returns the outbox status of every delivery row, by inbox.
func (b *bundle) deliveryRows() map[string]outbox.Row {
	b.t.Helper()
	out := map[string]outbox.Row{}
	for _, r := range b.rows(delivery.EventPost) {
		var p delivery.Post
		if err := json.Unmarshal(r.Event.Payload, &p); err != nil {
			b.t.Fatal(err)
		}
		out[p.Inbox] = r
	}
	return out
}

// keyring maps key ids to the public keys the remote verifiers trust.
type keyring struct {
	mu sync.Mutex
	m  map[string]*rsa.PublicKey
}

func (k *keyring) put(id string, pub *rsa.PublicKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[id] = pub
}

func (k *keyring) get(id string) *rsa.PublicKey {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[id]
}

// verifyCavage checks a request's HTTP Signature as draft-cavage-http-
// signatures-12 describes it, without the signing code: it parses the
// Signature header, requires the header list a POST (or GET) must sign,
// rebuilds the signing string from the request as received, checks the
// RSASSA-PKCS1-v1_5 SHA-256 signature, and for a body checks Digest
// against SHA-256 of the bytes received. now bounds the Date header.
func verifyCavage(r *http.Request, body []byte, keys *keyring, now time.Time) (keyID string, err error) {
	params := map[string]string{}
	for _, part := range strings.Split(r.Header.Get("Signature"), ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
			return "", fmt.Errorf("malformed Signature parameter %q", part)
		}
		params[k] = v[1 : len(v)-1]
	}
	keyID = params["keyId"]
	if params["algorithm"] != "rsa-sha256" {
		return keyID, fmt.Errorf("algorithm %q, want rsa-sha256", params["algorithm"])
	}
	want := "(request-target) host date"
	if r.Method == http.MethodPost {
		want = "(request-target) host date digest content-type"
		if r.Header.Get(activitypub.CollectionSyncHeader) != "" { // FEP-8fcf: signed too
			want += " collection-synchronization"
		}
	} else if r.Header.Get("Accept") != "" {
		want = "(request-target) host date accept"
	}
	if params["headers"] != want {
		return keyID, fmt.Errorf("signed headers %q, want %q", params["headers"], want)
	}
	date, err := http.ParseTime(r.Header.Get("Date"))
	if err != nil || date.Sub(now).Abs() > time.Hour {
		return keyID, fmt.Errorf("date %q outside the window of %s", r.Header.Get("Date"), now)
	}
	var lines []string
	for _, h := range strings.Fields(params["headers"]) {
		switch h {
		case "(request-target)":
			lines = append(lines, "(request-target): "+strings.ToLower(r.Method)+" "+r.RequestURI)
		case "host":
			lines = append(lines, "host: "+r.Host)
		default:
			v := r.Header.Values(h)
			if len(v) == 0 {
				return keyID, fmt.Errorf("signed header %s missing", h)
			}
			lines = append(lines, h+": "+strings.Join(v, ", "))
		}
	}
	sig, err := base64.StdEncoding.DecodeString(params["signature"])
	if err != nil {
		return keyID, fmt.Errorf("signature is not base64: %w", err)
	}
	pub := keys.get(keyID)
	if pub == nil {
		return keyID, fmt.Errorf("unknown key %q", keyID)
	}
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig); err != nil {
		return keyID, fmt.Errorf("bad signature: %w", err)
	}
	if r.Method == http.MethodPost {
		d := sha256.Sum256(body)
		if got, want := r.Header.Get("Digest"), "SHA-256="+base64.StdEncoding.EncodeToString(d[:]); got != want {
			return keyID, fmt.Errorf("digest %q, want %q", got, want)
		}
		if ct := r.Header.Get("Content-Type"); ct != activitypub.ContentType {
			return keyID, fmt.Errorf("content type %q", ct)
		}
	}
	return keyID, nil
}

// received is one verified POST a remote got.
type received struct {
	Path       string
	Host       string
	ActivityID string
	Type       string
	Body       []byte
	UserAgent  string
	KeyID      string
	Sync       string // the Collection-Synchronization header
}

// remote is a fediverse server on 127.0.0.1: it serves actor documents
// (GET /users/{name}, signed GETs verified) and inboxes (POST
// /users/{name}/inbox and /inbox), verifies every request and records every
// POST. respond scripts the answer to a POST (default 202).
type remote struct {
	t     *testing.T
	srv   *httptest.Server
	keys  *keyring
	clock *testClock

	mu        sync.Mutex
	got       []received
	bad       []string
	respond   func(r *http.Request) (int, http.Header)
	answer    func(got received) int // scripted status of a POST by what it carried (respond wins)
	shared    bool
	gets      int
	getStatus map[string]int // scripted status of GET /users/{name}
	requests  atomic.Int64   // every request, verified or not
}

func newRemote(t *testing.T, keys *keyring, clock *testClock, shared bool) *remote {
	rm := &remote{t: t, keys: keys, clock: clock, shared: shared,
		getStatus: map[string]int{}}
	rm.srv = httptest.NewServer(http.HandlerFunc(rm.serve))
	t.Cleanup(rm.srv.Close)
	t.Cleanup(func() {
		rm.mu.Lock()
		defer rm.mu.Unlock()
		for _, b := range rm.bad {
			t.Errorf("remote %s: %s", rm.srv.URL, b)
		}
	})
	return rm
}

func (rm *remote) URL() string { return rm.srv.URL }

// Host is the host key the delivery package keeps state under.
func (rm *remote) Host() string { return strings.TrimPrefix(rm.srv.URL, "http://") }

func (rm *remote) actorURL(name string) string { return rm.srv.URL + "/users/" + name }

// follow records name on this remote as an accepted follower of a.
func (rm *remote) follow(b *bundle, a *store.Actor, name string) {
	shared := ""
	if rm.shared {
		shared = rm.srv.URL + "/inbox"
	}
	b.follower(a, rm.actorURL(name), rm.actorURL(name)+"/inbox", shared)
}

func (rm *remote) setRespond(f func(r *http.Request) (int, http.Header)) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.respond = f
}

func (rm *remote) received() []received {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return append([]received(nil), rm.got...)
}

func (rm *remote) count() int {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return len(rm.got)
}

func (rm *remote) serve(w http.ResponseWriter, r *http.Request) {
	rm.requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	keyID, verr := verifyCavage(r, body, rm.keys, rm.clock.Now())
	if verr != nil {
		rm.mu.Lock()
		rm.bad = append(rm.bad, fmt.Sprintf("%s %s: %v", r.Method, r.URL.Path, verr))
		rm.mu.Unlock()
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if r.Method == http.MethodGet {
		rm.serveActor(w, r)
		return
	}
	var a struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	jerr := json.Unmarshal(body, &a)
	rm.mu.Lock()
	if jerr != nil {
		rm.bad = append(rm.bad, fmt.Sprintf("POST %s: body is not JSON: %v", r.URL.Path, jerr))
	}
	rm.got = append(rm.got, received{Path: r.URL.Path, Host: r.Host, ActivityID: a.ID, Type: a.Type,
		Body: bytes.Clone(body), UserAgent: r.Header.Get("User-Agent"), KeyID: keyID,
		Sync: r.Header.Get(activitypub.CollectionSyncHeader)})
	respond, answer := rm.respond, rm.answer
	got := rm.got[len(rm.got)-1]
	rm.mu.Unlock()
	status, h := http.StatusAccepted, http.Header(nil)
	switch {
	case respond != nil:
		status, h = respond(r)
	case answer != nil:
		status = answer(got)
	}
	for k, v := range h {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
}

// serveActor answers a verified GET of /users/{name} with an actor
// document (or the scripted status).
func (rm *remote) serveActor(w http.ResponseWriter, r *http.Request) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.gets++
	if author, ok := strings.CutPrefix(r.URL.Path, "/notes/"); ok {
		// A note by /users/{author}, for reactions to objects courier has
		// not stored.
		if code := rm.getStatus["note:"+author]; code != 0 {
			w.WriteHeader(code)
			return
		}
		w.Header().Set("Content-Type", activitypub.ContentType)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"@context": activitypub.ActivityStreams, "id": rm.srv.URL + r.URL.Path, "type": "Note",
			"attributedTo": rm.actorURL(author), "content": "hi", "to": []string{activitypub.Public},
		})
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/users/")
	if !ok || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	if code := rm.getStatus[name]; code != 0 {
		w.WriteHeader(code)
		return
	}
	doc := map[string]any{
		"@context": []string{activitypub.ActivityStreams, activitypub.SecurityContext},
		"id":       rm.actorURL(name), "type": "Person", "preferredUsername": name,
		"inbox": rm.actorURL(name) + "/inbox",
	}
	if rm.shared {
		doc["endpoints"] = map[string]string{"sharedInbox": rm.srv.URL + "/inbox"}
	}
	w.Header().Set("Content-Type", activitypub.ContentType)
	_ = json.NewEncoder(w).Encode(doc)
}
