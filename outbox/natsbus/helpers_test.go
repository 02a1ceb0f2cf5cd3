package natsbus

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/sqlite"
)

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

// The tests use real parts: a store of package storetest, migrated by the
// real runner (a SQLite file in t.TempDir(), WAL, one writer connection, as
// production; with COURIER_TEST_STORE=postgres a database of a throwaway
// PostgreSQL cluster, so every test runs once per store), and a JetStream
// server embedded in the test process with its file store in t.TempDir(),
// stopped and restarted on the same store and port to simulate outages.

// broker is a JetStream server that can be stopped and started again on the
// same port and store: embedded in the test process, or (bin set) the
// nats-server binary in a subprocess.
type broker struct {
	t    testing.TB
	dir  string
	port int
	bin  string
	mu   sync.Mutex
	srv  *server.Server
	cmd  *exec.Cmd
}

// brokerFunc starts a broker for a test.
type brokerFunc func(testing.TB) *broker

func newBroker(t testing.TB) *broker {
	t.Helper()
	b := &broker{t: t, dir: t.TempDir(), port: -1}
	b.start()
	t.Cleanup(b.stop)
	return b
}

// externalBroker returns a brokerFunc running the nats-server binary bin.
func externalBroker(bin string) brokerFunc {
	return func(t testing.TB) *broker {
		t.Helper()
		b := &broker{t: t, dir: t.TempDir(), port: -1, bin: bin}
		b.start()
		t.Cleanup(b.stop)
		return b
	}
}

