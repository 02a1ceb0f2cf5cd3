package delivery_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

const (
	localCrashEnvDB = "DELIVERY_LOCAL_CRASH_DB"
	localCrashUsers = 16
	localCrashDMs   = 4 // direct notes per actor
	localCrashKills = 6
)

// TestLocalDeliveryCrash: local actors follow, message and like each other
// while the process that fans out and imports (this test binary again,
// running delivery's and the inbox's real handlers on a real worker) is
// killed with SIGKILL at random moments and restarted on the same
// database. At the end each activity was recorded for its local
// recipients once, under the inbox's event id, and imported once: one
// follower and one Accept per Follow, every follow accepted, one like per
// Like, every direct note recorded for its recipient; and not one POST.
func TestLocalDeliveryCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	t.Parallel()
	b := setup(t)
	users := make([]*store.Actor, localCrashUsers)
	for i := range users {
		users[i] = b.actor(fmt.Sprintf("u%d", i))
	}
	var dms []*store.Object
	for i, u := range users {
		b.mustAct(b.st.Follow(b.ctx, u, users[(i+1)%len(users)].URI))
		for j := range localCrashDMs {
			_, o, err := notetest.Create(b.ctx, b.st, u, notetest.Input{Content: fmt.Sprintf("dm %d", j),
				To: []string{users[(i+2)%len(users)].URI}})
			if err != nil {
				t.Fatal(err)
			}
			dms = append(dms, o)
		}
	}
	for i, u := range users { // each likes the first note it was sent
		from := (i - 2 + len(users)) % len(users)
		b.mustAct(b.st.Like(b.ctx, u, dms[from*localCrashDMs].URI))
	}

	start := func(ctx context.Context) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLocalDeliveryCrashHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), localCrashEnvDB+"="+b.loc)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	done := func() int {
		return b.count(`SELECT COUNT(*) FROM processed_events WHERE status = 'done'`)
	}
	midWork := 0
	for i := range localCrashKills {
		before := done()
		cmd := start(context.Background())
		for deadline := time.Now().Add(10 * time.Second); done() == before && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		// The first kill lands as soon as the first event is done, while
		// the rest is still to do however fast this machine is; the others
		// at random moments after.
		if i > 0 {
			time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		_ = cmd.Wait()
		if b.count(`SELECT COUNT(*) FROM event_queue WHERE status <> 'done'`) > 0 {
			midWork++
		}
	}
	if midWork == 0 {
		t.Errorf("no kill landed mid-work; the work is too short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := start(ctx).Wait(); err != nil {
		t.Fatalf("final run: %v", err)
	}

	n := localCrashUsers
	recorded := b.count(`SELECT COUNT(*) FROM inbox_activities`)
	checks := []struct {
		what string
		q    string
		args []any
		want int
	}{
		// Follow, Accept, DMs and Likes each reach one local actor.
		{"recorded activities", `SELECT COUNT(*) FROM inbox_activities`, nil, n*2 + n*localCrashDMs + n},
		{"imported", `SELECT COUNT(*) FROM inbox_activities WHERE imported_at IS NOT NULL`, nil, recorded},
		{"import events, one per record", `SELECT COUNT(*) FROM event_queue WHERE type = ?`, []any{inbox.EventReceived}, recorded},
		{"import events done", `SELECT COUNT(*) FROM event_queue WHERE type = ? AND status = 'done'`, []any{inbox.EventReceived}, recorded},
		{"follows imported once", `SELECT COUNT(*) FROM inbox_activities WHERE type = 'Follow' AND outcome = ?`, []any{inbox.OutcomeFollowed}, n},
		{"accepts imported once", `SELECT COUNT(*) FROM inbox_activities WHERE type = 'Accept' AND outcome = ?`, []any{inbox.OutcomeAnswered}, n},
		{"notes imported", `SELECT COUNT(*) FROM inbox_activities WHERE type = 'Create' AND outcome = ? AND inbox <> ''`, []any{inbox.OutcomeLocal}, n * localCrashDMs},
		{"followers", `SELECT COUNT(*) FROM followers WHERE state = 'accepted'`, nil, n},
		{"following accepted", `SELECT COUNT(*) FROM following WHERE state = 'accepted'`, nil, n},
		{"Accepts", `SELECT COUNT(*) FROM activities WHERE type = 'Accept'`, nil, n},
		{"likes", `SELECT COUNT(*) FROM reactions WHERE type = 'Like'`, nil, n},
		{"POSTs", `SELECT COUNT(*) FROM event_queue WHERE type = ?`, []any{delivery.EventPost}, 0},
	}
	for _, c := range checks {
		if got := b.count(c.q, c.args...); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
	for _, d := range dms[:3] {
		var box string
		if err := b.db.Read.QueryRowContext(b.ctx, `SELECT inbox FROM inbox_activities WHERE object_id = ? AND type = 'Create'`, d.URI).Scan(&box); err != nil ||
			"/users/"+box != d.To[0][len(baseURL):] {
			t.Errorf("the note to %s recorded for %q (%v)", d.To[0], box, err)
		}
	}
	t.Logf("%d activities recorded, %d kills, %d mid-work", recorded, localCrashKills, midWork)
}

// TestLocalDeliveryCrashHelper is the worker process of
// TestLocalDeliveryCrash: delivery's fan-out and the inbox's import on a
// real db worker, until no row is open.
func TestLocalDeliveryCrashHelper(t *testing.T) {
	loc := os.Getenv(localCrashEnvDB)
	if loc == "" {
		t.Skip("the worker process of TestLocalDeliveryCrash")
	}
	ctx := context.Background()
	db := storetest.Open(t, loc, storetest.Options{Synchronous: "NORMAL"})
	st := store.New(db, baseURL, nil)
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{
		Client: activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true}),
		Signer: activitypub.Signer{KeyID: baseURL + "/actor#main-key", Key: instanceKey()},
	})
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := delivery.New(delivery.Config{DB: db, Store: st, Resolver: resolver, Objects: fetcher, LocalInbox: inbox.Local{}, BaseURL: baseURL,
		AllowPrivate: true, Timeout: 5 * time.Second, Version: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	im, err := inbox.NewImporter(inbox.Config{DB: db, Store: st, Resolver: resolver})
	if err != nil {
		t.Fatal(err)
	}
	reg := outbox.NewRegistry()
	svc.Register(reg)
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
	svcDone := make(chan error, 1)
	go func() { svcDone <- svc.Run(wctx) }()
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	deadline := time.After(100 * time.Second)
	for {
		var left int
		if err := db.Read.QueryRow(`SELECT COUNT(*) FROM event_queue WHERE status <> 'done'`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("%d rows left after 100s", left)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-svcDone
}
