package inbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

const (
	crashEnvDB   = "INBOX_CRASH_DB"
	crashEnvBase = "INBOX_CRASH_BASE"
	crashEnvKey  = "INBOX_CRASH_KEY"
	crashActors  = 60
	crashNotes   = 12 // Creates per actor, beside one Follow and one Like
	crashKills   = 8
)

// TestImportCrash records a few hundred signed activities through the real
// HTTP path, then imports them in a worker subprocess (this test binary
// again) that is killed with SIGKILL at random moments and restarted on the
// same database, and finally lets it finish. Each activity must have been
// imported exactly once: one follower and one Accept per Follow, one like
// per Like, one object per Create, and every activity's outcome the one its
// first import records (a second import of a Like would record no_match).
func TestImportCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	t.Parallel()
	b := setup(t, options{sync: "FULL", noWorker: true})
	alice := b.localActor(t, "alice", false)
	_, local, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "mine", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}

	// Sign in parallel (RSA signing is the slow part), post in parallel.
	var reqs []*http.Request
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range crashActors {
		name := fmt.Sprintf("a%d", i)
		b.remote.add(name, key(t, keyRemote))
		actor := b.remote.actor(name)
		wg.Go(func() {
			acts := []map[string]any{
				activity(b.id("follow"), "Follow", actor, alice.URI),
				activity(b.id("like"), "Like", actor, local.URI),
			}
			for range crashNotes {
				id := b.id("create")
				create := activity(id, "Create", actor, note(id+"/note", actor, nil))
				create["cc"] = []string{alice.URI} // concerns alice: stored
				acts = append(acts, create)
			}
			var mine []*http.Request
			for _, a := range acts {
				mine = append(mine, b.request(t, "/inbox", mustJSON(t, a), b.as(t, name)))
			}
			mu.Lock()
			reqs = append(reqs, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	for s := range 8 {
		wg.Go(func() {
			for i := s; i < len(reqs); i += 8 {
				if status, body := do(t, reqs[i]); status != http.StatusAccepted {
					t.Errorf("POST: %d %s", status, body)
				}
			}
		})
	}
	wg.Wait()
	total := len(reqs)
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ? AND status = 'pending'`, inbox.EventReceived); n != total {
		t.Fatalf("%d pending inbound events, want %d", n, total)
	}

	keyPath := filepath.Join(t.TempDir(), "instance.pem")
	pem, err := activitypub.EncodePrivateKeyPEM(key(t, keyInstance))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, []byte(pem), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(ctx context.Context) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestImportCrashHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnvDB+"="+b.loc, crashEnvBase+"="+b.base, crashEnvKey+"="+keyPath)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	imported := func() int {
		return b.count(t, `SELECT COUNT(*) FROM inbox_activities WHERE imported_at IS NOT NULL`)
	}
	midWork := 0
	for i := range crashKills {
		before := imported()
		cmd := start(context.Background())
		// The crash comes at a random moment after this worker imported
		// its first activity (or after 10 s): a loaded machine can take
		// longer to start the process than a fixed delay allows.
		for deadline := time.Now().Add(10 * time.Second); imported() == before && before < total && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		_ = cmd.Wait()
		if n := imported(); n > 0 && n < total {
			midWork++
		}
	}
	if midWork == 0 {
		t.Errorf("no kill landed mid-import; the work is too short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := start(ctx).Wait(); err != nil {
		t.Fatalf("final run: %v", err)
	}

	checks := []struct {
		what string
		q    string
		args []any
		want int
	}{
		{"imported activities", `SELECT COUNT(*) FROM inbox_activities WHERE imported_at IS NOT NULL`, nil, total},
		{"followers", `SELECT COUNT(*) FROM followers WHERE actor_id = ? AND state = 'accepted'`, []any{alice.ID}, crashActors},
		{"Accept activities", `SELECT COUNT(*) FROM activities WHERE type = 'Accept'`, nil, crashActors},
		{"Accept events", `SELECT COUNT(*) FROM event_queue WHERE type = ? AND event_id IN (SELECT event_id FROM activities WHERE type = 'Accept')`,
			[]any{activitypub.EventOutgoing}, crashActors},
		{"likes", `SELECT COUNT(*) FROM reactions WHERE object_uri = ? AND type = 'Like'`, []any{local.URI}, crashActors},
		{"remote notes", `SELECT COUNT(*) FROM objects WHERE actor_id IS NULL`, nil, crashActors * crashNotes},
		{"follows imported once", `SELECT COUNT(*) FROM inbox_activities WHERE type = 'Follow' AND outcome = ?`, []any{inbox.OutcomeFollowed}, crashActors},
		{"likes imported once", `SELECT COUNT(*) FROM inbox_activities WHERE type = 'Like' AND outcome = ?`, []any{inbox.OutcomeCounted}, crashActors},
		{"creates imported once", `SELECT COUNT(*) FROM inbox_activities WHERE type = 'Create' AND outcome = ?`, []any{inbox.OutcomeStored}, crashActors * crashNotes},
		{"inbound events done", `SELECT COUNT(*) FROM event_queue WHERE type = ? AND status = 'done'`, []any{inbox.EventReceived}, total},
		{"ledger entries done", `SELECT COUNT(*) FROM processed_events WHERE handler = ? AND status = 'done'`, []any{inbox.HandlerImport}, total},
	}
	for _, c := range checks {
		if got := b.count(t, c.q, c.args...); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
	t.Logf("%d activities, %d kills, %d mid-import", total, crashKills, midWork)
}

// TestImportCrashHelper is the worker process of TestImportCrash.
func TestImportCrashHelper(t *testing.T) {
	dbPath := os.Getenv(crashEnvDB)
	if dbPath == "" {
		t.Skip("the worker process of TestImportCrash")
	}
	ctx := context.Background()
	db := openDB(t, dbPath, "")
	pem, err := os.ReadFile(os.Getenv(crashEnvKey))
	if err != nil {
		t.Fatal(err)
	}
	k, err := activitypub.ParsePrivateKeyPEM(string(pem))
	if err != nil {
		t.Fatal(err)
	}
	base := os.Getenv(crashEnvBase)
	st := store.New(db, base, nil)
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{
		Client: activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true}),
		Signer: activitypub.Signer{KeyID: base + "/actor#main-key", Key: k},
	})
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	im, err := inbox.NewImporter(inbox.Config{DB: db, Store: st, Resolver: resolver})
	if err != nil {
		t.Fatal(err)
	}
	reg := outbox.NewRegistry()
	im.Register(reg)
	w, err := outbox.NewWorker(outbox.WorkerConfig{
		DB: db.Write, Read: db.Read, Registry: reg, Concurrency: 4, BatchSize: 16,
		Lease: time.Second, LedgerLease: time.Second, // short leases: recovery after a kill is quick
		PollInterval: 20 * time.Millisecond, ShutdownGrace: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	db.OnWrite(w.Notify)
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
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
