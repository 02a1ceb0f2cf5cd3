package app_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rsa"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
)

// The tests run the real path: a courier on loopback (httptest) with the
// inbox and the application's routes mounted on one router, a real store
// (SQLite file, or PostgreSQL with COURIER_TEST_STORE=postgres) migrated by
// the real runner, the real importer run by the outbox worker, a remote
// server on loopback that serves its actors' keys, and activities signed
// with a real RSA key.

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

var (
	keyOnce   sync.Once
	remoteKey *rsa.PrivateKey
)

func testKey(t testing.TB) *rsa.PrivateKey {
	keyOnce.Do(func() {
		k, err := activitypub.GenerateKey()
		if err != nil {
			panic(err)
		}
		remoteKey = k
	})
	return remoteKey
}

type bundle struct {
	ctx    context.Context
	db     *sqldb.DB
	loc    string // where db lives, to open it again as another process would
	st     *store.Store
	rec    *app.Recorder
	app    *app.Handler
	srv    *httptest.Server
	base   string
	remote *httptest.Server
	seq    atomic.Int64
	// docs are documents the remote serves by path instead of an actor.
	docs sync.Map
}

func setup(t testing.TB, cfg app.Config) *bundle {
	t.Helper()
	b := &bundle{ctx: context.Background()}
	b.loc = storetest.Location(t)
	b.db = storetest.Open(t, b.loc, storetest.Options{Synchronous: "NORMAL"})
	b.srv = httptest.NewUnstartedServer(nil)
	b.base = "http://" + b.srv.Listener.Addr().String()
	b.st = store.New(b.db, b.base, nil)
	k := testKey(t)
	pem, err := activitypub.EncodePublicKeyPEM(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	b.remote = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id := "http://" + req.Host + req.URL.Path
		w.Header().Set("Content-Type", activitypub.ContentType)
		if doc, ok := b.docs.Load(req.URL.Path); ok {
			_, _ = w.Write(doc.([]byte))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"@context": []string{activitypub.ActivityStreams, activitypub.SecurityContext},
			"id":       id, "type": "Person", "preferredUsername": req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:],
			"inbox": id + "/inbox", "followers": id + "/followers",
			"publicKey": map[string]string{"id": id + "#main-key", "owner": id, "publicKeyPem": pem},
		})
	}))
	t.Cleanup(b.remote.Close)

	client := activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true, Timeout: 10 * time.Second})
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{Client: client,
		Signer: activitypub.Signer{KeyID: b.base + "/actor#main-key", Key: k}})
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: b.st})
	if err != nil {
		t.Fatal(err)
	}
	if b.rec, err = app.NewRecorder(app.RecorderConfig{DB: b.db, Store: b.st}); err != nil {
		t.Fatal(err)
	}
	icfg := inbox.Config{DB: b.db, Store: b.st, Resolver: resolver, App: b.rec, HostRequestsPerMinute: 1e6,
		HostBytesPerMinute: 1 << 30}
	in, err := inbox.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	im, err := inbox.NewImporter(icfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DB, cfg.Store = b.db, b.st
	if b.app, err = app.New(cfg); err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	in.Register(r)
	b.app.Register(r)
	b.srv.Config.Handler = r
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	t.Cleanup(b.app.Close)

	reg := outbox.NewRegistry()
	im.Register(reg)
	w, err := outbox.NewWorker(outbox.WorkerConfig{DB: b.db.Write, Read: b.db.Read, Registry: reg, Concurrency: 4,
		PollInterval: 20 * time.Millisecond})
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
	return b
}

// actor creates local actor name and returns it with its token.
func (b *bundle) actor(t testing.TB, name string, manual bool) (*store.Actor, string) {
	t.Helper()
	a, tok, err := b.st.CreateActor(b.ctx, store.NewActor{Name: name, ManuallyApprovesFollowers: manual})
	if err != nil {
		t.Fatal(err)
	}
	return a, tok
}

func (b *bundle) remoteActor(name string) string { return b.remote.URL + "/users/" + name }

