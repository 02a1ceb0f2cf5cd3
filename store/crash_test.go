package store

import (
	"bufio"
	"context"
	"crypto/rsa"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqldb/storetest"
)

const crashEnv = "COURIER_STORE_CRASH_DB"

// TestCrashWriter is the child of TestCrashLeavesNoHalfWrites: it opens
// the store its parent names (a SQLite file or a PostgreSQL database) and
// writes notes as fast as it can, printing the count after each commit,
// until it is killed.
func TestCrashWriter(t *testing.T) {
	loc := os.Getenv(crashEnv)
	if loc == "" {
		t.Skip("child process of TestCrashLeavesNoHalfWrites")
	}
	ctx := context.Background()
	db, err := storetest.OpenAt(ctx, loc, storetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := New(db, testBase, nil)
	st.newKey = func() (*rsa.PrivateKey, error) { return testKey() }
	a, err := st.ActorByName(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 1_000_000; i++ {
		if _, _, err := createNote(ctx, st, a, noteInput{Content: strconv.Itoa(i), To: []string{Public}}); err != nil {
			t.Fatal(err)
		}
		fmt.Println(i)
	}
}

// TestCrashLeavesNoHalfWrites kills a writing process with SIGKILL in the
// middle of its writes and checks the store it leaves (the file, or the
// PostgreSQL database whose connections the kill cut): every note has its
// Create and its outbox event and every event its activity, and every
// write that returned survived.
func TestCrashLeavesNoHalfWrites(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("spawns a process")
	}
	ctx := context.Background()
	loc := storetest.Location(t)
	db, err := storetest.OpenAt(ctx, loc, storetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := New(db, testBase, nil)
	st.newKey = func() (*rsa.PrivateKey, error) { return testKey() }
	if _, _, err := st.CreateActor(ctx, NewActor{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+loc)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill after 40 acknowledged writes, or after 20 s whatever happened.
	acked := 0
	lines := make(chan int)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if n, err := strconv.Atoi(sc.Text()); err == nil {
				lines <- n
			}
		}
	}()
	deadline := time.After(20 * time.Second)
wait:
	for acked < 40 {
		select {
		case n, ok := <-lines:
			if !ok {
				break wait
			}
			acked = n
		case <-deadline:
			break wait
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range lines { // drain until the pipe closes
	}
	_ = cmd.Wait()
	if acked < 40 {
		t.Fatalf("child acknowledged only %d writes", acked)
	}

	db = storetest.Open(t, loc, storetest.Options{})
	count := func(q string) int {
		var n int
		if err := db.Read.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	notes := count(`SELECT COUNT(*) FROM objects`)
	creates := count(`SELECT COUNT(*) FROM activities a JOIN objects o ON o.uri = a.object_uri WHERE a.type = 'Create'`)
	events := count(`SELECT COUNT(*) FROM event_queue e JOIN activities a ON a.event_id = e.event_id`)
	allEvents := count(`SELECT COUNT(*) FROM event_queue`)
	if notes < acked || notes != creates || notes != events || notes != allEvents {
		t.Fatalf("after the crash: %d notes (%d acknowledged), %d Creates, %d events with activities, %d events",
			notes, acked, creates, events, allEvents)
	}
	t.Logf("killed after %d acknowledged writes; %d complete writes on disk, no half writes", acked, notes)
}
