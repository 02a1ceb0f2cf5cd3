// Package pgtest gives tests a real, throwaway PostgreSQL: a cluster made
// with the machine's initdb in a temporary directory, listening on a free
// port of 127.0.0.1 only, started on first use and stopped when the test
// binary ends (Main) or dies (the server gets SIGQUIT when its parent goes).
// Each test gets a database of its own (DSN).
//
// COURIER_TEST_POSTGRES, when set, names an existing server (a DSN whose user
// may CREATE DATABASE) to use instead. Without either, tests that need
// PostgreSQL skip, unless COURIER_TEST_POSTGRES_REQUIRED=1 (set by CI), which
// makes them fail.
//
// PostgreSQL refuses to run as root; when the tests run as root, the cluster
// runs as the "postgres" user (Debian's package creates it), or "nobody".
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"

	"github.com/courier-ap/courier/postgres"
)

// Environment variables.
const (
	EnvDSN      = "COURIER_TEST_POSTGRES"
	EnvRequired = "COURIER_TEST_POSTGRES_REQUIRED"
)

// Cluster is one running PostgreSQL server made for tests.
type Cluster struct {
	// DSN connects to its "postgres" database as its superuser.
	DSN string
	dir string
	cmd *exec.Cmd
	log string
}

var (
	shared    *Cluster
	sharedErr error
	once      sync.Once
	seq       atomic.Int64
)

// Main runs the tests of a package and stops the shared cluster afterwards,
// if one was started. Use it from TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	return code
}

// DSN returns the URL of a new, empty database for t, dropped... never: the
// whole cluster goes when the binary ends. It skips t when no PostgreSQL is
// available, or fails it when EnvRequired is set.
func DSN(t testing.TB) string {
	t.Helper()
	base, err := server()
	if err != nil {
		if os.Getenv(EnvRequired) == "1" {
			t.Fatalf("pgtest: PostgreSQL is required (%s=1): %v", EnvRequired, err)
		}
		t.Skipf("pgtest: no PostgreSQL: %v", err)
	}
	name := fmt.Sprintf("courier_test_%d_%d", os.Getpid(), seq.Add(1))
	dsn, err := createDatabase(base, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// server returns the DSN of the server tests use: EnvDSN or the shared
// cluster, started on first use.
func server() (string, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		return dsn, nil
	}
	once.Do(func() {
		dir, err := os.MkdirTemp("", "courier-pg-")
		if err != nil {
			sharedErr = err
			return
		}
		shared, sharedErr = Start(dir)
	})
	if sharedErr != nil {
		return "", sharedErr
	}
	return shared.DSN, nil
}

func createDatabase(base, name string) (string, error) {
	db, err := sql.Open("pgx", base)
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// Start makes a new cluster in dir (which must be empty or absent) and
// starts it on a free port of 127.0.0.1. The server dies with this process.
func Start(dir string) (*Cluster, error) {
	bin, err := postgres.ServerBin()
	if err != nil {
		return nil, err
	}
	cred, err := postgres.ServerCredential()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgtest: chown %s: %w", dir, err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "courier", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %w: %s", err, tail(out))
	}
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		c, err := launch(bin, dir, data, port, cred)
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func launch(bin, dir, data string, port int, cred *syscall.Credential) (*Cluster, error) {
	logPath := filepath.Join(dir, "server.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	if cred != nil {
		os.Chown(logPath, int(cred.Uid), int(cred.Gid)) //nolint:errcheck // the log is a convenience
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-k", dir,
		"-c", "max_connections=200", "-c", "log_min_messages=warning")
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server gets SIGQUIT (immediate shutdown) if the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgtest: start postgres: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c := &Cluster{
		DSN: fmt.Sprintf("postgres://courier@127.0.0.1:%d/postgres?sslmode=disable", port),
		dir: dir, cmd: cmd, log: logPath,
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("pgtest: postgres exited: %v: %s", err, tail(out))
		default:
		}
		if dataDir, err := ping(c.DSN); err == nil {
			// The port was free a moment ago, and the machine may run
			// other clusters: the server that answers must be this one.
			if dataDir != data {
				cmd.Process.Kill() //nolint:errcheck // not the server that answered
				<-exited
				return nil, fmt.Errorf("pgtest: port %d answered by another server (%s)", port, dataDir)
			}
			go func() { <-exited }()
			return c, nil
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill() //nolint:errcheck // giving up
			return nil, errors.New("pgtest: postgres did not accept connections within 60 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down (fast shutdown) and removes its directory.
func (c *Cluster) Stop() {
	if c.cmd != nil && c.cmd.Process != nil {
		c.cmd.Process.Signal(syscall.SIGINT) //nolint:errcheck // it may be gone
		for i := 0; i < 200 && c.cmd.Process.Signal(syscall.Signal(0)) == nil; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		c.cmd.Process.Kill() //nolint:errcheck // after 10 s
	}
	os.RemoveAll(c.dir) //nolint:errcheck // a temporary directory
}

// ping connects to dsn and returns the data directory of the server that
// answered.
func ping(dsn string) (string, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var dir string
	err = db.QueryRowContext(ctx, `SHOW data_directory`).Scan(&dir)
	return dir, err
}

// freePort is a port that was free a moment ago: PostgreSQL binds its own
// socket, so a port cannot be handed to it held; launch checks that the
// server answering on it is the one it started, and Start tries again
// with another port otherwise.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}
