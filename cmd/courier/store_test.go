package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/courier-ap/courier/internal/testnet"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/postgres"
	"github.com/courier-ap/courier/postgres/pgtest"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// The command's tests run once per store: each opens its database at
// storetest.Location (a SQLite file in the test's directory, or with
// COURIER_TEST_STORE=postgres a database of its own on a throwaway
// PostgreSQL cluster). Tests about a SQLite file as such say so.

// envCommand, when set, makes the test binary run courier with these
// arguments (a JSON array) instead of the tests: it is how the tests start
// real courier processes beside each other.
const envCommand = "COURIER_TEST_COMMAND"

// envListeners, in such a child, lists the addresses of the listeners the
// parent handed it open (a JSON array; the first is file descriptor 3): the
// child serves on them instead of listening anew, so each port stays the
// test's from first to last.
const envListeners = "COURIER_TEST_LISTENERS"

func TestMain(m *testing.M) {
	if args := os.Getenv(envCommand); args != "" {
		os.Exit(commandMain(args))
	}
	os.Exit(storetest.Main(m))
}

// commandMain is main for a child process of the tests.
func commandMain(raw string) int {
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintf(os.Stderr, "courier: %s=%q: %v\n", envCommand, raw, err)
		return 2
	}
	if raw := os.Getenv(envListeners); raw != "" {
		var addrs []string
		if err := json.Unmarshal([]byte(raw), &addrs); err != nil {
			fmt.Fprintf(os.Stderr, "courier: %s=%q: %v\n", envListeners, raw, err)
			return 2
		}
		inherited = map[string]net.Listener{}
		for i, addr := range addrs {
			ln, err := net.FileListener(os.NewFile(uintptr(3+i), addr))
			if err != nil {
				fmt.Fprintf(os.Stderr, "courier: listener %s: %v\n", addr, err)
				return 2
			}
			inherited[addr] = ln
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, os.Stdout, os.Stderr, os.Getenv)
}

// withPassword puts a password into a PostgreSQL URL (the test cluster
// trusts loopback, so it still connects), to check that no message or log
// line repeats it; a SQLite path is returned as it is.
const testPassword = "s3cret-pw"

func withPassword(loc string) string {
	if !postgres.IsURL(loc) {
		return loc
	}
	u, err := url.Parse(loc)
	if err != nil {
		panic(err)
	}
	u.User = url.UserPassword(u.User.Username(), testPassword)
	return u.String()
}

// runCommand runs courier in this process with args and no environment.
func runCommand(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb, func(string) string { return "" })
	return code, out.String(), errb.String()
}

// courier migrate brings a fresh store to the latest schema version, then
// again without change, and names the store without its password.
func TestMigrateTwice(t *testing.T) {
	t.Parallel()
	loc := withPassword(storetest.Location(t))
	for i, want := range []string{"applied now)", "(0 applied now)"} {
		code, out, errb := runCommand("migrate", "--db", loc)
		if code != 0 {
			t.Fatalf("migrate %d: exit %d, stderr %q", i, code, errb)
		}
		if !strings.Contains(out, "at schema version") || !strings.Contains(out, want) {
			t.Fatalf("migrate %d: stdout %q, want %q", i, out, want)
		}
		if strings.Contains(out+errb, testPassword) {
			t.Fatalf("migrate %d repeated the password: stdout %q, stderr %q", i, out, errb)
		}
		if storetest.Dialect() == sqldb.Postgres && !strings.Contains(out, "xxxxx@") {
			t.Fatalf("migrate %d: stdout %q, want the URL with its password replaced", i, out)
		}
	}
}

