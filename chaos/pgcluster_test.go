//go:build linux

package chaos

import (
	"context"
	"database/sql"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// needPostgres skips t when the machine has no PostgreSQL, or fails it when
// CI requires one.
func needPostgres(t *testing.T) {
	t.Helper()
	if _, err := pgBin(); err != nil {
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
