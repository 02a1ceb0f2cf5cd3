package natsbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
)

// failingLoads is the real outbox queue whose first Loads fail, as a read
// pool that is briefly unavailable would.
type failingLoads struct {
	*outbox.Queue
	fail atomic.Int64 // Loads still to fail
}

func (q *failingLoads) Load(ctx context.Context, c outbox.Claimed) ([]outbox.Row, error) {
	if q.fail.Add(-1) >= 0 {
		return nil, errors.New("read pool unavailable")
	}
	return q.Queue.Load(ctx, c)
}

// The relay claims rows by id and reads them on its publishing goroutine.
// Rows it claimed but could not read go back, due at once, without an
// attempt spent, and are published once the reads work again; payloads
// stored beside their rows reach the stream whole.
func TestRelayPutsBackRowsItCouldNotRead(t *testing.T) {
	t.Parallel()
	br := newBroker(t)
	db := newDB(t)
	_, js := br.js(t)
	logs := &logBuffer{}
	cfg := fastConfig(br.url(), db, nil, logs)
	q := &failingLoads{Queue: outbox.NewQueue(db.Write, outbox.QueueOptions{Read: db.Read})}
	q.fail.Store(3)
	cfg.Queue = q
	cfg.BatchSize = 4
	bus := mustNew(t, cfg)
	stop := runBus(t, bus, (*Bus).RunRelay)
	waitReady(t, bus)

	evs := make([]outbox.Event, 10)
	for i := range evs {
		evs[i] = outbox.Event{Type: "activity.outgoing", Payload: json.RawMessage(
			fmt.Sprintf(`{"n":%d,"content":%q}`, i, strings.Repeat("x", 2*outbox.InlinePayload)))}
	}
	evs = enqueue(t, db, evs...)
	waitFor(t, 10*time.Second, "rows done", func() bool {
		return count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == len(evs)
	})
	stop()
	if left := q.fail.Load(); left >= 0 {
		t.Fatalf("the relay stopped loading with %d failing loads to go", left+1)
	}
	if n := len(logs.records("relay could not read the rows it claimed; putting them back")); n != 3 {
		t.Errorf("%d warnings for failed reads, want 3", n)
	}
	if n := count(t, db.Write, `SELECT COUNT(*) FROM event_queue WHERE attempts > 0 OR last_error IS NOT NULL`); n != 0 {
		t.Errorf("%d rows spent an attempt on a failed read", n)
	}
	if n := streamMsgs(t, js, DefaultStream); n != uint64(len(evs)) {
		t.Fatalf("stream holds %d messages, want %d", n, len(evs))
	}
	s, err := js.Stream(context.Background(), DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]string{}
	for _, ev := range evs {
		byID[ev.ID] = string(ev.Payload)
	}
	for seq := uint64(1); seq <= uint64(len(evs)); seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if want := byID[m.Header.Get(HeaderEventID)]; string(m.Data) != want {
			t.Fatalf("message %d carries %.40s..., want %.40s...", seq, m.Data, want)
		}
	}
}