// A password given as a password or sslpassword parameter of the URL is
// replaced in courier migrate's output, in the "store opened" log line and in
// errors; given with --db it draws one warning (naming the flag, not the
// secret), given in COURIER_DB none.
func TestDBPasswordParameterRedacted(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	const secret = "hunter2-param"
	for _, param := range []string{"password", "sslpassword"} {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		loc := dsn + sep + param + "=" + secret
		for _, fromEnv := range []bool{false, true} {
			args, env := []string{"migrate", "--db", loc}, map[string]string{}
			if fromEnv {
				args, env = []string{"migrate"}, map[string]string{"COURIER_DB": loc}
			}
			var out, errb bytes.Buffer
			code := run(context.Background(), args, &out, &errb, func(k string) string { return env[k] })
			if code != 0 {
				t.Fatalf("%s: exit %d, stderr %q", param, code, errb.String())
			}
			if strings.Contains(out.String()+errb.String(), secret) {
				t.Fatalf("%s: the password is repeated: stdout %q, stderr %q", param, out.String(), errb.String())
			}
			if !strings.Contains(out.String(), param+"=xxxxx") {
				t.Errorf("%s: stdout %q, want the URL with its password replaced", param, out.String())
			}
			opened, warned := 0, 0
			for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
				if strings.Contains(line, `"msg":"store opened"`) && strings.Contains(line, param+"=xxxxx") {
					opened++
				}
				if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, "--db carries a secret on the command line") {
					warned++
				}
			}
			if wantWarned := map[bool]int{false: 1, true: 0}[fromEnv]; opened != 1 || warned != wantWarned {
				t.Errorf("%s (environment %v): %d store-opened lines with the URL redacted, %d warnings (want 1, %d); stderr %q",
					param, fromEnv, opened, warned, wantWarned, errb.String())
			}
		}
	}
	// An unreachable server: the error names the URL without the password.
	nobody := "postgres://courier@" + testnet.Refusing(t) + "/courier?connect_timeout=5&password=" + secret
	code, out, errb := runCommand("migrate", "--db", nobody)
	if code != 1 || strings.Count(errb, "\n") != 1 || strings.Contains(out+errb, secret) || !strings.Contains(errb, "password=xxxxx") {
		t.Fatalf("unreachable: exit %d, stderr %q; want exit 1 and one line naming the redacted URL", code, errb)
	}
}

// A PostgreSQL URL the driver cannot parse is a bad setting (exit 2), an
// unreachable server a failure (exit 1), a pool size outside its bounds a
// bad setting; each is one line on stderr that never repeats the
// password. None of these needs a PostgreSQL server, so they run on both
// stores' runs.
func TestPostgresSettingsAndFailures(t *testing.T) {
	t.Parallel()
	nobody := "postgres://courier:" + testPassword + "@" + testnet.Refusing(t) + "/courier?connect_timeout=5" // nothing listens there
	cases := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{"bad port", []string{"migrate", "--db", "postgres://courier:" + testPassword + "@127.0.0.1:notaport/courier"}, nil, 2, "invalid --db (COURIER_DB)"},
		{"bad sslmode", []string{"serve", "--db", "postgresql://courier:" + testPassword + "@db.example/courier?sslmode=maybe"}, nil, 2, "sslmode is invalid"},
		{"bad sslmode, password parameters", []string{"serve", "--db", "postgresql://courier@db.example/courier?sslmode=maybe&password=" + testPassword + "&sslpassword=" + testPassword}, nil, 2, "sslmode is invalid"},
		{"unreachable, password parameter", []string{"migrate", "--db", "postgres://courier@" + testnet.Refusing(t) + "/courier?connect_timeout=5&password=" + testPassword}, nil, 1, "password=xxxxx"},
		{"bad URL from the environment", []string{"worker"}, map[string]string{"COURIER_DB": "postgres://courier:" + testPassword + "@[::1/courier"}, 2, "invalid --db (COURIER_DB)"},
		{"bad URL for an actor", []string{"actor", "create", "--db", "postgres://courier:" + testPassword + "@h:x/c", "alice"}, nil, 2, "invalid --db (COURIER_DB)"},
		{"unreachable, migrate", []string{"migrate", "--db", nobody}, nil, 1, "postgres: connect to postgres://courier:xxxxx@"},
		{"unreachable, serve", []string{"serve", "--db", nobody, "--listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0"}, nil, 1, "postgres: connect to"},
		{"unreachable, worker", []string{"worker", "--db", nobody, "--ops-listen", "127.0.0.1:0"}, nil, 1, "postgres: connect to"},
		{"unreachable, actor", []string{"actor", "create", "--db", nobody, "alice"}, nil, 1, "postgres: connect to"},
		{"one connection", []string{"serve", "--postgres-conns", "1"}, nil, 2, "invalid --postgres-conns (COURIER_POSTGRES_CONNS) 1: must be between 2 and 1000"},
		{"too many connections", []string{"worker"}, map[string]string{"COURIER_POSTGRES_CONNS": "5000"}, 2, "must be between 2 and 1000"},
		{"connections not a number", []string{"migrate"}, map[string]string{"COURIER_POSTGRES_CONNS": "many"}, 2, `invalid COURIER_POSTGRES_CONNS="many"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), c.args, &stdout, &stderr, func(k string) string { return c.env[k] })
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if code != c.code || len(lines) != 1 || !strings.HasPrefix(lines[0], "courier: ") || !strings.Contains(lines[0], c.want) {
				t.Fatalf("exit %d, stderr %q: want exit %d and one line with %q", code, stderr.String(), c.code, c.want)
			}
			if strings.Contains(stderr.String()+stdout.String(), testPassword) {
				t.Fatalf("the password is repeated: stderr %q", stderr.String())
			}
		})
	}
}

// A database migrated by a newer courier is refused, by every command that
// opens it, with one line and exit 1, and left as it was.
func TestNewerDatabaseRefused(t *testing.T) {
	t.Parallel()
	loc := withPassword(storetest.Location(t))
	if code, _, errb := runCommand("migrate", "--db", loc); code != 0 {
		t.Fatalf("migrate: %d %s", code, errb)
	}
	db := storetest.Open(t, loc, storetest.Options{})
	if _, err := db.Write.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'future', 0)`); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"migrate", "--db", loc},
		{"serve", "--db", loc, "--listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0"},
		{"worker", "--db", loc, "--ops-listen", "127.0.0.1:0"},
		{"actor", "create", "--db", loc, "alice"},
	} {
		code, _, errb := runCommand(args...)
		if code != 1 || !strings.Contains(errb, "newer than this binary") || strings.Count(errb, "\n") != 1 || strings.Contains(errb, testPassword) {
			t.Fatalf("%s: exit %d, stderr %q; want exit 1 and one line", args[0], code, errb)
		}
	}
	var n int
	if err := db.Read.QueryRow(`SELECT COUNT(*) FROM schema_migrations WHERE version = 9999`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the newer version's row: %d, %v", n, err)
	}
}