func (b *broker) start() {
	b.t.Helper()
	if b.bin != "" {
		b.startExternal()
		return
	}
	opts := &server.Options{Host: "127.0.0.1", Port: b.port, JetStream: true, StoreDir: b.dir,
		NoLog: true, NoSigs: true}
	s, err := server.NewServer(opts)
	if err != nil {
		b.t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(2 * time.Minute) {
		s.Shutdown()
		b.t.Fatal("nats server not ready in 2m")
	}
	b.mu.Lock()
	b.srv = s
	b.port = s.Addr().(*net.TCPAddr).Port
	b.mu.Unlock()
}

// startExternal runs the binary and waits until JetStream answers.
func (b *broker) startExternal() {
	b.t.Helper()
	// The first start takes a port of the server's own choosing (-p -1)
	// and reports it in a ports file; a restart takes the same port again.
	ports := filepath.Join(b.dir, "ports")
	cmd := exec.Command(b.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(b.port), "-js", "-sd", b.dir, "--ports_file_dir", ports)
	if err := os.MkdirAll(ports, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.t.Fatalf("start %s: %v", b.bin, err)
	}
	b.mu.Lock()
	b.cmd = cmd
	b.mu.Unlock()
	// Generous: on a loaded machine a start may take long; nothing here
	// times the server.
	deadline := time.Now().Add(2 * time.Minute)
	for b.port <= 0 {
		if port, ok := portsFile(ports, cmd.Process.Pid); ok {
			b.mu.Lock()
			b.port = port
			b.mu.Unlock()
			break
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s wrote no ports file in 2m", b.bin)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		nc, err := nats.Connect(b.url(), nats.Timeout(time.Second))
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
			nc.Close()
			if err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s not ready in 2m: %v", b.bin, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// portsFile reads the client port from the ports file nats-server writes
// for process pid (--ports_file_dir), once it is there.
func portsFile(dir string, pid int) (int, bool) {
	raw, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s_%d.ports", filepath.Base(os.Args[0]), pid)))
	if err != nil {
		matches, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("*_%d.ports", pid)))
		if len(matches) != 1 {
			return 0, false
		}
		if raw, err = os.ReadFile(matches[0]); err != nil {
			return 0, false
		}
	}
	var p struct{ Nats []string }
	if json.Unmarshal(raw, &p) != nil || len(p.Nats) == 0 {
		return 0, false
	}
	u, err := url.Parse(p.Nats[0])
	if err != nil {
		return 0, false
	}
	port, err := strconv.Atoi(u.Port())
	return port, err == nil && port > 0
}

func (b *broker) stop() {
	b.mu.Lock()
	s, cmd := b.srv, b.cmd
	b.srv, b.cmd = nil, nil
	b.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
	if cmd != nil {
		// A clean stop (SIGTERM) syncs the store, as a restart by an
		// operator would.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

func (b *broker) url() string  { return "nats://" + b.addr() }
func (b *broker) addr() string { return fmt.Sprintf("127.0.0.1:%d", b.port) }

// js opens a client connection for the test's own checks.
func (b *broker) js(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(b.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// openDB opens (creating and migrating) the store at loc
// (storetest.Location).
func openDB(t testing.TB, loc string) *sqldb.DB {
	t.Helper()
	return storetest.Open(t, loc, storetest.Options{Synchronous: "NORMAL"})
}

// openSQLite opens (creating and migrating) the SQLite file at path with
// opts, for the tests about SQLite's write lock.
func openSQLite(t testing.TB, path string, opts sqlite.Options) *sqldb.DB {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, path, opts)
	if err != nil {
		t.Fatalf("open db: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := migrations.Apply(ctx, db.Write, migrations.Options{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db
}

func newDB(t testing.TB) *sqldb.DB {
	return openDB(t, storetest.Location(t))
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

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// records returns the log records whose message is msg.
func (l *logBuffer) records(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// waitFor polls cond every 20 ms until it holds or timeout passes, and
// never less than two minutes: timeout says what is expected, but on a
// loaded machine the verdict must not depend on speed.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = max(timeout, 2*time.Minute)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// enqueue inserts events through the one insert path.
func enqueue(t testing.TB, db *sqldb.DB, evs ...outbox.Event) []outbox.Event {
	t.Helper()
	if err := db.Tx(context.Background(), func(tx *sql.Tx) error { return outbox.Enqueue(context.Background(), tx, evs...) }); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return evs
}

func testEvents(n int, typ string) []outbox.Event {
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = outbox.Event{Type: typ, Target: "example.test", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return evs
}

// count runs a COUNT query.
func count(t testing.TB, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// runBus starts bus.Run in the background and stops it at cleanup, failing
// the test if Run returns an error or does not return in time.
func runBus(t testing.TB, bus *Bus, run func(*Bus, context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(bus, ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("bus run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("bus run did not return 30s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// newRunner builds the real outbox Runner over db's writer.
func newRunner(t testing.TB, db *sqldb.DB, reg *outbox.Registry, maxAttempts int, lease time.Duration, obs *outbox.Observer) *outbox.Runner {
	t.Helper()
	r, err := outbox.NewRunner(outbox.RunnerConfig{DB: db.Write, Registry: reg, MaxAttempts: maxAttempts,
		LedgerLease: lease, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fastConfig is a Config with short pauses for tests.
func fastConfig(url string, db *sqldb.DB, runner Runner, logs *logBuffer) Config {
	c := Config{
		URL:            url,
		DB:             db.Write,
		Read:           db.Read,
		Runner:         runner,
		PollInterval:   20 * time.Millisecond,
		PauseMin:       50 * time.Millisecond,
		PauseMax:       400 * time.Millisecond,
		PublishTimeout: 2 * time.Second,
		ReconnectWait:  50 * time.Millisecond,
		ReplayPoll:     50 * time.Millisecond,
		ShutdownGrace:  2 * time.Second,
	}
	if logs != nil {
		c.Logger = logs.logger()
	}
	return c
}

func mustNew(t testing.TB, cfg Config) *Bus {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("new bus: %v", err)
	}
	return b
}

// waitReady waits until the bus reports ready.
func waitReady(t testing.TB, b *Bus) {
	t.Helper()
	waitFor(t, 20*time.Second, "bus ready", func() bool { return b.Ready() == nil })
}

// streamMsgs returns how many messages a stream holds.
func streamMsgs(t testing.TB, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s info: %v", name, err)
	}
	return info.State.Msgs
}

var errAlways = errors.New("remote said no")
