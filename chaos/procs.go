package chaos

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// child is one courier process the run keeps alive (the server or the
// worker). It is restarted by keep whenever it is down and its hold has
// passed, so a kill is followed by a restart after a chosen pause, and a
// process that exits by itself (a worker that cannot reach the broker at
// start-up) comes back too. Output goes to a log file in the run directory.
type child struct {
	name   string
	exe    string
	args   []string
	env    []string
	log    *os.File
	logger *slog.Logger

	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{} // closed when cmd has exited
	signalled  bool          // the current process was signalled by the run
	holdUntil  time.Time     // no restart before this
	starts     int
	sigkills   int
	sigterms   int
	unexpected int // exits the run did not cause
}

func newChild(name, exe string, args, env []string, logPath string, logger *slog.Logger) (*child, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chaos: %s log: %w", name, err)
	}
	return &child{name: name, exe: exe, args: args, env: env, log: f, logger: logger.With("process", name)}, nil
}

// running reports whether the process is up.
func (c *child) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd != nil
}

// keep starts the process when it is down and its hold has passed.
func (c *child) keep(now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil || now.Before(c.holdUntil) {
		return nil
	}
	cmd := exec.Command(c.exe, c.args...)
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Stdout = c.log
	cmd.Stderr = c.log
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start %s: %w", c.name, err)
	}
	c.cmd, c.done, c.signalled = cmd, make(chan struct{}), false
	c.starts++
	done := c.done
	go func() {
		err := cmd.Wait()
		c.mu.Lock()
		if !c.signalled {
			c.unexpected++
			c.logger.Warn("process exited on its own", "err", err)
			// Pause before the next start so a process that cannot start
			// does not spin.
			c.holdUntil = time.Now().Add(time.Second)
		}
		c.cmd = nil
		c.mu.Unlock()
		close(done)
	}()
	return nil
}

// kill sends sig to the process (if it is up) and keeps it down for hold.
// It returns the channel closed when that process has exited (nil when
// none was running).
func (c *child) kill(sig syscall.Signal, hold time.Duration) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holdUntil = time.Now().Add(hold)
	if c.cmd == nil {
		return nil
	}
	c.signalled = true
	if err := c.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.logger.Warn("signal", "signal", sig.String(), "err", err)
	}
	switch sig {
	case syscall.SIGKILL:
		c.sigkills++
	case syscall.SIGTERM:
		c.sigterms++
	}
	return c.done
}

// release lifts the hold, so that keep starts the process at once.
func (c *child) release() {
	c.mu.Lock()
	c.holdUntil = time.Time{}
	c.mu.Unlock()
}

// stop ends the process for good: SIGTERM, then SIGKILL after grace. It
// returns once the process has exited.
func (c *child) stop(grace time.Duration) {
	done := c.kill(syscall.SIGTERM, 24*time.Hour)
	if done == nil {
		return
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	if done := c.kill(syscall.SIGKILL, 24*time.Hour); done != nil {
		<-done // SIGKILL cannot be ignored
	}
}

// closeLog closes the log file; call after stop.
func (c *child) closeLog() { _ = c.log.Close() }

// childStats are the counts of one child.
type childStats struct {
	Starts, SIGKILLs, SIGTERMs, Unexpected int
}

func (c *child) stats() childStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return childStats{Starts: c.starts, SIGKILLs: c.sigkills, SIGTERMs: c.sigterms, Unexpected: c.unexpected}
}
