package outbox_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb/storetest"
)

const (
	crashEnvDB  = "OUTBOX_CRASH_DB"
	crashEnvLog = "OUTBOX_CRASH_LOG"
	crashEvents = 3000
	crashKills  = 10
	// crashProcs worker processes run side by side in each round, as
	// workers on several machines share one database.
	crashProcs = 2
)

var crashHandlers = []string{"first", "second"}

// TestCrashRecovery runs two workers in subprocesses (this test binary
// again) side by side over a few thousand events with slow handlers, kills
// each with SIGKILL at a random moment, restarts them on the same database
// each time, and finally lets two finish. The store is the run's
// (storetest): a SQLite file, or a PostgreSQL database that every process
// opens by its URL. Every handler appends a start line before its work and
// an end line after it to one O_APPEND file, and the test appends a kill
// line once a killed process is gone. Reading that file in order proves
// that no (event, handler) ever ran twice at the same time, in one process
// or across the two, and the database that every event is done.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	t.Parallel()
	dbPath, logPath := storetest.Location(t), filepath.Join(t.TempDir(), "handlers.log")
	ctx := context.Background()

	db := openDB(t, dbPath, "FULL")
	for batch := 0; batch < crashEvents; batch += 500 {
		evs := make([]outbox.Event, 500)
		for i := range evs {
			evs[i] = outbox.Event{Type: "crash", Payload: []byte(fmt.Sprintf(`{"n":%d}`, batch+i))}
		}
		if err := db.Tx(ctx, func(tx *sql.Tx) error { return outbox.Enqueue(ctx, tx, evs...) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	start := func(ctx context.Context) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), quickRaceExit(), crashEnvDB+"="+dbPath, crashEnvLog+"="+logPath)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	killedMidWork := 0
	for i := range crashKills {
		cmds := make([]*exec.Cmd, crashProcs)
		for p := range cmds {
			cmds[p] = start(ctx)
		}
		for p, cmd := range cmds {
			time.Sleep(time.Duration(150+rand.IntN(350)/crashProcs) * time.Millisecond) // the random moment of the crash
			if err := cmd.Process.Kill(); err != nil {
				t.Fatalf("kill %d.%d: %v", i, p, err)
			}
			err := cmd.Wait()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
				t.Logf("run %d.%d ended before the kill: %v", i, p, err)
			} else {
				killedMidWork++
			}
			if _, err := fmt.Fprintf(logf, "K %d\n", cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
		}
	}
	if killedMidWork < crashKills*crashProcs {
		t.Errorf("only %d of %d runs were killed mid-work; the work is too short", killedMidWork, crashKills*crashProcs)
	}
	fctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	finals := make([]*exec.Cmd, crashProcs)
	for p := range finals {
		finals[p] = start(fctx)
	}
	var finalErr error
	for _, cmd := range finals {
		if err := cmd.Wait(); err != nil && finalErr == nil {
			finalErr = err
		}
	}
	completed := checkHandlerLog(t, logPath) // overlaps first: they explain a failed run
	if finalErr != nil {
		t.Fatalf("final run: %v", finalErr)
	}
	if len(completed) != crashEvents*len(crashHandlers) {
		t.Fatalf("%d (event, handler) pairs completed, want %d", len(completed), crashEvents*len(crashHandlers))
	}
	reruns := 0
	for _, n := range completed {
		reruns += n - 1
	}
	t.Logf("%d kills mid-work; %d handler runs repeated after a crash (at-least-once)", killedMidWork, reruns)

	db = openDB(t, dbPath, "FULL")
	var notDone, attempts int
	if err := db.Read.QueryRow(`SELECT COUNT(*) FILTER (WHERE status != 'done'), COALESCE(SUM(attempts), 0)
		FROM event_queue`).Scan(&notDone, &attempts); err != nil {
		t.Fatal(err)
	}
	if notDone != 0 || attempts != 0 {
		t.Fatalf("%d rows not done, %d attempts spent; want 0, 0", notDone, attempts)
	}
	var ledgerDone int
	if err := db.Read.QueryRow(`SELECT COUNT(*) FROM processed_events WHERE status = 'done'`).Scan(&ledgerDone); err != nil {
		t.Fatal(err)
	}
	if ledgerDone != crashEvents*len(crashHandlers) {
		t.Fatalf("ledger: %d done, want %d", ledgerDone, crashEvents*len(crashHandlers))
	}
}

