//go:build linux

package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/courier-ap/courier/postgres"
)

// pgCluster is a throwaway PostgreSQL server the run makes with the
// machine's initdb in a directory of its own and starts on a fixed port, so
// that it can be restarted mid-run (fast or immediate shutdown, then start)
// on the same data and address. When the run is root the server runs as the
// "postgres" user (PostgreSQL refuses root). With a network namespace
// (netns) the server runs inside it and listens on the namespace's
// addresses; otherwise on 127.0.0.1.
type pgCluster struct {
	bin    string
	dir    string // owned by the server's user: data/, the socket, server.log
	host   string // the address it listens on ("*" inside a namespace)
	port   int
	cred   *syscall.Credential
	netns  *netns // nil: the run's own network
	logger *slog.Logger

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// newPGCluster runs initdb in dir (created; it must not exist) for a
// server on port, in ns when ns is not nil.
func newPGCluster(dir string, port int, ns *netns, logger *slog.Logger) (*pgCluster, error) {
	bin, err := postgres.ServerBin()
	if err != nil {
		return nil, err
	}
	cred, err := postgres.ServerCredential()
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("chaos: postgres: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("chaos: postgres: chown %s: %w", dir, err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", pgUser,
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("chaos: postgres: initdb: %w: %s", err, lastLines(out))
	}
	c := &pgCluster{bin: bin, dir: dir, host: "127.0.0.1", port: port, cred: cred, netns: ns, logger: logger}
	if ns != nil {
		// Inside the namespace the server listens on every address, and
		// trusts its clients on the namespace's links (its only peers).
		c.host = "*"
		hba, err := os.OpenFile(filepath.Join(dir, "data", "pg_hba.conf"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return nil, fmt.Errorf("chaos: postgres: %w", err)
		}
		_, err = hba.WriteString("host all all samenet trust\n")
		if cerr := hba.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("chaos: postgres: pg_hba.conf: %w", err)
		}
	}
	return c, nil
}

// dsn is the URL of database db on the server at host (an address the
// server listens on: 127.0.0.1, or one of the namespace's).
func (c *pgCluster) dsn(host, db string) string {
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", pgUser, net.JoinHostPort(host, strconv.Itoa(c.port)), db)
}

// start starts the server and waits until it accepts connections at
// probeHost.
func (c *pgCluster) start(probeHost string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return nil
	}
	logPath := filepath.Join(c.dir, "server.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: postgres: %w", err)
	}
	defer logf.Close()
	if c.cred != nil {
		_ = os.Chown(logPath, int(c.cred.Uid), int(c.cred.Gid)) // the log is a convenience
	}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", filepath.Join(c.dir, "data"),
		"-h", c.host, "-p", strconv.Itoa(c.port), "-k", c.dir,
		"-c", "max_connections=200", "-c", "log_min_messages=warning",
		// A dead client's connection is found within seconds, not hours, so
		// a cut-off worker's claims held in open transactions are let go.
		"-c", "tcp_keepalives_idle=5", "-c", "tcp_keepalives_interval=2", "-c", "tcp_keepalives_count=3")
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server gets SIGQUIT (immediate shutdown) if the run dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if c.netns != nil {
		err = c.netns.start(cmd)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		return fmt.Errorf("chaos: postgres: start: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit is seen through exited; the log says why
		close(exited)
	}()
	dsn := c.dsn(probeHost, "postgres")
	deadline := time.Now().Add(pgReadyTimeout)
	for {
		select {
		case <-exited:
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("chaos: postgres exited at start: %s", lastLines(out))
		default:
		}
		if pgPing(dsn) == nil {
			c.cmd, c.exited = cmd, exited
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("chaos: postgres did not accept connections within %s", pgReadyTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop shuts the server down with sig (SIGINT: fast shutdown, open
// transactions rolled back; SIGQUIT: immediate shutdown, crash recovery at
// the next start) and waits for it, killing it after pgStopTimeout.
func (c *pgCluster) stop(sig syscall.Signal) {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.cmd, c.exited = nil, nil
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig) // it may be gone already
	select {
	case <-exited:
		return
	case <-time.After(pgStopTimeout):
	}
	c.logger.Warn("postgres did not stop: killing its process group", "signal", sig.String())
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// running reports whether the server is up.
func (c *pgCluster) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd != nil
}

// createDatabase creates database name, connecting at host.
func (c *pgCluster) createDatabase(ctx context.Context, host, name string) error {
	return pgCreateDatabase(ctx, c.dsn(host, "postgres"), name)
}
