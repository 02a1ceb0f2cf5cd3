package natsbus

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-ap/courier/internal/testnet"
)

// A pre-existing stream with the 2-minute default window and a consumer with
// other settings are updated in place; operator-set fields stay.
func TestReconcileUpdatesInPlace(t *testing.T) {
	t.Parallel()
	testReconcileUpdatesInPlace(t, newBroker)
}

func testReconcileUpdatesInPlace(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	db := newDB(t)
	_, js := br.js(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        DefaultStream,
		Description: "set by the operator",
		Subjects:    []string{"courier.events.>"},
		Storage:     jetstream.FileStorage,
		MaxMsgs:     123456,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, DefaultStream, jetstream.ConsumerConfig{
		Durable:       DefaultConsumer,
		Description:   "operator's consumer",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    3,
		MaxAckPending: 77,
		FilterSubject: "courier.events.>",
	}); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	cfg := fastConfig(br.url(), db, nil, logs)
	cfg.MaxAttempts = 9
	cfg.AckWait = 2 * time.Minute
	bus := mustNew(t, cfg)
	stop := runBus(t, bus, (*Bus).RunRelay)
	waitReady(t, bus)
	stop()

	s, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	sc := s.CachedInfo().Config
	if sc.Duplicates != time.Hour {
		t.Errorf("duplicate_window = %s, want 1h", sc.Duplicates)
	}
	if sc.Description != "set by the operator" || sc.MaxMsgs != 123456 {
		t.Errorf("operator-set stream fields lost: description %q, max_msgs %d", sc.Description, sc.MaxMsgs)
	}
	c, err := js.Consumer(ctx, DefaultStream, DefaultConsumer)
	if err != nil {
		t.Fatal(err)
	}
	cc := c.CachedInfo().Config
	if cc.MaxDeliver != 9 || cc.AckWait != 2*time.Minute {
		t.Errorf("consumer max_deliver %d ack_wait %s, want 9 and 2m", cc.MaxDeliver, cc.AckWait)
	}
	if cc.Description != "operator's consumer" || cc.MaxAckPending != 77 {
		t.Errorf("operator-set consumer fields lost: description %q, max_ack_pending %d", cc.Description, cc.MaxAckPending)
	}
	for _, msg := range []string{
		"jetstream stream config differs from what courier needs; updating it in place",
		"jetstream consumer config differs from what courier needs; updating it in place",
	} {
		recs := logs.records(msg)
		if len(recs) != 1 || recs[0]["level"] != "WARN" {
			t.Errorf("want one warning %q, got %v", msg, recs)
		}
	}
	// A second start finds nothing to change.
	bus2 := mustNew(t, cfg)
	stop2 := runBus(t, bus2, (*Bus).RunRelay)
	waitReady(t, bus2)
	stop2()
	if n := len(logs.records("jetstream stream config differs from what courier needs; updating it in place")); n != 1 {
		t.Errorf("second start updated the stream again (%d warnings)", n)
	}
}

// When the server refuses the update, the worker logs the manual command
// and keeps starting.
func TestReconcileRefusedLogsCommand(t *testing.T) {
	t.Parallel()
	testReconcileRefusedLogsCommand(t, newBroker)
}

func testReconcileRefusedLogsCommand(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	db := newDB(t)
	_, js := br.js(t)
	ctx := context.Background()
	// A max age of 30 minutes makes a 1 h duplicate window invalid.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: DefaultStream, Subjects: []string{"courier.events.>"}, MaxAge: 30 * time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	bus := mustNew(t, fastConfig(br.url(), db, nil, logs))
	stop := runBus(t, bus, (*Bus).RunRelay)
	waitReady(t, bus)
	stop()
	recs := logs.records("jetstream stream update refused; edit it by hand")
	if len(recs) != 1 {
		t.Fatalf("want one refusal warning, got %v", recs)
	}
	if cmd, _ := recs[0]["command"].(string); cmd != "nats stream edit COURIER_EVENTS --dupe-window 1h0m0s" {
		t.Errorf("command = %q", cmd)
	}
}

// An existing push consumer cannot be used: the bus reports it through Ready
// and keeps retrying instead of exiting.
func TestReconcilePushConsumerNotReady(t *testing.T) {
	t.Parallel()
	testReconcilePushConsumerNotReady(t, newBroker)
}

func testReconcilePushConsumerNotReady(t *testing.T, newBroker brokerFunc) {
	br := newBroker(t)
	db := newDB(t)
	_, js := br.js(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: DefaultStream, Subjects: []string{"courier.events.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreatePushConsumer(ctx, DefaultStream, jetstream.ConsumerConfig{
		Durable: DefaultConsumer, DeliverSubject: "somewhere", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	bus := mustNew(t, fastConfig(br.url(), db, nil, nil))
	runBus(t, bus, (*Bus).RunRelay)
	waitFor(t, 10*time.Second, "push consumer reported", func() bool {
		err := bus.Ready()
		return err != nil && strings.Contains(err.Error(), "push consumer")
	})
}

// An unreachable NATS_URL at startup is retried and reported through Ready,
// not a crash; once the server comes up the bus gets ready by itself.
func TestUnreachableAtStartupThenReady(t *testing.T) {
	t.Parallel()
	// The bus dials a gate the test holds: it hangs up until the server
	// runs, then carries the connections to it.
	g := testnet.NewGate(t)
	db := newDB(t)
	br := &broker{t: t, dir: t.TempDir(), port: -1}
	t.Cleanup(br.stop)
	logs := &logBuffer{}
	bus := mustNew(t, fastConfig("nats://"+g.Addr(), db, nil, logs))
	if err := bus.Ready(); err == nil {
		t.Fatal("ready before Run")
	}
	runBus(t, bus, (*Bus).RunRelay)
	waitFor(t, 10*time.Second, "the unreachable server logged", func() bool {
		return len(logs.records("nats unreachable; still trying")) > 0
	})
	if err := bus.Ready(); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Ready without a server = %v, want ErrNotReady", err)
	}
	br.start()
	g.Open(br.addr())
	waitReady(t, bus)
	enqueue(t, db, testEvents(2, "t")...)
	waitFor(t, 10*time.Second, "rows relayed", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == 2
	})
}