func (b *bundle) id(kind string) string {
	return fmt.Sprintf("%s/activities/%s/%d", b.remote.URL, kind, b.seq.Add(1))
}

// follows has local actor a follow remote actor target, accepted.
func (b *bundle) follows(t testing.TB, a *store.Actor, target string) {
	t.Helper()
	now := time.Now().UnixMilli()
	err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO following (actor_id, target_uri, follow_activity_id, state, created_at, updated_at)
			VALUES (?, ?, ?, 'accepted', ?, ?)`, a.ID, target, b.base+"/activities/follow-"+fmt.Sprint(b.seq.Add(1)), now, now)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// post signs act as its actor (remote, with the remote's key) and posts it
// to the shared inbox; it requires 202.
func (b *bundle) post(t testing.TB, act map[string]any) {
	t.Helper()
	if err := b.send(act); err != nil {
		t.Fatal(err)
	}
}

// send is post for a goroutine of the test: it returns what went wrong.
func (b *bundle) send(act map[string]any) error {
	body, err := json.Marshal(act)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodPost, b.base+"/inbox", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", activitypub.ContentType)
	if err := activitypub.SignRequest(req, body, act["actor"].(string)+"#main-key", remoteKey, time.Now()); err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("POST %v: %d %s", act["id"], resp.StatusCode, rb)
	}
	return nil
}

// items waits until actor a's view holds n items, failing at the test's
// deadline.
func (b *bundle) waitItems(t testing.TB, a *store.Actor, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	if d, ok := t.(*testing.T); ok {
		if dl, ok := d.Deadline(); ok {
			deadline = dl.Add(-5 * time.Second)
		}
	}
	for {
		var got int
		if err := b.db.Read.QueryRow(`SELECT COUNT(*) FROM app_inbox_items WHERE actor_id = ?`, a.ID).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			if got > n {
				t.Fatalf("actor %s has %d items, want %d", a.Name, got, n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("actor %s has %d items, want %d", a.Name, got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// get GETs url with the bearer token tok ("" for none) and returns the
// response and its body.
func get(t testing.TB, url, tok string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

type page struct {
	ID           string            `json:"id"`
	Type         string            `json:"type"`
	TotalItems   *int64            `json:"totalItems"`
	First        string            `json:"first"`
	EventStream  string            `json:"eventStream"`
	Next         string            `json:"next"`
	Prev         string            `json:"prev"`
	OrderedItems []json.RawMessage `json:"orderedItems"`
}

func getPage(t testing.TB, url, tok string) page {
	t.Helper()
	resp, body := get(t, url, tok)
	return checkPage(t, url, resp, body)
}

// decodePage reads resp as an inbox page.
func decodePage(t testing.TB, resp *http.Response) page {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return checkPage(t, resp.Request.URL.String(), resp, body)
}

func checkPage(t testing.TB, url string, resp *http.Response, body []byte) page {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/activity+json" {
		t.Fatalf("GET %s: content type %q", url, ct)
	}
	var p page
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
	return p
}

// itemIDs returns the ids of a page's items.
func itemIDs(t testing.TB, p page) []string {
	t.Helper()
	var ids []string
	for _, raw := range p.OrderedItems {
		var a struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, a.ID)
	}
	return ids
}

// sse is a Server-Sent Events client reading one stream.
type sse struct {
	resp *http.Response
	r    *bufio.Reader
}

type event struct {
	id, data string
}

func openStream(t testing.TB, ctx context.Context, url, tok, lastID string) (*sse, *http.Response) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, resp
	}
	return &sse{resp: resp, r: bufio.NewReader(resp.Body)}, resp
}

// next reads the next event; comments are counted in comments.
func (s *sse) next(comments *int) (event, error) {
	var ev event
	var data []string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if ev.id != "" || len(data) > 0 {
				ev.data = strings.Join(data, "\n")
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			if comments != nil {
				*comments++
			}
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "data: "):
			data = append(data, line[6:])
		}
	}
}

func (s *sse) close() { s.resp.Body.Close() }
