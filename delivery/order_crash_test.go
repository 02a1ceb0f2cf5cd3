package delivery_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/courier-ap/courier/store/notetest"
)

// TestOrderAcrossSIGKILL: the worker process (this test binary again, the
// worker of TestLocalDeliveryCrash: delivery's real handlers on a real db
// worker, real clock) is killed with SIGKILL while an Update and a Delete
// wait for their notes' Creates, which the peer answers 500 until then,
// and again at random moments while they are retried; restarted each time
// on the same database. At the end the peer accepted the edited note's
// Create, then its Update, and never the deleted note's Create after its
// Delete.
func TestOrderAcrossSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	// The worker signs with the real clock: the peer's date window is
	// centred on it.
	rm := newRemote(t, b.keys, &testClock{now: time.Now()}, true)
	rm.follow(b, alice, "fan")
	sc := newScript()
	rm.setScript(sc)

	create1, note1 := postNote(b, alice, "edited soon")
	create2, note2 := postNote(b, alice, "deleted soon")
	sc.mu.Lock()
	for _, id := range []string{create1.URI, create2.URI} {
		sc.fail[id], sc.left[id] = http.StatusInternalServerError, -1
	}
	sc.mu.Unlock()

	start := func(ctx context.Context) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLocalDeliveryCrashHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), localCrashEnvDB+"="+b.loc)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		if err := cmd.Process.Kill(); err != nil {
			t.Fatalf("kill: %v", err)
		}
		_ = cmd.Wait()
	}
	cmd := start(context.Background())
	waitFor(t, "the Creates' first POSTs", func() bool { return rm.postsOf(create1.URI) >= 1 && rm.postsOf(create2.URI) >= 1 })
	update, _, err := notetest.Update(b.ctx, b.st, alice, note1.URI, notetest.Input{Content: "edited"})
	if err != nil {
		t.Fatal(err)
	}
	del, err := b.st.DeleteObject(b.ctx, alice, note2.URI)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Update's and the Delete's deliveries", func() bool {
		return b.count(`SELECT COUNT(*) FROM delivery_targets WHERE activity_id IN (?, ?)`, update.URI, del.URI) == 2
	})
	time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond) // somewhere in their waits
	kill(cmd)
	sc.mu.Lock()
	sc.left[create1.URI], sc.left[create2.URI] = 0, 0
	sc.mu.Unlock()
	for range 2 {
		cmd = start(context.Background())
		time.Sleep(time.Duration(rand.IntN(1500)) * time.Millisecond)
		kill(cmd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := start(ctx).Wait(); err != nil {
		t.Fatalf("final run: %v", err)
	}
	// A POST whose answer a SIGKILL lost is sent again (the same activity,
	// which a receiver drops by its id): repeats in a row are one arrival.
	if got := slices.Compact(sc.acceptedOf(create1.URI, update.URI)); !slices.Equal(got, []string{"Create", "Update"}) {
		t.Errorf("the peer accepted %v of the edited note, want the Create, then the Update", got)
	}
	if got := slices.Compact(sc.acceptedOf(create2.URI, del.URI)); !slices.Equal(got, []string{"Delete"}) &&
		!slices.Equal(got, []string{"Create", "Delete"}) {
		t.Errorf("the peer accepted %v of the deleted note, want no Create after the Delete", got)
	}
}
