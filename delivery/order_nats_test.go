package delivery_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/outbox/natsbus"
	"github.com/courier-ap/courier/store/notetest"
)

// startJetStreamBus runs the bundle's handlers on the JetStream bus (an
// embedded server on 127.0.0.1, its store in t.TempDir()) instead of the
// db worker: the relay publishes the outbox's rows, the consumer runs
// them, and a deferral hands the event back to the outbox.
func (b *bundle) startJetStreamBus() {
	t := b.t
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats server not ready in 10s")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	runner, err := outbox.NewRunner(outbox.RunnerConfig{DB: b.db.Write, Registry: b.reg, Now: b.clock.Now,
		MaxAttempts: 1000}) // a Create failed until the test says so is never dead-lettered
	if err != nil {
		t.Fatal(err)
	}
	bus, err := natsbus.New(natsbus.Config{
		URL: s.ClientURL(), DB: b.db.Write, Read: b.db.Read, Runner: runner, Now: b.clock.Now, Concurrency: 4, MaxAttempts: 1000,
		PollInterval: 20 * time.Millisecond, PauseMin: 50 * time.Millisecond, PauseMax: 400 * time.Millisecond,
		PublishTimeout: 2 * time.Second, ReconnectWait: 50 * time.Millisecond, ReplayPoll: 50 * time.Millisecond,
		ShutdownGrace: 2 * time.Second,
		// A failed delivery comes back after 200 ms of real time (the
		// broker's clock, not the test's).
		Backoff: func(int) time.Duration { return 200 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	b.db.OnWrite(bus.Notify)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bus.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("bus: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("bus did not stop in 30s")
		}
	})
	waitFor(t, "bus ready", func() bool { return bus.Ready() == nil })
}

// TestOrderOnJetStream: the two sequences on the JetStream bus, where a
// published delivery's outbox row is done while it waits in the stream:
// an Update goes after its retried Create, and a Delete goes while the
// retried Create of its note is superseded, never accepted.
func TestOrderOnJetStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, true)
	rm.follow(b, alice, "fan")
	sc := newScript()
	rm.setScript(sc)
	b.startJetStreamBus()

	// The peer answers every POST of the two Creates with 500 until the
	// Update and the Delete are written.
	create1, note1 := postNote(b, alice, "edited soon")
	create2, note2 := postNote(b, alice, "deleted soon")
	sc.mu.Lock()
	for _, id := range []string{create1.URI, create2.URI} {
		sc.fail[id], sc.left[id] = http.StatusInternalServerError, -1
	}
	sc.mu.Unlock()
	b.waitTicking("the Creates' first POSTs", func() bool {
		return rm.postsOf(create1.URI) >= 1 && rm.postsOf(create2.URI) >= 1
	})
	update, _, err := notetest.Update(b.ctx, b.st, alice, note1.URI, notetest.Input{Content: "edited"})
	if err != nil {
		t.Fatal(err)
	}
	del, err := b.st.DeleteObject(b.ctx, alice, note2.URI)
	if err != nil {
		t.Fatal(err)
	}
	sc.mu.Lock()
	sc.left[create1.URI], sc.left[create2.URI] = 0, 0
	sc.mu.Unlock()
	b.waitTicking("the Update and the Delete accepted", func() bool {
		return len(sc.acceptedOf(update.URI)) == 1 && len(sc.acceptedOf(del.URI)) == 1
	})
	if got := sc.acceptedOf(create1.URI, update.URI); !slices.Equal(got, []string{"Create", "Update"}) {
		t.Errorf("the peer accepted %v of the edited note, want the Create, then the Update", got)
	}
	// A POST of the Create begun before the Delete was written may be
	// accepted (the Delete then waits for it); none after the Delete.
	if got := sc.acceptedOf(create2.URI, del.URI); !slices.Equal(got, []string{"Delete"}) &&
		!slices.Equal(got, []string{"Create", "Delete"}) {
		t.Errorf("the peer accepted %v of the deleted note, want no Create after the Delete", got)
	}
	b.waitTicking("the deleted note's Create settled", func() bool {
		r, ok := b.deliveryOf(create2.URI, rm.URL()+"/inbox")
		sup, err := b.svc.Superseded(b.ctx, r.Event.ID)
		return ok && err == nil && (sup || len(sc.acceptedOf(create2.URI)) == 1)
	})
	if got := sc.acceptedOf(create2.URI, del.URI); !slices.Equal(got, []string{"Delete"}) &&
		!slices.Equal(got, []string{"Create", "Delete"}) {
		t.Errorf("the peer accepted %v of the deleted note, want no Create after the Delete", got)
	}
}