// courier actor create and delete work on the store.
func TestActorCommands(t *testing.T) {
	t.Parallel()
	loc := storetest.Location(t)
	code, out, errb := runCommand("actor", "create", "--db", loc, "--base-url", "https://courier.example", "--json", "alice")
	if code != 0 {
		t.Fatalf("actor create: exit %d, stderr %q", code, errb)
	}
	var created struct{ ID, Token string }
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.ID != "https://courier.example/users/alice" || created.Token == "" {
		t.Fatalf("actor create printed %q (%v)", out, err)
	}
	if code, _, errb := runCommand("actor", "create", "--db", loc, "alice"); code == 0 || !strings.Contains(errb, "alice") {
		t.Fatalf("a second alice: exit %d, stderr %q", code, errb)
	}
	if code, out, errb := runCommand("actor", "delete", "--db", loc, "--base-url", "https://courier.example", "alice"); code != 0 || !strings.Contains(out, "deleted alice") {
		t.Fatalf("actor delete: exit %d, stdout %q, stderr %q", code, out, errb)
	}
}

// process is a courier command running as a child process of the test.
type process struct {
	name   string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{}
	err    error
}

// startProcessOn runs courier with args in a process of its own, handing
// the child the listeners lns open (a --listen or --ops-listen naming one's
// address serves on it); it is stopped (SIGTERM, then awaited) when the
// test ends, if stop was not called before.
func startProcessOn(t *testing.T, name string, lns []net.Listener, args ...string) *process {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	p := &process{name: name, stderr: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), envCommand+"="+string(raw))
	if len(lns) > 0 {
		addrs := make([]string, len(lns))
		for i, ln := range lns {
			addrs[i] = ln.Addr().String()
			p.cmd.ExtraFiles = append(p.cmd.ExtraFiles, testnet.File(t, ln))
		}
		raw, err := json.Marshal(addrs)
		if err != nil {
			t.Fatal(err)
		}
		p.cmd.Env = append(p.cmd.Env, envListeners+"="+string(raw))
	}
	// Once the child holds them, the ports are its alone: when it dies,
	// they are free, as a process's own listeners would be.
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
		for _, f := range p.cmd.ExtraFiles {
			f.Close()
		}
	}()
	p.cmd.Stdout = p.stderr
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// stop sends SIGTERM and requires a clean exit within a minute.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("%s: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s did not stop within a minute of SIGTERM; output:\n%s", p.name, p.stderr.String())
	}
	if p.err != nil {
		t.Fatalf("%s: %v; output:\n%s", p.name, p.err, p.stderr.String())
	}
}

