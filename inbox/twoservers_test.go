package inbox_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// secondServer runs a second courier server on the bundle's store, as
// another machine behind the same name: a pool of its own, its own inbox
// handler and importer, and its own outbox worker. It returns the address
// its inbox listens on and its importer. Without worker, no worker runs.
func (b *testBundle) secondServer(t *testing.T, worker bool) (string, *inbox.Importer) {
	t.Helper()
	db := openDB(t, b.loc, "NORMAL")
	st := store.New(db, b.base, nil)
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{
		Client: activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true, Timeout: 10 * time.Second}),
		Signer: activitypub.Signer{KeyID: b.base + "/actor#main-key", Key: key(t, keyInstance)},
	})
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	cfg := inbox.Config{DB: db, Store: st, Resolver: resolver, HostRequestsPerMinute: 1e6, HostBytesPerMinute: 1e9}
	h, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	im, err := inbox.NewImporter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	h.Register(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	if !worker {
		return srv.Listener.Addr().String(), im
	}
	reg := outbox.NewRegistry()
	im.Register(reg)
	w, err := outbox.NewWorker(outbox.WorkerConfig{
		DB: db.Write, Read: db.Read, Registry: reg, Concurrency: 4, PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	db.OnWrite(w.Notify)
	done := make(chan error, 1)
	go func() { done <- w.Run(t.Context()) }() // t.Context ends before the cleanups run
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("second worker: %v", err)
		}
	})
	return srv.Listener.Addr().String(), im
}

// to returns a copy of the signed req sent to the server at addr, with
// the same Host header and body: the request a load balancer forwards.
func to(t *testing.T, req *http.Request, addr string) *http.Request {
	t.Helper()
	c := req.Clone(req.Context())
	u := *req.URL
	u.Host = addr
	c.URL = &u
	c.Host = req.URL.Host
	body, err := req.GetBody()
	if err != nil {
		t.Fatal(err)
	}
	c.Body = body
	return c
}

// TestTwoServersImportOnce runs two servers on one store, each with its
// pool, inbox handler, importer and worker, and POSTs every signed
// activity to both at once (a peer retrying through another server while
// the first request is in progress): each is accepted by both, recorded
// once and imported once, whichever worker claims it.
func TestTwoServersImportOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	second, _ := b.secondServer(t, true)
	alice := b.localActor(t, "alice", false)
	_, local, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "mine", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}
	reqs := twoServerRequests(t, b, alice, local.URI)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, req := range reqs {
		for _, r := range []*http.Request{req, to(t, req, second)} {
			wg.Go(func() {
				<-start
				if status, body := do(t, r); status != http.StatusAccepted {
					t.Errorf("POST to %s: %d %s", r.URL.Host, status, body)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	b.drain(t)
	checkImportedOnce(t, b, alice, local.URI, len(reqs))
	if got := b.count(t, `SELECT COUNT(*) FROM processed_events WHERE handler = ? AND status = 'done'`, inbox.HandlerImport); got != len(reqs) {
		t.Errorf("ledger entries done: %d, want %d", got, len(reqs))
	}
}

const twoServerActors = 6

// twoServerRequests signs a Follow of alice, a Like of the local note and
// a Create of a note to alice by each of twoServerActors remote actors.
func twoServerRequests(t *testing.T, b *testBundle, alice *store.Actor, local string) []*http.Request {
	t.Helper()
	var reqs []*http.Request
	for i := range twoServerActors {
		name := fmt.Sprintf("r%d", i)
		b.remote.add(name, key(t, keyRemote))
		actor := b.remote.actor(name)
		id := b.id("create")
		create := activity(id, "Create", actor, note(id+"/note", actor, nil))
		create["cc"] = []string{alice.URI}
		for _, a := range []map[string]any{
			activity(b.id("follow"), "Follow", actor, alice.URI),
			activity(b.id("like"), "Like", actor, local),
			create,
		} {
			reqs = append(reqs, b.request(t, "/inbox", mustJSON(t, a), b.as(t, name)))
		}
	}
	return reqs
}

// checkImportedOnce checks that the total activities of twoServerRequests
// were recorded once and imported once each.
func checkImportedOnce(t *testing.T, b *testBundle, alice *store.Actor, local string, total int) {
	t.Helper()
	const actors = twoServerActors
	checks := []struct {
		what string
		q    string
		args []any
		want int
	}{
		{"recorded activities", `SELECT COUNT(*) FROM inbox_activities`, nil, total},
		{"imported activities", `SELECT COUNT(*) FROM inbox_activities WHERE imported_at IS NOT NULL`, nil, total},
		{"inbound events", `SELECT COUNT(*) FROM event_queue WHERE type = ?`, []any{inbox.EventReceived}, total},
		{"followers", `SELECT COUNT(*) FROM followers WHERE actor_id = ? AND state = 'accepted'`, []any{alice.ID}, actors},
		{"Accept activities", `SELECT COUNT(*) FROM activities WHERE type = 'Accept'`, nil, actors},
		{"likes", `SELECT COUNT(*) FROM reactions WHERE object_uri = ? AND type = 'Like'`, []any{local}, actors},
		{"remote notes", `SELECT COUNT(*) FROM objects WHERE actor_id IS NULL`, nil, actors},
		{"follows imported once", `SELECT COUNT(*) FROM inbox_activities WHERE type = 'Follow' AND outcome = ?`, []any{inbox.OutcomeFollowed}, actors},
		{"likes imported once", `SELECT COUNT(*) FROM inbox_activities WHERE type = 'Like' AND outcome = ?`, []any{inbox.OutcomeCounted}, actors},
		{"creates imported once", `SELECT COUNT(*) FROM inbox_activities WHERE type = 'Create' AND outcome = ?`, []any{inbox.OutcomeStored}, actors},
	}
	for _, c := range checks {
		if got := b.count(t, c.q, c.args...); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
}

// TestTwoImportersOneEvent runs the import of each recorded activity in
// two servers' importers at once, as when two workers hold the same event
// (a lease taken over while the first still works on it): the activity's
// row decides, and each is imported once.
func TestTwoImportersOneEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, options{noWorker: true})
	_, other := b.secondServer(t, false)
	alice := b.localActor(t, "alice", false)
	_, local, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "mine", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}
	reqs := twoServerRequests(t, b, alice, local.URI)
	for _, r := range reqs {
		if status, body := do(t, r); status != http.StatusAccepted {
			t.Fatalf("POST: %d %s", status, body)
		}
	}
	rows, err := outbox.NewQueue(b.db.Write, outbox.QueueOptions{Read: b.db.Read}).List(b.ctx,
		outbox.Filter{Type: inbox.EventReceived, Limit: 1000})
	if err != nil || len(rows) != len(reqs) {
		t.Fatalf("%d inbound events (%v), want %d", len(rows), err, len(reqs))
	}
	var wg sync.WaitGroup
	for _, r := range rows {
		for _, im := range []*inbox.Importer{b.importer, other} {
			wg.Go(func() {
				if err := im.Import(b.ctx, r.Event); err != nil {
					t.Errorf("import %s: %v", r.Event.ID, err)
				}
			})
		}
	}
	wg.Wait()
	checkImportedOnce(t, b, alice, local.URI, len(reqs))
}
