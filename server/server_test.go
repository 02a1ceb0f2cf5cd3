package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
)

// testClock is an injected clock that tests advance by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type testBundle struct {
	ctx   context.Context
	db    *sqldb.DB
	st    *store.Store
	srv   *httptest.Server
	base  string
	clock *testClock
	// alice is a local actor and token her bearer token.
	alice *store.Actor
	token string
}

// setup runs a real server on loopback over a fresh store (storetest: a
// SQLite file, or a PostgreSQL database with COURIER_TEST_STORE=postgres)
// migrated by the real runner. The store's base URL is the test server's own URL, so
// every id courier mints can be fetched. synchronous=NORMAL keeps the
// commits fast; durability is not what these tests check.
func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx := context.Background()
	db := storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
	var handler http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	clock := &testClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	st := store.New(db, srv.URL, clock.Now)
	s, err := New(Config{Store: st, Version: "1.2.3", PageSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	handler = s.Handler()
	b := &testBundle{ctx: ctx, db: db, st: st, srv: srv, base: srv.URL, clock: clock}
	b.alice, b.token = b.actor(t, "alice")
	return b
}

func (b *testBundle) actor(t *testing.T, name string) (*store.Actor, string) {
	t.Helper()
	a, tok, err := b.st.CreateActor(b.ctx, store.NewActor{Name: name, DisplayName: strings.ToUpper(name)})
	if err != nil {
		t.Fatal(err)
	}
	return a, tok
}

// response is a read HTTP response.
type response struct {
	*http.Response
	Body []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("%s: body is not a JSON object: %v\n%s", r.Request.URL, err, r.Body)
	}
	return m
}

// do sends a request to the test server; url may be a path or an absolute
// URL. headers alternate name and value.
func (b *testBundle) do(t *testing.T, method, url string, body []byte, headers ...string) response {
	t.Helper()
	if strings.HasPrefix(url, "/") {
		url = b.base + url
	}
	req, err := http.NewRequestWithContext(b.ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
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

const apJSON = "application/activity+json"

func (b *testBundle) get(t *testing.T, url string, headers ...string) response {
	t.Helper()
	return b.do(t, http.MethodGet, url, nil, append([]string{"Accept", apJSON}, headers...)...)
}

// post sends a client-to-server request to name's outbox with token.
func (b *testBundle) post(t *testing.T, name, token string, body any) response {
	t.Helper()
	raw, ok := body.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	return b.do(t, http.MethodPost, "/users/"+name+"/outbox", raw, "Content-Type", apJSON, "Authorization", "Bearer "+token)
}

// count runs a COUNT query on the writer.
func (b *testBundle) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := b.db.Write.QueryRowContext(b.ctx, q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func wantStatus(t *testing.T, r response, status int) {
	t.Helper()
	if r.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d\n%s", r.Request.Method, r.Request.URL, r.StatusCode, status, r.Body)
	}
}

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }
