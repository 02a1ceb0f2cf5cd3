package webhook_test

import (
	"context"
	"crypto/rsa"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/app/webhook"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

const baseURL = "https://courier.example"

// clock is an injected clock that moves only when told; it starts ahead
// of the real one so that every row outbox.Enqueue stamps is due on it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// bundle is a real store, the webhook service, the delivery service with
// its webhook handler and a real outbox db worker.
type bundle struct {
	t     *testing.T
	ctx   context.Context
	db    *sqldb.DB
	st    *store.Store
	hooks *webhook.Service
	svc   *delivery.Service
	queue *outbox.Queue
	now   func() time.Time
	w     *outbox.Worker
}

// setup starts a bundle; now nil is the real clock.
func setup(t *testing.T, now func() time.Time, opts ...func(*delivery.Config)) *bundle {
	t.Helper()
	if now == nil {
		now = time.Now
	}
	db := storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
	b := &bundle{t: t, ctx: t.Context(), db: db, now: now}
	b.st = store.New(db, baseURL, now)
	var err error
	if b.hooks, err = webhook.New(webhook.Config{DB: db, Now: now}); err != nil {
		t.Fatal(err)
	}
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{
		Client: activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true}),
		Signer: activitypub.Signer{KeyID: baseURL + "/actor#main-key", Key: mustKey(t)}, Now: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: b.st, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	cfg := delivery.Config{DB: db, Store: b.st, Resolver: resolver, BaseURL: baseURL, AllowPrivate: true,
		Timeout: 5 * time.Second, Now: now, Channels: []delivery.Channel{b.hooks}, Outcomes: b.hooks, SlotWait: 200 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	if b.svc, err = delivery.New(cfg); err != nil {
		t.Fatal(err)
	}
	reg := outbox.NewRegistry()
	b.svc.Register(reg)
	b.queue = outbox.NewQueue(db.Write, outbox.QueueOptions{Read: db.Read, Now: now})
	run(t, b.svc.Run)
	b.w, err = outbox.NewWorker(outbox.WorkerConfig{DB: db.Write, Read: db.Read, Registry: reg, Concurrency: 8,
		PollInterval: 5 * time.Millisecond, Now: now, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	db.OnWrite(b.w.Notify)
	run(t, b.w.Run)
	return b
}

var keyOnce = sync.OnceValues(activitypub.GenerateKey)

func mustKey(t *testing.T) *rsa.PrivateKey {
	k, err := keyOnce()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// run runs fn until the test ends.
func run(t *testing.T, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = fn(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (b *bundle) actor(name string) *store.Actor {
	b.t.Helper()
	a, _, err := b.st.CreateActor(b.ctx, store.NewActor{Name: name})
	if err != nil {
		b.t.Fatal(err)
	}
	return a
}

// record calls the hook inside a store transaction, as the recorder of
// the inbox view does in the import's transaction.
func (b *bundle) record(it app.Item) {
	b.t.Helper()
	if err := b.db.Tx(b.ctx, func(tx *sql.Tx) error { return b.hooks.Hook(b.ctx, tx, it) }); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bundle) rows() []outbox.Row {
	b.t.Helper()
	rs, err := b.queue.List(b.ctx, outbox.Filter{Type: webhook.EventPost, Limit: 1000})
	if err != nil {
		b.t.Fatal(err)
	}
	return rs
}

// waitFor polls cond until it holds, up to the test's deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	if d, ok := t.Deadline(); ok && time.Until(d) < 2*time.Minute {
		deadline = d.Add(-5 * time.Second)
	}
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// received is one POST a receiver got, verified.
type received struct {
	id, ts string
	body   webhook.Payload
	raw    []byte
}

// receiver is an httptest server that verifies every POST with the
// Standard Webhooks Go library and answers with status(n), n the 1-based
// number of the POST.
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	got      []received
	bad      []string
	verifier func() *standardwebhooks.Webhook
	status   func(n int) int
	strict   bool // check the timestamp too (the real clock)
}

func newReceiver(t *testing.T, status func(n int) int) *receiver {
	r := &receiver{status: status}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.verifier == nil { // the test has not told the secret (or needs none): not ready
		r.bad = append(r.bad, "a POST before the test gave the secret")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	wh := r.verifier()
	var err error
	if r.strict {
		err = wh.Verify(body, req.Header)
	} else {
		err = wh.VerifyIgnoringTimestamp(body, req.Header)
	}
	if err != nil {
		r.bad = append(r.bad, err.Error())
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var p webhook.Payload
	if err := json.Unmarshal(body, &p); err != nil {
		r.bad = append(r.bad, err.Error())
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.got = append(r.got, received{id: req.Header.Get("webhook-id"), ts: req.Header.Get("webhook-timestamp"), body: p, raw: body})
	w.WriteHeader(r.status(len(r.got)))
}

func (r *receiver) received() ([]received, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...), append([]string(nil), r.bad...)
}

func (r *receiver) verifyWith(t *testing.T, secret string) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.verifier = func() *standardwebhooks.Webhook { return wh }
	r.mu.Unlock()
}

func ok(int) int { return http.StatusNoContent }

// An inbound activity's item becomes one signed event per endpoint that
// takes it, verified by the Standard Webhooks library; an endpoint of
// another actor or filtering the type gets nothing; recording the item
// again enqueues nothing new.
func TestHookDeliversSignedEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	alice := b.actor("alice")
	b.actor("bob")
	all, mine, likes, bobs := newReceiver(t, ok), newReceiver(t, ok), newReceiver(t, ok), newReceiver(t, ok)
	for _, r := range []*receiver{all, mine, likes, bobs} {
		r.strict = true
	}
	add := func(r *receiver, actor string, events ...string) webhook.Endpoint {
		ep, secret, err := b.hooks.Add(b.ctx, r.srv.URL+"/hook", actor, events)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(secret, "whsec_") {
			t.Fatalf("secret %q: want whsec_...", secret)
		}
		r.verifyWith(t, secret)
		return ep
	}
	add(all, "")
	epMine := add(mine, "alice", "activity.create")
	add(likes, "alice", "activity.like")
	add(bobs, "bob")

	act := json.RawMessage(`{"id":"https://remote.example/a/1","type":"Create","actor":"https://remote.example/u/x","object":{"type":"Note","content":"hi"}}`)
	it := app.Item{ActorID: alice.ID, ActorName: "alice", Seq: 7, ActivityURI: "https://remote.example/a/1",
		Type: "Create", Kind: "mention", Activity: act}
	b.record(it)
	b.record(it) // a re-run of the recording transaction enqueues nothing new
	if n := len(b.rows()); n != 2 {
		t.Fatalf("%d webhook events enqueued, want 2 (all, mine)", n)
	}
	waitFor(t, "both deliveries", func() bool {
		a, _ := all.received()
		m, _ := mine.received()
		return len(a) == 1 && len(m) == 1
	})
	m, bad := mine.received()
	if len(bad) > 0 {
		t.Fatalf("signatures refused: %v", bad)
	}
	got := m[0]
	if got.body.Type != "activity.create" || got.body.Data.Actor != "alice" || got.body.Data.Seq != 7 ||
		got.body.Data.Kind != "mention" || got.body.Data.ActivityID != it.ActivityURI {
		t.Fatalf("payload %s", got.raw)
	}
	var embedded map[string]any
	if err := json.Unmarshal(got.body.Data.Activity, &embedded); err != nil || embedded["id"] != "https://remote.example/a/1" {
		t.Fatalf("activity %s: %v", got.body.Data.Activity, err)
	}
	wantID := ""
	for _, r := range b.rows() {
		if r.Event.Target == epMine.Host {
			wantID = r.Event.ID
		}
	}
	if got.id == "" || got.id != wantID {
		t.Fatalf("webhook-id %q, want the event id %q", got.id, wantID)
	}
	waitFor(t, "rows done", func() bool {
		for _, r := range b.rows() {
			if r.Status != outbox.StatusDone {
				return false
			}
		}
		return true
	})
	for _, r := range []*receiver{likes, bobs} {
		if g, _ := r.received(); len(g) != 0 {
			t.Fatalf("an endpoint that does not take the event got %d", len(g))
		}
	}
}

// A receiver answering 500 then 200 gets one event twice, with the same
// webhook-id and body, the second time on the outbox's schedule (Backoff
// of the first attempt), not before.
func TestRetriedOnOutboxSchedule(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Now().Add(time.Hour).Truncate(time.Millisecond)}
	b := setup(t, c.Now)
	alice := b.actor("alice")
	r := newReceiver(t, func(n int) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	_, secret, err := b.hooks.Add(b.ctx, r.srv.URL, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.verifyWith(t, secret)
	b.record(app.Item{ActorID: alice.ID, ActorName: "alice", Seq: 1, ActivityURI: "https://remote.example/f/1",
		Type: "Follow", Kind: "follow", Activity: json.RawMessage(`{"type":"Follow"}`)})
	first := c.Now()
	waitFor(t, "the failed attempt settled", func() bool {
		rs := b.rows()
		return len(rs) == 1 && rs[0].Status == outbox.StatusPending && rs[0].Attempts == 1
	})
	row := b.rows()[0]
	if want := first.Add(outbox.Backoff(1)); !row.NextAttemptAt.Equal(want) {
		t.Fatalf("next attempt at %s, want %s (Backoff(1) after the attempt)", row.NextAttemptAt, want)
	}
	c.Advance(outbox.Backoff(1) - time.Millisecond)
	b.w.Notify()
	time.Sleep(200 * time.Millisecond) // nothing is due: a second POST now would be early
	if g, _ := r.received(); len(g) != 1 {
		t.Fatalf("%d POSTs before the backoff ended, want 1", len(g))
	}
	c.Advance(time.Millisecond)
	b.w.Notify()
	waitFor(t, "the retry", func() bool { g, _ := r.received(); return len(g) == 2 })
	waitFor(t, "row done", func() bool { return b.rows()[0].Status == outbox.StatusDone })
	g, bad := r.received()
	if len(bad) > 0 {
		t.Fatalf("signatures refused: %v", bad)
	}
	if g[0].id != g[1].id || g[0].id != row.Event.ID || string(g[0].raw) != string(g[1].raw) {
		t.Fatalf("retry changed the message: ids %q %q (event %q)", g[0].id, g[1].id, row.Event.ID)
	}
	if g[0].body.Type != "activity.follow" {
		t.Fatalf("type %q", g[0].body.Type)
	}
	if want := fmt.Sprint(c.Now().Unix()); g[1].ts != want {
		t.Fatalf("retry's webhook-timestamp %s, want the attempt's time %s", g[1].ts, want)
	}
}

// Rotation: the old secret keeps signing beside the new one during the
// grace period, so a receiver that knows either verifies; after it only
// the new one signs.
func TestRotateSignsWithBoth(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Now().Add(time.Hour).Truncate(time.Millisecond)}
	b := setup(t, c.Now)
	alice := b.actor("alice")
	oldR := newReceiver(t, ok)
	ep, oldSecret, err := b.hooks.Add(b.ctx, oldR.srv.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	newSecret, until, err := b.hooks.Rotate(b.ctx, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !until.Equal(c.Now().Add(webhook.DefaultRotateGrace)) || newSecret == oldSecret {
		t.Fatalf("rotate: until %s", until)
	}
	// One request, verified with each secret by the library.
	b.record(app.Item{ActorID: alice.ID, ActorName: "alice", Seq: 1, ActivityURI: "https://r.example/1", Type: "Like"})
	var req *http.Request
	var body []byte
	waitFor(t, "the event", func() bool { return len(b.rows()) == 1 })
	req, body, err = b.hooks.Request(b.ctx, b.rows()[0].Event, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(req.Header.Get("webhook-signature"))); n != 2 {
		t.Fatalf("%d signatures during the grace period, want 2", n)
	}
	for _, s := range []string{oldSecret, newSecret} {
		wh, _ := standardwebhooks.NewWebhook(s)
		if err := wh.VerifyIgnoringTimestamp(body, req.Header); err != nil {
			t.Fatalf("verify with a secret during the grace period: %v", err)
		}
	}
	c.Advance(webhook.DefaultRotateGrace + time.Second)
	time.Sleep(webhook.DefaultSecretCacheTTL + 100*time.Millisecond)
	req, body, err = b.hooks.Request(b.ctx, b.rows()[0].Event, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(req.Header.Get("webhook-signature"))); n != 1 {
		t.Fatalf("%d signatures after the grace period, want 1", n)
	}
	whOld, _ := standardwebhooks.NewWebhook(oldSecret)
	whNew, _ := standardwebhooks.NewWebhook(newSecret)
	if whOld.VerifyIgnoringTimestamp(body, req.Header) == nil || whNew.VerifyIgnoringTimestamp(body, req.Header) != nil {
		t.Fatal("after the grace period only the new secret must sign")
	}
}

// Bad input to the endpoint operations is refused by code.
func TestAddRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.actor("alice")
	for _, tc := range []struct {
		url, actor string
		events     []string
		code       store.Code
	}{
		{"ftp://x.example/", "", nil, store.EINVALID},
		{"http://user:pw@x.example/", "", nil, store.EINVALID},
		{"not a url", "", nil, store.EINVALID},
		{"http://127.0.0.1:9/", "nobody", nil, store.ENOTFOUND},
		{"http://127.0.0.1:9/", "alice", []string{"activity.nope"}, store.EINVALID},
	} {
		if _, _, err := b.hooks.Add(b.ctx, tc.url, tc.actor, tc.events); store.ErrorCode(err) != tc.code {
			t.Errorf("Add(%q, %q, %v) = %v, want %s", tc.url, tc.actor, tc.events, err, tc.code)
		}
	}
	if err := b.hooks.Remove(b.ctx, 99); store.ErrorCode(err) != store.ENOTFOUND {
		t.Fatalf("Remove(99) = %v", err)
	}
	if _, _, err := b.hooks.Rotate(b.ctx, 99); store.ErrorCode(err) != store.ENOTFOUND {
		t.Fatalf("Rotate(99) = %v", err)
	}
	if _, err := b.hooks.Test(b.ctx, 99); store.ErrorCode(err) != store.ENOTFOUND {
		t.Fatalf("Test(99) = %v", err)
	}
	// Loopback is allowed, and a test event arrives.
	r := newReceiver(t, ok)
	r.strict = true
	ep, secret, err := b.hooks.Add(b.ctx, r.srv.URL, "alice", []string{"webhook.test"})
	if err != nil {
		t.Fatal(err)
	}
	r.verifyWith(t, secret)
	id, err := b.hooks.Test(b.ctx, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the test event", func() bool { g, _ := r.received(); return len(g) == 1 })
	if g, _ := r.received(); g[0].id != id || g[0].body.Type != webhook.TypeTest {
		t.Fatalf("test event %+v, want id %s", g[0], id)
	}
	// A removed endpoint's queued events are dropped, not sent.
	if err := b.hooks.Remove(b.ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	eps, err := b.hooks.List(b.ctx)
	if err != nil || len(eps) != 0 {
		t.Fatalf("List after Remove: %v %v", eps, err)
	}
}

// peer is a healthy remote server whose inbox verifies the draft-cavage
// signature of every delivery with the sender's key.
type peer struct {
	srv   *httptest.Server
	pub   *rsa.PublicKey
	mu    sync.Mutex
	got   map[string]bool
	wrong []string
}

func newPeer(t *testing.T, pub *rsa.PublicKey) *peer {
	p := &peer{pub: pub, got: map[string]bool{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		defer p.mu.Unlock()
		if err := activitypub.Verify(r, body, p.pub, activitypub.VerifyOptions{}); err != nil {
			p.wrong = append(p.wrong, err.Error())
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var a struct{ ID string }
		_ = json.Unmarshal(body, &a)
		p.got[a.ID] = true
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *peer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.got)
}

// dead is an endpoint that never answers (hung: it holds each request
// until the test ends) or drops each connection at once (refusing). It
// counts requests and the most in flight at once.
type dead struct {
	srv                *httptest.Server
	mu                 sync.Mutex
	requests, inFlight int
	maxInFlight        int
}

func newDead(t *testing.T, hung bool) *dead {
	d := &dead{}
	stop := make(chan struct{})
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.requests++
		d.inFlight++
		d.maxInFlight = max(d.maxInFlight, d.inFlight)
		d.mu.Unlock()
		defer func() { d.mu.Lock(); d.inFlight--; d.mu.Unlock() }()
		if !hung {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(func() { close(stop); d.srv.Close() })
	return d
}

func (d *dead) stats() (requests, maxInFlight int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.requests, d.maxInFlight
}

// Webhook endpoints that are dead (one hung, one dropping connections)
// never slow federation: while each of 40 webhook events waits on them,
// 40 Creates reach a healthy peer; the dead endpoints see a bounded number
// of POSTs (their deliveries wait for the one in flight, then back off,
// as a dead host's), and no webhook event is dead-lettered or spends
// more than one attempt on them meanwhile.
func TestDeadEndpointNeverSlowsFederation(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, func(c *delivery.Config) {
		c.Timeout = 2 * time.Second
		// The second failed POST makes an endpoint unavailable, whenever it
		// comes: the verdict does not hang on how fast the 40 events are
		// made against the first retry's 5 s backoff.
		c.UnavailableAfter = time.Nanosecond
	})
	alice := b.actor("alice")
	key, err := activitypub.ParsePrivateKeyPEM(alice.PrivateKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	p := newPeer(t, &key.PublicKey)
	if err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: alice.ID, URI: p.srv.URL + "/users/f",
			Inbox: p.srv.URL + "/users/f/inbox", SharedInbox: p.srv.URL + "/inbox"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	hung, refusing := newDead(t, true), newDead(t, false)
	var hosts []string
	for _, d := range []*dead{hung, refusing} {
		ep, _, err := b.hooks.Add(b.ctx, d.srv.URL, "alice", nil)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, ep.Host)
	}
	const n = 40
	for i := range n {
		b.record(app.Item{ActorID: alice.ID, ActorName: "alice", Seq: int64(i + 1), ActivityURI: fmt.Sprintf("https://r.example/a/%d", i),
			Type: "Like", Kind: "like", Activity: json.RawMessage(`{"type":"Like"}`)})
		if _, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: fmt.Sprintf("note %d", i),
			To: []string{alice.URI + "/followers"}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every Create at the healthy peer", func() bool { return p.count() == n })
	p.mu.Lock()
	if len(p.wrong) > 0 {
		t.Fatalf("signatures refused by the peer: %v", p.wrong)
	}
	p.mu.Unlock()
	for i, d := range []*dead{hung, refusing} {
		reqs, most := d.stats()
		if most > delivery.DefaultPerHostConcurrency || reqs > n {
			t.Errorf("dead endpoint %s: %d POSTs, %d at once: want each event tried at most once, a bounded few at once", hosts[i], reqs, most)
		}
		if i == 0 && reqs > delivery.DefaultPerHostConcurrency {
			t.Errorf("hung endpoint: %d POSTs: its other events must wait for the unanswered one", reqs)
		}
	}
	// The endpoints' health is kept like a host's: each becomes
	// unavailable and its events are parked (one probe at a time);
	// nothing of theirs is dead-lettered.
	for _, h := range hosts {
		waitFor(t, h+" unavailable", func() bool {
			st, err := b.svc.Health().Host(b.ctx, h)
			return err == nil && st.State == delivery.HostUnavailable
		})
	}
	settled := func() bool {
		for _, r := range b.rows() {
			if r.Status == outbox.StatusProcessing {
				return false
			}
		}
		return true
	}
	waitFor(t, "no webhook event held by a handler", settled)
	for _, r := range b.rows() {
		if r.Status == outbox.StatusDeadLettered || r.Status == outbox.StatusDone {
			t.Fatalf("webhook event %s is %s", r.Event.ID, r.Status)
		}
		if r.Attempts > 1 {
			t.Fatalf("webhook event %s spent %d attempts while its endpoint was down", r.Event.ID, r.Attempts)
		}
	}
}

// courier's signer makes the specification's published test vector.
func TestSignTestVector(t *testing.T) {
	key, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := webhook.Sign([][]byte{key}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	two := webhook.Sign([][]byte{key, []byte("other")}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if f := strings.Fields(two); len(f) != 2 || f[0] != got {
		t.Fatalf("two keys: %q", two)
	}
}

// The outcomes of an actor's own activities: an activity delivered to
// every inbox makes one delivery.completed; a delivery refused for good
// makes one delivery.dead naming the inbox; each in the transaction that
// records the settled delivery, once.
func TestDeliveryOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	alice, bob := b.actor("alice"), b.actor("bob")
	r := newReceiver(t, ok)
	r.strict = true
	_, secret, err := b.hooks.Add(b.ctx, r.srv.URL, "", []string{"delivery.completed", "delivery.dead"})
	if err != nil {
		t.Fatal(err)
	}
	r.verifyWith(t, secret)
	ka, _ := activitypub.ParsePrivateKeyPEM(alice.PrivateKeyPEM)
	good1, good2 := newPeer(t, &ka.PublicKey), newPeer(t, &ka.PublicKey)
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	}))
	t.Cleanup(refusing.Close)
	follow := func(a *store.Actor, base string) {
		if err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
			_, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: a.ID, URI: base + "/users/f",
				Inbox: base + "/users/f/inbox", SharedInbox: base + "/inbox"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	follow(alice, good1.srv.URL)
	follow(alice, good2.srv.URL)
	follow(bob, refusing.URL)
	actA, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "a", To: []string{alice.URI + "/followers"}})
	if err != nil {
		t.Fatal(err)
	}
	actB, _, err := notetest.Create(b.ctx, b.st, bob, notetest.Input{Content: "b", To: []string{bob.URI + "/followers"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both outcomes", func() bool { g, _ := r.received(); return len(g) >= 2 })
	waitFor(t, "every webhook row settled", func() bool {
		for _, row := range b.rows() {
			if row.Status != outbox.StatusDone {
				return false
			}
		}
		return true
	})
	g, bad := r.received()
	if len(bad) > 0 || len(g) != 2 {
		t.Fatalf("%d webhooks (%v), want 2", len(g), bad)
	}
	byType := map[string]webhook.Data{}
	for _, m := range g {
		byType[m.body.Type] = m.body.Data
	}
	c, d := byType["delivery.completed"], byType["delivery.dead"]
	if c.Actor != "alice" || c.ActivityID != actA.URI || c.Inboxes != 2 {
		t.Fatalf("delivery.completed %+v", c)
	}
	if d.Actor != "bob" || d.ActivityID != actB.URI || d.Inbox != refusing.URL+"/inbox" || d.Error == "" {
		t.Fatalf("delivery.dead %+v", d)
	}
	if good1.count() != 1 || good2.count() != 1 {
		t.Fatalf("peers got %d and %d", good1.count(), good2.count())
	}
}

func TestEventTypeOf(t *testing.T) {
	for _, tc := range []struct {
		typ, kind, want string
	}{
		{"Create", "mention", "activity.create"},
		{"Create", "", "activity.create"},
		{"Follow", "follow", "activity.follow"},
		{"Follow", "follow_request", "follow.requested"},
		{"EmojiReact", "reaction", "activity.emojireact"},
		{"EmojiReaction", "reaction", "activity.emojireact"},
		{"Like", "like", "activity.like"},
		{"QuoteRequest", "quote_request", "quote.requested"},
		{"QuoteRequest", "quote", "activity.quoterequest"},
		{"Reject", "quote_rejected", "quote.rejected"},
	} {
		if got := webhook.EventTypeOf(app.Item{Type: tc.typ, Kind: tc.kind}); got != tc.want {
			t.Errorf("EventTypeOf(%s, %s) = %s, want %s", tc.typ, tc.kind, got, tc.want)
		}
	}
	for _, typ := range []string{"activity.create", "follow.requested", "quote.requested", "quote.rejected", "delivery.completed", "delivery.dead", "webhook.test"} {
		if !slices.Contains(webhook.KnownTypes(), typ) {
			t.Errorf("KnownTypes lacks %s", typ)
		}
	}
}

// TestAddRefusesMetadataAddresses: on a courier that refuses private
// addresses (DenyMetadata), an endpoint at a link-local or cloud metadata
// address, in any form, is refused unless the operator named it; loopback
// and private LAN addresses stay allowed. With private addresses allowed,
// nothing is refused.
func TestAddRefusesMetadataAddresses(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
	// As cmd/courier configures it without --allow-private-addresses and
	// with --webhook-allow-addresses 169.254.10.20.
	allow := []netip.Prefix{netip.MustParsePrefix("169.254.10.20/32")}
	hooks, err := webhook.New(webhook.Config{DB: db, RefuseAddr: func(ip netip.Addr) bool {
		return activitypub.MetadataAddr(ip) && !activitypub.AddrAllowed(ip, allow)
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{
		"http://169.254.169.254/latest/meta-data/", "http://169.254.0.1:8080/hook",
		"http://[::ffff:169.254.169.254]/", "http://[::ffff:a9fe:a9fe]/", "http://[fd00:ec2::254]/",
		"http://100.100.100.200/", "http://[fe80::1]/", "http://[fe80::1%25eth0]:9000/",
	} {
		_, _, err := hooks.Add(t.Context(), u, "", nil)
		if store.ErrorCode(err) != store.EINVALID || !strings.Contains(store.ErrorMessage(err), "--webhook-allow-addresses") {
			t.Errorf("Add(%q) = %v, want refused naming the setting", u, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:9/hook", "http://10.0.0.5/hook", "http://192.168.1.10:8080/",
		"http://[fd12:3456::1]/", "http://169.254.10.20/named", "https://hooks.example/"} {
		if _, _, err := hooks.Add(t.Context(), u, "", nil); err != nil {
			t.Errorf("Add(%q) = %v, want it allowed", u, err)
		}
	}
	open, err := webhook.New(webhook.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := open.Add(t.Context(), "http://169.254.169.254/", "", nil); err != nil {
		t.Errorf("with private addresses allowed: %v", err)
	}
}

// syncBuffer is a log destination goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEndpointCredentialNotLogged: an endpoint whose URL carries its
// credential (a token in its path and in its query) fails a delivery; the
// debug log of the attempt names the endpoint by host and path with the
// credential redacted, and so do the delivery's records.
func TestEndpointCredentialNotLogged(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := setup(t, nil, func(c *delivery.Config) { c.Logger = logger })
	b.actor("alice")
	r := newReceiver(t, func(int) int { return http.StatusInternalServerError })
	const pathToken, queryToken = "Xq9mZ2kL7pR4sT1vW8yN3bC6", "s3cr3t-qu3ry"
	ep, secret, err := b.hooks.Add(b.ctx, r.srv.URL+"/hooks/"+pathToken+"?token="+queryToken, "alice", []string{"webhook.test"})
	if err != nil {
		t.Fatal(err)
	}
	r.verifyWith(t, secret)
	if _, err := b.hooks.Test(b.ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failed attempt's log", func() bool { return strings.Contains(logs.String(), "attempt failed") })
	out := logs.String()
	if strings.Contains(out, pathToken) || strings.Contains(out, queryToken) {
		t.Fatalf("the endpoint's credential is logged:\n%s", out)
	}
	if !strings.Contains(out, strings.TrimPrefix(r.srv.URL, "http://")+"/hooks/redacted?token=redacted") {
		t.Fatalf("the log does not name the endpoint:\n%s", out)
	}
	var n int
	if err := b.db.Read.QueryRow(`SELECT COUNT(*) FROM delivery_attempts WHERE inbox LIKE ? OR inbox LIKE ?`,
		"%"+pathToken+"%", "%"+queryToken+"%").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d delivery records carry the credential", n)
	}
}

// TestFollowGivenUp: a Follow of an actor that can never be reached (its
// server refuses to serve it) is given up for good: one delivery.dead
// naming the Follow and its object, its pending follow removed, so that a
// new Follow of the actor can be sent.
func TestFollowGivenUp(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	alice := b.actor("alice")
	r := newReceiver(t, ok)
	_, secret, err := b.hooks.Add(b.ctx, r.srv.URL, "", []string{"delivery.dead"})
	if err != nil {
		t.Fatal(err)
	}
	r.verifyWith(t, secret)
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	}))
	t.Cleanup(refusing.Close)
	target := refusing.URL + "/users/nobody"
	follow, err := b.st.Follow(b.ctx, alice, target)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delivery.dead webhook", func() bool { g, _ := r.received(); return len(g) >= 1 })
	g, bad := r.received()
	if len(bad) > 0 || len(g) != 1 {
		t.Fatalf("%d webhooks (%v), want 1", len(g), bad)
	}
	d := g[0].body.Data
	if g[0].body.Type != "delivery.dead" || d.Actor != "alice" || d.ActivityID != follow.URI || d.Inbox != target || d.Error == "" {
		t.Fatalf("webhook %s %+v", g[0].body.Type, d)
	}
	if _, err := b.st.FollowingState(b.ctx, alice.ID, target); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the given-up follow is still there: %v", err)
	}
	if _, err := b.st.Follow(b.ctx, alice, target); err != nil {
		t.Fatalf("a new Follow after the given-up one: %v", err)
	}
}

// TestPayloadTimestampMillis: a payload's timestamp is RFC 3339 in UTC with
// exactly three fractional digits, whatever the clock's precision.
func TestPayloadTimestampMillis(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(2026, 12, 6, 2, 0, 0, 123456789, time.UTC),
		time.Date(2026, 12, 6, 3, 0, 0, 0, time.FixedZone("X", 3600)),
	} {
		b, err := json.Marshal(webhook.Payload{Type: "webhook.test", Timestamp: at, Data: webhook.Data{Endpoint: 1}})
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Timestamp string `json:"timestamp"`
			Type      string `json:"type"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		want := at.UTC().Truncate(time.Millisecond).Format("2006-01-02T15:04:05.000Z")
		if m.Timestamp != want || m.Type != "webhook.test" || strings.Count(string(b), `"timestamp"`) != 1 {
			t.Errorf("%s encoded as %s, want timestamp %s", at, b, want)
		}
		var back webhook.Payload
		if err := json.Unmarshal(b, &back); err != nil || !back.Timestamp.Equal(at.Truncate(time.Millisecond)) {
			t.Errorf("decoded back %v (%v)", back.Timestamp, err)
		}
	}
}

// A delivery superseded by its object's Delete completes the activity
// like a delivered one: a Create whose first POST failed, its note
// deleted before the retry, gets delivery.completed with no inbox reached
// and one superseded; the Delete, delivered after it, gets its own.
func TestSupersededDeliveryCompletes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	alice := b.actor("alice")
	r := newReceiver(t, ok)
	_, secret, err := b.hooks.Add(b.ctx, r.srv.URL, "", []string{"delivery.completed", "delivery.dead"})
	if err != nil {
		t.Fatal(err)
	}
	r.verifyWith(t, secret)
	var mu sync.Mutex
	var creates int
	var accepted []string
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var a struct{ ID, Type string }
		body, _ := io.ReadAll(req.Body)
		_ = json.Unmarshal(body, &a)
		mu.Lock()
		defer mu.Unlock()
		if a.Type == "Create" {
			creates++
			if creates == 1 {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
		}
		accepted = append(accepted, a.Type)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(flaky.Close)
	if err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: alice.ID, URI: flaky.URL + "/users/f",
			Inbox: flaky.URL + "/users/f/inbox", SharedInbox: flaky.URL + "/inbox"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	create, note, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "soon gone", To: []string{alice.URI + "/followers"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Create's first POST", func() bool { mu.Lock(); defer mu.Unlock(); return creates == 1 })
	del, err := b.st.DeleteObject(b.ctx, alice, note.URI)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both outcomes", func() bool { g, _ := r.received(); return len(g) >= 2 })
	g, bad := r.received()
	if len(bad) > 0 || len(g) != 2 {
		t.Fatalf("%d webhooks (%v), want 2", len(g), bad)
	}
	byActivity := map[string]webhook.Payload{}
	for _, m := range g {
		byActivity[m.body.Data.ActivityID] = m.body
	}
	if c := byActivity[create.URI]; c.Type != "delivery.completed" || c.Data.Inboxes != 0 || c.Data.Superseded != 1 {
		t.Errorf("the Create's outcome %s %+v, want delivery.completed, 0 inboxes, 1 superseded", c.Type, c.Data)
	}
	if d := byActivity[del.URI]; d.Type != "delivery.completed" || d.Data.Inboxes != 1 || d.Data.Superseded != 0 {
		t.Errorf("the Delete's outcome %s %+v, want delivery.completed, 1 inbox", d.Type, d.Data)
	}
	mu.Lock()
	defer mu.Unlock()
	if creates != 1 || !slices.Equal(accepted, []string{"Delete"}) {
		t.Errorf("the peer got %d Creates and accepted %v; want the Create tried once, then only the Delete", creates, accepted)
	}
}