// waitReady polls the process's /readyz until it answers 200; the process
// ending first fails the test.
func (p *process) waitReady(t *testing.T, ops string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) before it was ready; output:\n%s", p.name, p.err, p.stderr.String())
		default:
		}
		resp, err := http.Get("http://" + ops + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after two minutes; output:\n%s", p.name, p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// postVia sends a signed activity from h's actor to target (a URL of the
// instance) through the server listening at addr, as a load balancer in
// front of several servers does; 0 when no answer came.
func postVia(h *remoteHost, addr, target string, act map[string]any) int {
	body, err := json.Marshal(act)
	if err != nil {
		return 0
	}
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.URL.Host = addr // the connection goes to addr; Host stays the instance's
	req.Header.Set("Content-Type", activitypub.ContentType)
	if err := activitypub.SignRequest(req, body, h.actorID()+"#main-key", h.key, time.Now()); err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Two `courier serve --bus db` processes (each with its embedded worker)
// and one `courier worker` share one database, the way several machines
// share one PostgreSQL: a local write on server A reaches the remote inbox
// exactly once, and a Follow POSTed to both A and B is imported once (one
// follower, one Accept). The processes migrate the database at the same
// moment at start-up, and `courier admin` at either server shows the one
// outbox. The URL carries a password no process repeats.
func TestServersAndWorkerShareOneDatabase(t *testing.T) {
	t.Parallel()
	loc := withPassword(storetest.Location(t))
	key, err := activitypub.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	remote := newRemoteHost(t, key, http.StatusAccepted)

	// Every port is held by the test from first to last and handed to its
	// process open.
	lnA, lnB, lnOpsA, lnOpsB, lnOpsW := testnet.Listen(t), testnet.Listen(t), testnet.Listen(t), testnet.Listen(t), testnet.Listen(t)
	addrA, addrB := lnA.Addr().String(), lnB.Addr().String()
	opsA, opsB, opsW := lnOpsA.Addr().String(), lnOpsB.Addr().String(), lnOpsW.Addr().String()
	base := "http://" + addrA // both servers answer for one instance, as behind a load balancer
	adminToken := "6c1f0e9b57a24d83b2e47f19a0c5d836e1b9"
	common := []string{"--db", loc, "--bus", "db", "--base-url", base, "--allow-private-addresses", "--admin-token", adminToken,
		"--synchronous", "NORMAL", "--postgres-conns", "8", "--log-level", "info"}
	procs := []*process{
		startProcessOn(t, "server A", []net.Listener{lnA, lnOpsA}, append([]string{"serve", "--listen", addrA, "--ops-listen", opsA}, common...)...),
		startProcessOn(t, "server B", []net.Listener{lnB, lnOpsB}, append([]string{"serve", "--listen", addrB, "--ops-listen", opsB}, common...)...),
		startProcessOn(t, "worker", []net.Listener{lnOpsW}, append([]string{"worker", "--ops-listen", opsW}, common...)...),
	}
	for i, ops := range []string{opsA, opsB, opsW} {
		procs[i].waitReady(t, ops)
	}

	code, out, errb := runCommand("actor", "create", "--db", loc, "--base-url", base, "--json", "alice")
	if code != 0 {
		t.Fatalf("actor create: exit %d, stderr %q", code, errb)
	}
	var alice struct{ ID, Token string }
	if err := json.Unmarshal([]byte(out), &alice); err != nil {
		t.Fatalf("actor create printed %q: %v", out, err)
	}

	// The same Follow at both servers' shared inboxes, at once.
	follow := map[string]any{
		"@context": activitypub.ActivityStreams,
		"id":       remote.srv.URL + "/follows/1",
		"type":     "Follow", "actor": remote.actorID(), "object": alice.ID,
	}
	statuses := make(chan int, 2)
	for _, addr := range []string{addrA, addrB} {
		go func() { statuses <- postVia(remote, addr, base+"/inbox", follow) }()
	}
	for range 2 {
		if st := <-statuses; st != http.StatusAccepted {
			t.Fatalf("follow answered %d, want 202 from both servers", st)
		}
	}

	db := storetest.Open(t, loc, storetest.Options{})
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.Read.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		rs, err := db.Read.Query(`SELECT event_id, inbox, outcome, status_code FROM delivery_attempts ORDER BY id`)
		if err == nil {
			for rs.Next() {
				var ev, inbox, outcome string
				var status int
				if rs.Scan(&ev, &inbox, &outcome, &status) == nil {
					t.Logf("attempt: event %s to %s: %s %d", ev, inbox, outcome, status)
				}
			}
			rs.Close()
		}
		for _, p := range procs {
			t.Logf("%s:\n%s", p.name, p.stderr.String())
		}
	})
	waitFor(t, "the follower", func() bool { return count(`SELECT COUNT(*) FROM followers`) == 1 })

	// A local write on server A.
	note := `{"type":"Note","content":"hello from A","to":["https://www.w3.org/ns/activitystreams#Public"],"cc":["` + alice.ID + `/followers"]}`
	req, err := http.NewRequest(http.MethodPost, "http://"+addrA+"/users/alice/outbox", strings.NewReader(note))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+alice.Token)
	req.Header.Set("Content-Type", activitypub.ContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create note answered %d", resp.StatusCode)
	}
	// Settled: no outbox row open, and both deliveries' attempts recorded
	// (the delivery service writes its records in batches).
	waitFor(t, "the Create at the remote inbox and a settled outbox", func() bool {
		return remote.got("Create") >= 1 &&
			count(`SELECT COUNT(*) FROM event_queue WHERE status IN ('pending', 'processing')`) == 0 &&
			count(`SELECT COUNT(*) FROM delivery_attempts`) >= 2
	})
	// courier admin shows the one outbox of both servers.
	done := count(`SELECT COUNT(*) FROM event_queue WHERE status = 'done'`)
	for _, ops := range []string{opsA, opsB} {
		code, out, errb := runCommand("admin", "--server", "http://"+ops, "--admin-token", adminToken, "stats", "--json")
		var st struct{ Totals map[string]int64 }
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("admin stats at %s: exit %d, stdout %q, stderr %q", ops, code, out, errb)
		}
		if st.Totals["done"] != int64(done) || st.Totals["pending"] != 0 {
			t.Errorf("admin stats at %s: totals %v, want %d done and none pending", ops, st.Totals, done)
		}
	}
	// Each of the three delivers and is listed as such, by its pid, by
	// either server: they share each host's per-host concurrency.
	var pids []int
	for _, p := range procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	slices.Sort(pids)
	waitFor(t, "the three delivering processes in admin stats", func() bool {
		code, out, _ := runCommand("admin", "--server", "http://"+opsB, "--admin-token", adminToken, "stats", "--json")
		var st admin.Stats
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
			return false
		}
		var got []int
		for _, p := range st.Processes {
			got = append(got, p.PID)
		}
		slices.Sort(got)
		return slices.Equal(got, pids)
	})
	if code, out, errb := runCommand("admin", "--server", "http://"+opsA, "--admin-token", adminToken, "stats"); code != 0 ||
		!strings.Contains(out, "delivering processes: 3") {
		t.Errorf("admin stats: exit %d, stdout %q, stderr %q; want the three delivering processes", code, out, errb)
	}
	// Nothing is in flight once every process has stopped.
	for _, p := range procs {
		p.stop(t)
	}
	if n := count(`SELECT COUNT(*) FROM delivery_processes`); n != 0 {
		t.Errorf("%d delivering processes listed after all stopped, want none", n)
	}

	if a, c := remote.got("Accept"), remote.got("Create"); a != 1 || c != 1 {
		t.Errorf("the remote inbox received %d Accepts and %d Creates, want one of each", a, c)
	}
	if n := count(`SELECT COUNT(*) FROM inbox_activities WHERE activity_id = ? AND imported_at IS NOT NULL`, follow["id"]); n != 1 {
		t.Errorf("imported Follow rows: %d, want 1", n)
	}
	if n := count(`SELECT COUNT(*) FROM followers`); n != 1 {
		t.Errorf("followers: %d, want 1", n)
	}
	if n := count(`SELECT COUNT(*) FROM delivery_attempts`); n != 2 {
		t.Errorf("delivery attempts: %d, want 2 (the Accept and the Create, each once)", n)
	}
	if n := count(`SELECT COUNT(*) FROM delivery_attempts WHERE outcome = 'delivered'`); n != 2 {
		t.Errorf("delivered attempts: %d, want 2 (the Accept and the Create)", n)
	}
	if n := count(`SELECT COUNT(*) FROM event_queue WHERE status <> 'done'`); n != 0 {
		t.Errorf("%d outbox rows not done", n)
	}
	for _, p := range procs {
		logs := p.stderr.String()
		if strings.Contains(logs, testPassword) {
			t.Errorf("%s logged the password", p.name)
		}
		if !strings.Contains(logs, `"msg":"store opened"`) {
			t.Errorf("%s did not log the store it opened:\n%s", p.name, logs)
		}
		if postgres.IsURL(loc) && !strings.Contains(logs, `"db":"postgres://courier:xxxxx@`) {
			t.Errorf("%s did not name the database by its URL with the password replaced:\n%s", p.name, logs)
		}
	}
}
