package relay_test

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/relay"
	"github.com/courier-ap/courier/server"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// The tests run courier (its server, inbox, importer and the relay
// handlers on the db bus, over a real SQLite file) against a relay on
// loopback written for the test: it serves its actor, verifies the
// signature of every POST it gets against the key courier publishes
// (fetched over HTTP), and records the activities. The test speaks for
// the relay (its Accept, Follow and Announce, signed with its key), in
// the two protocols of FEP-ae0c.

var (
	keyOnce  sync.Once
	relayKey *rsa.PrivateKey
)

func testKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	keyOnce.Do(func() {
		k, err := activitypub.GenerateKey()
		if err != nil {
			panic(err)
		}
		relayKey = k
	})
	return relayKey
}

// fakeRelay is the relay. Its actor is /actor, its inbox /inbox; objects
// it serves at other paths (as the origin of what it announces).
type fakeRelay struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	received []receivedPost
	docs     map[string][]byte
}

type receivedPost struct {
	keyID    string
	activity map[string]any
}

func newFakeRelay(t *testing.T) *fakeRelay {
	f := &fakeRelay{t: t, docs: map[string][]byte{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	pem, err := activitypub.EncodePublicKeyPEM(&testKey(t).PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	id := f.srv.URL + "/actor"
	f.docs["/actor"], _ = json.Marshal(map[string]any{
		"@context": []string{activitypub.ActivityStreams, activitypub.SecurityContext},
		"id":       id, "type": "Application", "preferredUsername": "relay", "inbox": f.srv.URL + "/inbox",
		"publicKey": map[string]string{"id": id + "#main-key", "owner": id, "publicKeyPem": pem},
	})
	return f
}

func (f *fakeRelay) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		f.mu.Lock()
		doc, ok := f.docs[r.URL.Path]
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", activitypub.ContentType)
		_, _ = w.Write(doc)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || r.URL.Path != "/inbox" {
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	sig, err := activitypub.RequestSignature(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	// Fetch the signer's key from courier, as a relay does.
	req, _ := http.NewRequest(http.MethodGet, strings.SplitN(sig.KeyID, "#", 2)[0], nil)
	req.Header.Set("Accept", activitypub.ContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	doc, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a, err := activitypub.ParseActor(doc)
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	pub, _, err := activitypub.KeyOf(a, sig.KeyID)
	if err == nil {
		err = activitypub.VerifySignature(r, sig, body, pub, activitypub.VerifyOptions{})
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var act map[string]any
	if err := json.Unmarshal(body, &act); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.received = append(f.received, receivedPost{keyID: sig.KeyID, activity: act})
	f.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// waitFor polls until the relay received an activity of type typ, and
// returns it and the key that signed it.
func (f *fakeRelay) waitFor(typ string, n int) receivedPost {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		f.mu.Lock()
		var seen []receivedPost
		for _, p := range f.received {
			if p.activity["type"] == typ {
				seen = append(seen, p)
			}
		}
		f.mu.Unlock()
		if len(seen) >= n {
			return seen[n-1]
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the relay got no %s #%d in 20s", typ, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fakeRelay) count(typ string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.received {
		if p.activity["type"] == typ {
			n++
		}
	}
	return n
}

type bundle struct {
	ctx   context.Context
	db    *sqldb.DB
	st    *store.Store
	base  string
	alice *store.Actor
	relay *fakeRelay
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	db := storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	st := store.New(db, base, nil)
	inst, err := st.InstanceActor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	client := activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true, Timeout: 10 * time.Second})
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{Client: client, Signer: inst.Signer()})
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	cfg := inbox.Config{DB: db, Store: st, Resolver: resolver}
	in, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	im, err := inbox.NewImporter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	web, err := server.New(server.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	in.Register(r)
	web.Register(r)
	srv.Config.Handler = r
	srv.Start()
	t.Cleanup(srv.Close)

	rs, err := relay.New(relay.Config{Store: st, Resolver: resolver, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	reg := outbox.NewRegistry()
	rs.Register(reg)
	im.Register(reg)
	w, err := outbox.NewWorker(outbox.WorkerConfig{DB: db.Write, Read: db.Read, Registry: reg, Concurrency: 4, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	db.OnWrite(w.Notify)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	alice, _, err := st.CreateActor(ctx, store.NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{ctx: ctx, db: db, st: st, base: base, alice: alice, relay: newFakeRelay(t)}
}

// post signs body as the relay actor and POSTs it to courier's path.
func (b *bundle) post(t *testing.T, path string, v any) {
	t.Helper()
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, b.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", activitypub.ContentType)
	if err := activitypub.SignRequest(req, body, b.relay.srv.URL+"/actor#main-key", testKey(t), time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, msg)
	}
}

func (b *bundle) relayState(t *testing.T) store.Relay {
	t.Helper()
	rs, err := b.st.Relays(b.ctx)
	if err != nil || len(rs) != 1 {
		t.Fatalf("relays %+v %v", rs, err)
	}
	return rs[0]
}

// waitState polls until the relay's state is want.
func (b *bundle) waitState(t *testing.T, want string) store.Relay {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := b.relayState(t)
		if r.State == want {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay state %q, want %q", r.State, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMastodonRelay: a relay inbox URL is followed with a Follow of
// as:Public sent there, signed by the instance actor; once the relay
// accepts, public activities of local actors reach it too, signed by
// their authors, and followers-only ones do not; removing it sends the
// Undo.
func TestMastodonRelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := b.st.AddRelay(b.ctx, b.relay.srv.URL+"/inbox")
	if err != nil || r.Style != store.RelayMastodon || r.State != store.StatePending {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := b.st.AddRelay(b.ctx, b.relay.srv.URL+"/inbox"); store.ErrorCode(err) != store.ECONFLICT {
		t.Fatalf("added twice: %v", err)
	}
	follow := b.relay.waitFor("Follow", 1)
	if follow.keyID != b.base+"/actor#main-key" || follow.activity["object"] != activitypub.Public || follow.activity["id"] != r.FollowActivityID {
		t.Fatalf("Follow %+v", follow)
	}
	// The relay answers from its actor, to the instance actor's inbox.
	b.post(t, "/actor/inbox", map[string]any{"@context": activitypub.ActivityStreams, "id": b.relay.srv.URL + "/accept/1",
		"type": "Accept", "actor": b.relay.srv.URL + "/actor", "object": follow.activity})
	got := b.waitState(t, store.StateAccepted)
	if got.ActorURI != b.relay.srv.URL+"/actor" {
		t.Fatalf("relay actor %q", got.ActorURI)
	}
	if _, _, err := notetest.Create(b.ctx, b.st, b.alice, notetest.Input{Content: "followers only", To: []string{b.alice.URI + "/followers"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := notetest.Create(b.ctx, b.st, b.alice, notetest.Input{Content: "public", To: []string{store.Public}}); err != nil {
		t.Fatal(err)
	}
	create := b.relay.waitFor("Create", 1)
	obj, _ := create.activity["object"].(map[string]any)
	if create.keyID != b.alice.URI+"#main-key" || obj["content"] != "public" {
		t.Fatalf("Create %+v", create)
	}
	if _, err := b.st.RemoveRelay(b.ctx, b.relay.srv.URL+"/inbox"); err != nil {
		t.Fatal(err)
	}
	undo := b.relay.waitFor("Undo", 1)
	if inner, _ := undo.activity["object"].(map[string]any); inner["id"] != r.FollowActivityID {
		t.Fatalf("Undo %+v", undo.activity)
	}
	if n := b.relay.count("Create"); n != 1 {
		t.Fatalf("%d Creates relayed, want 1 (the followers-only note stays home)", n)
	}
	if rs, _ := b.st.Relays(b.ctx); len(rs) != 0 {
		t.Fatalf("relays after removal: %+v", rs)
	}
}

// TestLitePubRelay: a relay actor URL is followed by the instance actor at
// the actor's inbox; the relay's Accept and its Follow back are imported
// (the Follow answered with an Accept); its Announce of an object, the
// captured Mastodon status testdata/mastodon_note_1.json served by its
// origin, is imported by fetching the object there. Before the relay
// accepts, its Announces are ignored.
func TestLitePubRelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := os.ReadFile(filepath.Join("testdata", "mastodon_note_1.json"))
		if err != nil || r.URL.Path != "/users/felix/statuses/107224289116410645" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", activitypub.ContentType)
		_, _ = w.Write(bytes.ReplaceAll(raw, []byte("https://mastodon.madrid"), []byte("http://"+r.Host)))
	}))
	t.Cleanup(origin.Close)
	noteID := origin.URL + "/users/felix/statuses/107224289116410645"
	relayActor := b.relay.srv.URL + "/actor"
	announce := func(n string) map[string]any {
		return map[string]any{"@context": activitypub.ActivityStreams, "id": b.relay.srv.URL + "/announce/" + n,
			"type": "Announce", "actor": relayActor, "object": noteID, "to": []string{relayActor + "/followers"}}
	}

	r, err := b.st.AddRelay(b.ctx, relayActor)
	if err != nil || r.Style != store.RelayLitePub {
		t.Fatalf("%+v %v", r, err)
	}
	follow := b.relay.waitFor("Follow", 1)
	if follow.keyID != b.base+"/actor#main-key" || follow.activity["object"] != relayActor {
		t.Fatalf("Follow %+v", follow)
	}
	b.post(t, "/inbox", announce("early"))
	if got := b.outcome(t, b.relay.srv.URL+"/announce/early"); got != inbox.OutcomeIgnored {
		t.Fatalf("the Announce before the Accept: %q", got)
	}
	b.post(t, "/actor/inbox", map[string]any{"@context": activitypub.ActivityStreams, "id": b.relay.srv.URL + "/accept/1",
		"type": "Accept", "actor": relayActor, "object": follow.activity["id"]})
	b.waitState(t, store.StateAccepted)
	b.post(t, "/actor/inbox", map[string]any{"@context": activitypub.ActivityStreams, "id": b.relay.srv.URL + "/follow/1",
		"type": "Follow", "actor": relayActor, "object": b.base + "/actor"})
	accept := b.relay.waitFor("Accept", 1)
	if inner, _ := accept.activity["object"].(map[string]any); inner["id"] != b.relay.srv.URL+"/follow/1" || accept.keyID != b.base+"/actor#main-key" {
		t.Fatalf("Accept %+v", accept)
	}
	b.post(t, "/actor/inbox", announce("1"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		o, err := b.st.ObjectByURI(b.ctx, noteID)
		if err == nil {
			if o.AttributedTo != origin.URL+"/users/felix" || !strings.Contains(o.Content, "thinkpad") {
				t.Fatalf("stored %+v", o)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the announced note was not imported: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// outcome waits for the import of activity id and returns its outcome.
func (b *bundle) outcome(t *testing.T, id string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var o *string
		err := b.db.Read.QueryRow(`SELECT outcome FROM inbox_activities WHERE activity_id = ?`, id).Scan(&o)
		if err == nil && o != nil {
			return *o
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not imported in 20s: %v", id, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRejectedRelay: a relay's Reject is recorded, and a rejected relay
// gets no public activity.
func TestRejectedRelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := b.st.AddRelay(b.ctx, b.relay.srv.URL+"/inbox")
	if err != nil {
		t.Fatal(err)
	}
	follow := b.relay.waitFor("Follow", 1)
	b.post(t, "/actor/inbox", map[string]any{"@context": activitypub.ActivityStreams, "id": b.relay.srv.URL + "/reject/1",
		"type": "Reject", "actor": b.relay.srv.URL + "/actor", "object": follow.activity})
	if got := b.outcome(t, b.relay.srv.URL+"/reject/1"); got != inbox.OutcomeAnswered {
		t.Fatalf("Reject: %q", got)
	}
	if got := b.relayState(t); got.State != store.StateRejected || got.FollowActivityID != r.FollowActivityID {
		t.Fatalf("%+v", got)
	}
	if _, _, err := notetest.Create(b.ctx, b.st, b.alice, notetest.Input{Content: "public", To: []string{store.Public}}); err != nil {
		t.Fatal(err)
	}
	// The note's events are settled before the relay is looked at again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := b.db.Read.QueryRow(`SELECT COUNT(*) FROM event_queue WHERE status IN ('pending', 'processing')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events pending", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := b.relay.count("Create"); n != 0 {
		t.Fatalf("a rejected relay got %d Creates", n)
	}
}

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }
