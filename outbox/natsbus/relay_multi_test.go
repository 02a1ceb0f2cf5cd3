package natsbus

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// claimLog is the outbox queue of one relay, recording the ids each of its
// settle-and-claim transactions claimed.
type claimLog struct {
	*outbox.Queue
	mu  *sync.Mutex
	ids map[int64]int // row id -> claims of it, shared by both relays
	own *int          // rows this relay claimed
}

func (q claimLog) SettleAndClaimIDs(ctx context.Context, limit int, lease time.Duration, settlements ...outbox.Settlement) (outbox.Claimed, int, error) {
	c, n, err := q.Queue.SettleAndClaimIDs(ctx, limit, lease, settlements...)
	if err == nil {
		q.mu.Lock()
		for _, id := range c.IDs {
			q.ids[id]++
		}
		*q.own += len(c.IDs)
		q.mu.Unlock()
	}
	return c, n, err
}

// Two relays on two handles of one store (as two processes), each settling
// and claiming in one transaction, relay events enqueued under them: every
// row is claimed by exactly one of them, once (the lease is far longer than
// the test), every row ends done without a spent attempt, and the stream
// holds each event once.
func TestTwoRelaysClaimDisjointRows(t *testing.T) {
	t.Parallel()
	br := newBroker(t)
	loc := storetest.Location(t)
	producer := openDB(t, loc)
	var (
		mu   sync.Mutex
		ids  = map[int64]int{}
		owns [2]int
	)
	var buses []*Bus
	for i := range 2 {
		db := openDB(t, loc)
		cfg := fastConfig(br.url(), db, nil, nil)
		cfg.BatchSize = 16
		cfg.Queue = claimLog{Queue: outbox.NewQueue(db.Write, outbox.QueueOptions{Read: db.Read}),
			mu: &mu, ids: ids, own: &owns[i]}
		bus := mustNew(t, cfg)
		runBus(t, bus, (*Bus).RunRelay)
		buses = append(buses, bus)
	}
	for _, b := range buses {
		waitReady(t, b)
	}
	const n = 800
	evs := testEvents(n, "delivery.post")
	for i := 0; i < n; i += 40 {
		enqueue(t, producer, evs[i:i+40]...)
	}
	waitFor(t, 60*time.Second, "every row done", func() bool {
		return count(t, producer.Read, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`) == n
	})
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != n {
		t.Fatalf("%d rows claimed, want %d", len(ids), n)
	}
	for id, k := range ids {
		if k != 1 {
			t.Fatalf("row %d claimed %d times, want once", id, k)
		}
	}
	// On PostgreSQL the relays' transactions run side by side, and the test
	// is about them: both must have claimed. On SQLite one relay's
	// transactions may keep the write lock to themselves for the whole run
	// (the other waits in its busy handler), which is no fault.
	if (owns[0] == 0 || owns[1] == 0) && storetest.Dialect() == sqldb.Postgres {
		t.Fatalf("claims: %d and %d rows; one relay claimed nothing, the test proves nothing", owns[0], owns[1])
	}
	if c := count(t, producer.Read, `SELECT COUNT(*) FROM event_queue WHERE attempts > 0`); c != 0 {
		t.Fatalf("%d rows spent attempts", c)
	}
	_, js := br.js(t)
	if m := streamMsgs(t, js, DefaultStream); m != n {
		t.Fatalf("stream holds %d messages, want %d", m, n)
	}
	t.Logf("claims: %d and %d rows", owns[0], owns[1])
}
