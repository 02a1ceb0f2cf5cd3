package chaos

import (
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqldb/storetest"
)

// The test binary doubles as the child process of these tests.
func TestMain(m *testing.M) {
	switch os.Getenv("CHAOS_TEST_CHILD") {
	case "sleep":
		time.Sleep(30 * time.Second) // bounded: a leaked child ends by itself
		os.Exit(0)
	case "exit":
		os.Exit(3)
	}
	os.Exit(storetest.Main(m))
}

func testChild(t *testing.T, mode string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := newChild("test", exe, []string{"-test.run=^$"}, []string{"CHAOS_TEST_CHILD=" + mode},
		filepath.Join(t.TempDir(), "child.log"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.stop(5 * time.Second)
		c.closeLog()
	})
	return c
}

// waitFor polls cond every 10ms for at most d, and never less than two
// minutes: d says what is expected, but on a loaded machine the verdict
// must not depend on speed.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	d = max(d, 2*time.Minute)
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestChildKillAndRestart(t *testing.T) {
	t.Parallel()
	c := testChild(t, "sleep")
	if err := c.keep(time.Now()); err != nil {
		t.Fatal(err)
	}
	if !c.running() {
		t.Fatal("not running after keep")
	}
	done := c.kill(syscall.SIGKILL, time.Hour)
	if done == nil {
		t.Fatal("kill of a running process returned no done channel")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("SIGKILLed process did not exit within 10s")
	}
	// Held: keep does not restart it before the hold has passed.
	if err := c.keep(time.Now()); err != nil || c.running() {
		t.Fatalf("restarted during its hold (err %v)", err)
	}
	if err := c.keep(time.Now().Add(2 * time.Hour)); err != nil || !c.running() {
		t.Fatalf("not restarted after its hold (err %v)", err)
	}
	c.stop(5 * time.Second)
	if c.running() {
		t.Fatal("running after stop")
	}
	st := c.stats()
	if st.Starts != 2 || st.SIGKILLs != 1 || st.SIGTERMs != 1 || st.Unexpected != 0 {
		t.Errorf("stats %+v, want 2 starts, 1 SIGKILL, 1 SIGTERM, 0 unexpected", st)
	}
}

func TestChildExitingByItselfIsCounted(t *testing.T) {
	t.Parallel()
	c := testChild(t, "exit")
	if err := c.keep(time.Now()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "child exit", func() bool { return !c.running() })
	if st := c.stats(); st.Unexpected != 1 {
		t.Errorf("unexpected exits = %d, want 1", st.Unexpected)
	}
	// It is held for a moment so that a failing process does not spin.
	if err := c.keep(time.Now()); err != nil || c.running() {
		t.Fatalf("restarted at once after exiting by itself (err %v)", err)
	}
}
