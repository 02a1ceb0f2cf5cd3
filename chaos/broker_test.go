package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestBrokerOutageKeepsStreamAndDedup stops the embedded broker and starts
// it again: the URL stays the same, and the stream, its messages and its
// dedup window survive, as with a real server restart.
func TestBrokerOutageKeepsStreamAndDedup(t *testing.T) {
	t.Parallel()
	b := newBroker(t.TempDir())
	if err := b.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.stop)
	url := b.url()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	js := connect(t, url)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage, Duplicates: time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.a", []byte("1"), jetstream.WithMsgID("event-1")); err != nil {
		t.Fatal(err)
	}

	b.stop()
	if b.running() {
		t.Fatal("running after stop")
	}
	if _, err := js.Publish(ctx, "t.a", []byte("x"), jetstream.WithMsgID("event-x"), jetstream.WithRetryAttempts(0)); err == nil {
		t.Fatal("publish succeeded while the broker was stopped")
	}
	if err := b.start(); err != nil {
		t.Fatal(err)
	}
	if b.url() != url {
		t.Fatalf("URL changed across the restart: %s, then %s", url, b.url())
	}

	js = connect(t, url)
	ack, err := js.Publish(ctx, "t.a", []byte("1 again"), jetstream.WithMsgID("event-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Duplicate {
		t.Error("a repeated message id after the restart was not recognised as a duplicate")
	}
	s, err := js.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("stream holds %d messages after the restart, want 1", info.State.Msgs)
	}
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
