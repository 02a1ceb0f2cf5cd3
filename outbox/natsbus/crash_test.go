package natsbus

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// Environment of the worker subprocess of TestKilledWorkerLosesNothing.
const (
	envWorker   = "COURIER_NATSBUS_TEST_WORKER"
	envWorkerDB = "COURIER_NATSBUS_TEST_DB"
	envWorkerJS = "COURIER_NATSBUS_TEST_NATS"
)

// TestWorkerProcess is the worker the crash test runs in a subprocess (the
// test binary re-executed); it does nothing in a normal test run. Its
// handler records every run in test_effects, so the parent can count them.
func TestWorkerProcess(t *testing.T) {
	if os.Getenv(envWorker) != "1" {
		t.Skip("runs only as the crash test's subprocess")
	}
	db := openDB(t, os.Getenv(envWorkerDB))
	reg := outbox.NewRegistry()
	reg.Handle("delivery.post", "effect", func(ctx context.Context, ev outbox.Event) error {
		if _, err := db.Write.ExecContext(ctx, `INSERT INTO test_effects (event_id) VALUES (?)`, ev.ID); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
		return nil
	})
	runner := newRunner(t, db, reg, 50, 2*time.Second, nil)
	cfg := fastConfig(os.Getenv(envWorkerJS), db, runner, nil)
	cfg.MaxAttempts = 50
	cfg.AckWait = time.Second
	cfg.Lease = 2 * time.Second
	cfg.BatchSize = 16
	cfg.Concurrency = 4
	bus := mustNew(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := bus.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// A worker killed with SIGKILL mid-batch and restarted on the same files
// loses nothing: every event is handled, no row is dead-lettered, and the
// stream holds each event once.
func TestKilledWorkerLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	t.Parallel()
	testKilledWorkerLosesNothing(t, newBroker)
}

func testKilledWorkerLosesNothing(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	loc := storetest.Location(t)
	db := openDB(t, loc)
	if _, err := db.Write.Exec(`CREATE TABLE test_effects (event_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const n = 200
	enqueue(t, db, testEvents(n, "delivery.post")...)

	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), envWorker+"=1", envWorkerDB+"="+loc, envWorkerJS+"="+br.url())
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
	effects := func() int { return count(t, db.Write, `SELECT COUNT(DISTINCT event_id) FROM test_effects`) }

	first := start()
	waitFor(t, 60*time.Second, "the first worker to handle some events", func() bool { return effects() >= n/5 })
	kill(first)
	if got := effects(); got >= n {
		t.Fatalf("the first worker finished everything (%d) before it was killed; the test proves nothing", got)
	}
	second := start()
	t.Cleanup(func() { kill(second) })
	waitFor(t, 90*time.Second, "every event handled after the restart", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM processed_events WHERE status = 'done'`) == n
	})
	waitFor(t, 30*time.Second, "every row relayed", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == n
	})
	if got := effects(); got != n {
		t.Errorf("%d events had an effect, want %d", got, n)
	}
	if d := count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'dead_lettered' OR attempts > 0`); d != 0 {
		t.Errorf("%d rows dead-lettered or spent attempts", d)
	}
	_, js := br.js(t)
	// One message per event, plus one per hand-back: a redelivered message
	// whose ledger claim the killed worker still held is deferred, and a
	// deferral goes back to the outbox and is published again.
	handBacks := count(t, db.Write, `SELECT COALESCE(SUM(republished), 0) FROM event_queue`)
	if m := streamMsgs(t, js, DefaultStream); m != uint64(n+handBacks) {
		t.Errorf("stream holds %d messages, want %d (one per event and one per hand-back, %d)", m, n+handBacks, handBacks)
	}
	dup := count(t, db.Write, `SELECT COUNT(*) FROM test_effects`) - n
	t.Logf("killed after some events; %d handler re-runs after the crash (crash after effect, before the ledger mark)", dup)
}
