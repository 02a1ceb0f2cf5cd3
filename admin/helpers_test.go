package admin_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
)

// The tests run the admin API over real HTTP (httptest on 127.0.0.1)
// against a real store migrated by the real runner, opened by storetest: a
// SQLite file in t.TempDir() (synchronous=NORMAL keeps it fast; WAL and the
// single writer are as in production), or with COURIER_TEST_STORE=postgres a
// database of its own on a throwaway PostgreSQL cluster, with outbox rows produced by the real outbox code: Enqueue,
// the db worker and its ledger, the JetStream bus, the delivery service.

const token = "admin-token-for-tests-0123456789"

// testClock is an injected clock that moves only when told. It starts an
// hour ahead of the real clock: outbox.Enqueue stamps rows with the real
// time, so every row is due on the test clock, and everything the outbox,
// the delivery service and the admin API compute follows the test clock.
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

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// logBuffer collects JSON log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// records returns the log records whose message is msg.
func (l *logBuffer) records(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.buf.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

type bundle struct {
	t     testing.TB
	ctx   context.Context
	db    *sqldb.DB
	st    *store.Store
	queue *outbox.Queue
	clock *testClock
	logs  *logBuffer
	cfg   admin.Config
	api   *admin.API
	srv   *httptest.Server
}

func openDB(t testing.TB) *sqldb.DB {
	t.Helper()
	return storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
}

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

// setup opens a database and serves the admin API over it; opts adjust
// the Config before New.
func setup(t testing.TB, opts ...func(*bundle, *admin.Config)) *bundle {
	t.Helper()
	b := &bundle{t: t, ctx: t.Context(), db: openDB(t), clock: newClock(), logs: &logBuffer{}}
	b.st = store.New(b.db, "https://courier.example", b.clock.Now)
	b.queue = outbox.NewQueue(b.db.Write, outbox.QueueOptions{Read: b.db.Read, Now: b.clock.Now})
	b.cfg = admin.Config{
		Token: token, Queue: b.queue, Store: b.st, Now: b.clock.Now,
		Logger: slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, o := range opts {
		o(b, &b.cfg)
	}
	api, err := admin.New(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.api = api
	r := mux.NewRouter()
	api.Register(r)
	b.srv = httptest.NewServer(r)
	t.Cleanup(b.srv.Close)
	return b
}

// do sends one request with the bearer token tok ("" sends none).
func (b *bundle) do(method, path, tok string, body string) (int, []byte) {
	b.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(b.ctx, method, b.srv.URL+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		b.t.Errorf("%s %s: content type %q, want JSON", method, path, ct)
	}
	return resp.StatusCode, raw
}

// call sends an authorized request, requires status want and decodes the
// answer into out (when non-nil).
func (b *bundle) call(method, path string, want int, out any) []byte {
	b.t.Helper()
	return b.callBody(method, path, "", want, out)
}

func (b *bundle) callBody(method, path, body string, want int, out any) []byte {
	b.t.Helper()
	status, raw := b.do(method, path, token, body)
	if status != want {
		b.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			b.t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return raw
}

// wantError requires an error answer with status and a message containing
// sub.
func (b *bundle) wantError(method, path, body string, status int, sub string) admin.ErrorBody {
	b.t.Helper()
	got, raw := b.do(method, path, token, body)
	var e admin.ErrorBody
	if err := json.Unmarshal(raw, &e); err != nil {
		b.t.Fatalf("%s %s: error body %s is not JSON: %v", method, path, raw, err)
	}
	if got != status || e.Error == "" || !strings.Contains(e.Error, sub) {
		b.t.Fatalf("%s %s: status %d %q, want %d with %q", method, path, got, e.Error, status, sub)
	}
	return e
}

// enqueue inserts events through the one insert path.
func (b *bundle) enqueue(evs ...outbox.Event) []outbox.Event {
	b.t.Helper()
	if err := b.db.Tx(b.ctx, func(tx *sql.Tx) error { return outbox.Enqueue(b.ctx, tx, evs...) }); err != nil {
		b.t.Fatal(err)
	}
	return evs
}

func events(n int, typ, target string) []outbox.Event {
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = outbox.Event{Type: typ, Target: target, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return evs
}

// row returns the outbox row of an event.
func (b *bundle) row(eventID string) outbox.Row {
	b.t.Helper()
	rs, err := b.queue.List(b.ctx, outbox.Filter{EventID: eventID})
	if err != nil || len(rs) != 1 {
		b.t.Fatalf("row of %s: %v (%d rows)", eventID, err, len(rs))
	}
	return rs[0]
}

// startWorker runs a real outbox db worker over reg until the test ends
// (or stop is called).
func (b *bundle) startWorker(reg *outbox.Registry, maxAttempts int) (stop func()) {
	b.t.Helper()
	w, err := outbox.NewWorker(outbox.WorkerConfig{
		DB: b.db.Write, Read: b.db.Read, Registry: reg, Concurrency: 4, MaxAttempts: maxAttempts,
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
		if err := w.Run(ctx); err != nil {
			b.t.Errorf("worker: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	b.t.Cleanup(stop)
	return stop
}

// waitFor polls cond every 5 ms for up to 60 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStatus waits until the event's row has status.
func (b *bundle) waitStatus(eventID, status string) outbox.Row {
	b.t.Helper()
	var r outbox.Row
	waitFor(b.t, "event "+eventID+" "+status, func() bool {
		r = b.row(eventID)
		return r.Status == status
	})
	return r
}

// cli runs the admin command against the bundle's server.
func (b *bundle) cli(args ...string) (code int, stdout, stderr string) {
	b.t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{"COURIER_ADMIN_URL": b.srv.URL, "COURIER_ADMIN_TOKEN": token}
	code = admin.Command(b.ctx, args, &out, &errb, func(k string) string { return env[k] })
	return code, out.String(), errb.String()
}
