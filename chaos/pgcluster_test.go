//go:build linux

package chaos

import (
	"context"
	"database/sql"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/courier-ap/courier/postgres"
)

// needPostgres skips t when the machine has no PostgreSQL, or fails it when
// CI requires one.
func needPostgres(t *testing.T) {
	t.Helper()
	if _, err := postgres.ServerBin(); err != nil {
		if os.Getenv("COURIER_TEST_POSTGRES_REQUIRED") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// testCluster makes and starts a cluster in t's temporary directory (in ns
// when not nil), stopped when t ends.
func testCluster(t *testing.T, ns *netns, probe string) *pgCluster {
	t.Helper()
	needPostgres(t)
	// Not t.TempDir(): the server's user must reach its directory, and
	// the test's temporary directories are private to root.
	dir, err := os.MkdirTemp("", "courier-chaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	c, err := newPGCluster(filepath.Join(dir, "pg"), port, ns, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.start(probe); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(syscall.SIGINT) })
	return c
}

func openPG(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func countRows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestClusterRestartKeepsCommittedRows: a fast shutdown and an immediate
// one (crash recovery at the next start) each keep every committed row, and
// the server comes back on the same address.
func TestClusterRestartKeepsCommittedRows(t *testing.T) {
	t.Parallel()
	c := testCluster(t, nil, "127.0.0.1")
	ctx := context.Background()
	if err := c.createDatabase(ctx, "127.0.0.1", pgDatabase); err != nil {
		t.Fatal(err)
	}
	db := openPG(t, c.dsn("127.0.0.1", pgDatabase))
	if _, err := db.Exec(`CREATE TABLE t (n INTEGER)`); err != nil {
		t.Fatal(err)
	}
	for i, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT} {
		if _, err := db.Exec(`INSERT INTO t VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		c.stop(sig)
		if c.running() {
			t.Fatal("running after stop")
		}
		if err := db.PingContext(ctx); err == nil {
			t.Fatalf("%s: the server answered while stopped", sig)
		}
		if err := c.start("127.0.0.1"); err != nil {
			t.Fatalf("start after %s: %v", sig, err)
		}
		if n := countRows(t, db); n != i+1 {
			t.Fatalf("after %s: %d rows, want %d", sig, n, i+1)
		}
	}
}

// TestNetnsOfDeadRunsAreRemoved: a namespace named for a run whose
// process is gone (as a run killed with SIGKILL leaves it) is removed by
// the next run's newNetns; one named for a live process is kept. Root only.
func TestNetnsOfDeadRunsAreRemoved(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	dead, alive := netnsPrefix+strconv.Itoa(gone.Process.Pid), netnsPrefix+strconv.Itoa(live.Process.Pid)
	for _, name := range []string{dead, alive} {
		if _, err := ipCmd("netns", "add", name); err != nil {
			t.Skipf("no network namespace on this machine: %v", err)
		}
		t.Cleanup(func() { _, _ = ipCmd("netns", "del", name) })
	}
	ns, err := newNetns(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.close)
	list, err := netnsNames()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, name := range list {
		names[name] = true
	}
	if names[dead] || !names[alive] || !names[ns.name] {
		t.Fatalf("namespaces %v: want %s removed, %s and %s kept", names, dead, alive, ns.name)
	}
}

// TestNetnsCutIsolatesOneLink: PostgreSQL in a namespace of the run's own,
// reached over two links; with link 1 down its client gets nothing through
// (no new connection, an open one hangs) while link 0 works, and once it is
// up again link 1 carries queries again. Root only (ip netns, veth).
func TestNetnsCutIsolatesOneLink(t *testing.T) {
	needPostgres(t)
	ns, err := newNetns(2)
	if err != nil {
		t.Skipf("no network namespace on this machine: %v", err)
	}
	t.Cleanup(ns.close) // after the cluster's stop (cleanups run last first)
	c := testCluster(t, ns, ns.addr(0))
	ctx := context.Background()
	if err := c.createDatabase(ctx, ns.addr(0), pgDatabase); err != nil {
		t.Fatal(err)
	}
	db0 := openPG(t, c.dsn(ns.addr(0), pgDatabase))
	db1 := openPG(t, c.dsn(ns.addr(1), pgDatabase))
	if _, err := db0.Exec(`CREATE TABLE t (n INTEGER)`); err != nil {
		t.Fatal(err)
	}
	held, err := db1.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := held.PingContext(ctx); err != nil {
		t.Fatal(err)
	}

	if err := ns.cut(1); err != nil {
		t.Fatal(err)
	}
	// Bounded waits that must run out: nothing crosses link 1.
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = held.ExecContext(qctx, `INSERT INTO t VALUES (1)`)
	cancel()
	if err == nil {
		t.Fatal("a query crossed the cut link")
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	if conn, err := d.Dial("tcp", net.JoinHostPort(ns.addr(1), strconv.Itoa(c.port))); err == nil {
		conn.Close()
		t.Fatal("a connection was made over the cut link")
	}
	if _, err := db0.Exec(`INSERT INTO t VALUES (2)`); err != nil {
		t.Fatalf("link 0 during the cut: %v", err)
	}

	if err := ns.restore(1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "link 1 back", func() bool {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return db1.PingContext(qctx) == nil
	})
	if _, err := db1.Exec(`INSERT INTO t VALUES (3)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db0.QueryRow(`SELECT COUNT(*) FROM t WHERE n IN (2, 3)`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows 2 and 3: %d, %v", n, err)
	}
}

// TestPostgresSetupCutAndRestart drives the run's PostgreSQL side as a run
// does, with each cut method the machine allows: the run's and every
// worker's DSN reach one database; a cut of worker 1 leaves the run and
// worker 0 working; a restart keeps the rows; close stops the server and
// removes the namespace.
func TestPostgresSetupCutAndRestart(t *testing.T) {
	needPostgres(t)
	for _, method := range []string{"proxy", "netns"} {
		t.Run(method, func(t *testing.T) {
			if method == "netns" {
				ns, err := newNetns(1)
				if err != nil {
					t.Skipf("no network namespace on this machine: %v", err)
				}
				ns.close()
			}
			dir, err := os.MkdirTemp("", "courier-chaos-run-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			cfg, err := Config{Store: "postgres", Cut: method, Logger: slog.New(slog.DiscardHandler)}.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			r := &run{cfg: cfg, logger: cfg.Logger, dir: dir}
			ctx := context.Background()
			if err := r.setupPostgres(ctx); err != nil {
				t.Fatal(err)
			}
			closed := false
			t.Cleanup(func() {
				if !closed {
					r.pg.close()
				}
			})
			p := r.pg
			if p.method != method || len(p.workerDSNs) != 2 {
				t.Fatalf("method %q, %d worker DSNs; want %q and 2", p.method, len(p.workerDSNs), method)
			}
			run := openPG(t, p.runDSN)
			if _, err := run.Exec(`CREATE TABLE t (n INTEGER)`); err != nil {
				t.Fatal(err)
			}
			w0, w1 := openPG(t, p.workerDSNs[0]), openPG(t, p.workerDSNs[1])
			for i, w := range []*sql.DB{w0, w1} {
				if _, err := w.Exec(`INSERT INTO t VALUES ($1)`, i); err != nil {
					t.Fatalf("worker %d: %v", i, err)
				}
			}

			if err := p.cut(1); err != nil {
				t.Fatal(err)
			}
			// A bounded wait that must run out: worker 1 gets nothing through.
			qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err = w1.ExecContext(qctx, `INSERT INTO t VALUES (11)`)
			cancel()
			if err == nil {
				t.Fatal("worker 1 wrote through the cut")
			}
			if _, err := w0.Exec(`INSERT INTO t VALUES (10)`); err != nil {
				t.Fatalf("worker 0 during worker 1's cut: %v", err)
			}
			if err := p.restore(1); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "worker 1 back", func() bool {
				_, err := w1.Exec(`INSERT INTO t VALUES (12)`)
				return err == nil
			})

			p.stopServer(true)
			if err := p.startServer(); err != nil {
				t.Fatal(err)
			}
			var n int
			waitFor(t, 30*time.Second, "rows after the restart", func() bool {
				return run.QueryRow(`SELECT COUNT(*) FROM t WHERE n IN (0, 1, 10, 12)`).Scan(&n) == nil
			})
			if n != 4 || p.restarts != 1 || p.cuts != 1 {
				t.Fatalf("rows %d, restarts %d, cuts %d; want 4, 1, 1", n, p.restarts, p.cuts)
			}

			closed = true
			p.close()
			if p.cluster.running() {
				t.Fatal("server running after close")
			}
			if p.ns != nil {
				if _, err := os.Stat("/run/netns/" + p.ns.name); !os.IsNotExist(err) {
					t.Fatalf("namespace %s still there after close: %v", p.ns.name, err)
				}
			}
		})
	}
}

// TestPostgresURLGetsAFreshDatabase: with a server's URL the run creates a
// database of its own there, reaches it directly and through one proxy per
// worker, cuts through the proxy, and does not count itself able to
// restart that server.
func TestPostgresURLGetsAFreshDatabase(t *testing.T) {
	t.Parallel()
	c := testCluster(t, nil, "127.0.0.1")
	cfg, err := Config{Store: "postgres", PostgresURL: c.dsn("127.0.0.1", "postgres"), Logger: slog.New(slog.DiscardHandler)}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	r := &run{cfg: cfg, logger: cfg.Logger, dir: t.TempDir()}
	if err := r.setupPostgres(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.pg.close()
	p := r.pg
	if p.restartable() || p.method != "proxy" || len(p.proxies) != 2 {
		t.Fatalf("restartable %t, method %q, %d proxies; want false, proxy, 2", p.restartable(), p.method, len(p.proxies))
	}
	run := openPG(t, p.runDSN)
	var name string
	var tables int
	if err := run.QueryRow(`SELECT current_database(), (SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public')`).Scan(&name, &tables); err != nil {
		t.Fatal(err)
	}
	if name == "postgres" || tables != 0 {
		t.Fatalf("database %q with %d tables: want a fresh one of the run's", name, tables)
	}
	w := openPG(t, p.workerDSNs[0])
	var through string
	if err := w.QueryRow(`SELECT current_database()`).Scan(&through); err != nil || through != name {
		t.Fatalf("through the proxy: %q, %v; want %q", through, err, name)
	}
	if err := p.cut(0); err != nil {
		t.Fatal(err)
	}
	// A bounded wait that must run out: nothing crosses the cut.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := w.QueryRowContext(ctx, `SELECT 1`).Scan(new(int)); err == nil {
		t.Fatal("a query crossed the cut proxy")
	}
}