// checkHandlerLog fails the test on an overlap in the handler log and
// returns how many times each (event, handler) ran to its end.
func checkHandlerLog(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	completed, err := replayHandlerLog(f)
	if err != nil {
		t.Fatal(err)
	}
	return completed
}

// replayHandlerLog replays a handler log in write order: a start while the
// same (event, handler) is running in a live process is an overlap. It
// returns how many times each (event, handler) ran to its end.
func replayHandlerLog(r io.Reader) (map[string]int, error) {
	running := map[string]string{} // key -> pid running it
	byPid := map[string]map[string]bool{}
	completed := map[string]int{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 2 && fields[0] == "K":
			for key := range byPid[fields[1]] {
				delete(running, key)
			}
			delete(byPid, fields[1])
		case len(fields) == 4 && fields[0] == "S":
			key, pid := fields[1]+"/"+fields[2], fields[3]
			if other, busy := running[key]; busy {
				return nil, fmt.Errorf("line %d: %s started by %s while running in %s", line, key, pid, other)
			}
			running[key] = pid
			if byPid[pid] == nil {
				byPid[pid] = map[string]bool{}
			}
			byPid[pid][key] = true
		case len(fields) == 4 && fields[0] == "E":
			key, pid := fields[1]+"/"+fields[2], fields[3]
			if running[key] != pid {
				return nil, fmt.Errorf("line %d: %s ended by %s, but %q was running it", line, key, pid, running[key])
			}
			delete(running, key)
			delete(byPid[pid], key)
			completed[key]++
		default:
			return nil, fmt.Errorf("line %d: malformed %q", line, sc.Text())
		}
	}
	return completed, sc.Err()
}

func TestReplayHandlerLog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, log string
		ok        bool
	}{
		{"sequential", "S e h 1\nE e h 1\nS e h 1\nE e h 1\n", true},
		{"other handler", "S e h 1\nS e g 1\nE e g 1\nE e h 1\n", true},
		{"killed then rerun", "S e h 1\nK 1\nS e h 2\nE e h 2\n", true},
		{"overlap in one process", "S e h 1\nS e h 1\nE e h 1\nE e h 1\n", false},
		{"overlap across processes", "S e h 1\nS e h 2\nE e h 2\nE e h 1\n", false},
		{"rerun before the kill", "S e h 1\nS e h 2\nK 1\n", false},
	} {
		_, err := replayHandlerLog(strings.NewReader(tc.log))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// TestCrashHelper is the worker process of TestCrashRecovery.
func TestCrashHelper(t *testing.T) {
	dbPath := os.Getenv(crashEnvDB)
	if dbPath == "" {
		t.Skip("the worker process of TestCrashRecovery")
	}
	ctx := context.Background()
	db := openDB(t, dbPath, "FULL")
	logf, err := os.OpenFile(os.Getenv(crashEnvLog), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	pid := os.Getpid()
	reg := outbox.NewRegistry()
	for _, name := range crashHandlers {
		reg.Handle("crash", name, func(ctx context.Context, ev outbox.Event) error {
			if _, err := fmt.Fprintf(logf, "S %s %s %d\n", ev.ID, name, pid); err != nil {
				return err
			}
			time.Sleep(time.Duration(2000+rand.IntN(16000)) * time.Microsecond) // long enough that two processes do not finish before the kills
			_, err := fmt.Fprintf(logf, "E %s %s %d\n", ev.ID, name, pid)
			return err
		})
	}
	w, err := outbox.NewWorker(outbox.WorkerConfig{
		DB: db.Write, Read: db.Read, Registry: reg,
		Concurrency: 6, BatchSize: 32,
		// Short leases, so recovery after a kill is quick, yet long enough
		// that a live worker's claims never expire under it.
		Lease: 2 * time.Second, LedgerLease: 2 * time.Second,
		PollInterval: 50 * time.Millisecond, ShutdownGrace: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	deadline := time.After(80 * time.Second)
	for {
		var left int
		if err := db.Read.QueryRow(`SELECT COUNT(*) FROM event_queue WHERE status != 'done'`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("%d rows left after 80s", left)
		case <-time.After(100 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// quickRaceExit keeps a subprocess built with -race from sleeping a second
// at exit (the race runtime's atexit_sleep_ms).
func quickRaceExit() string {
	return "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")
}
