package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// TestRecorderBatchesOfTwoProcesses writes, from two pools on one store
// at once, batches that record the successes of the same hosts in
// opposite orders, as two worker processes delivering to the same hosts
// do: every batch is written (on PostgreSQL none is lost to a deadlock
// between the two), and every host has its row.
func TestRecorderBatchesOfTwoProcesses(t *testing.T) {
	t.Parallel()
	loc := storetest.Location(t)
	dbs := []*sqldb.DB{storetest.Open(t, loc, storetest.Options{Synchronous: "NORMAL"}),
		storetest.Open(t, loc, storetest.Options{Synchronous: "NORMAL"})}
	hosts := make([]string, 64)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%02d.example", i)
	}
	ctx := context.Background()
	for round := range 20 {
		now := time.Now().UnixMilli() + int64(round)
		var wg sync.WaitGroup
		for i, db := range dbs {
			order := slices.Clone(hosts)
			if i == 1 {
				slices.Reverse(order)
			}
			var ops []recOp
			for _, h := range order {
				ops = append(ops, recOp{hostSuccess: []any{h, now, now}},
					recOp{attempt: &attemptRow{eventID: "e", activityID: "a", inbox: "https://" + h + "/inbox", host: h,
						at: time.UnixMilli(now), status: 202, outcome: OutcomeDelivered}})
			}
			rec := newRecorder(db, slog.New(slog.DiscardHandler))
			wg.Go(func() {
				if err := rec.write(ctx, ops); err != nil {
					t.Errorf("round %d, pool %d: %v", round, i, err)
				}
			})
		}
		wg.Wait()
	}
	var n, attempts int
	if err := dbs[0].Read.QueryRow(`SELECT COUNT(*) FROM delivery_hosts WHERE last_success_at IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := dbs[0].Read.QueryRow(`SELECT COUNT(*) FROM delivery_attempts`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if n != len(hosts) || attempts != 2*20*len(hosts) {
		t.Fatalf("%d hosts with a success, %d attempts; want %d and %d", n, attempts, len(hosts), 2*20*len(hosts))
	}
}

// TestRecorderKeepsRecordsAddedAsItStops adds attempt records from several
// goroutines while the writer is told to stop: every record is written,
// by the writer before it returns or directly by add once it has stopped;
// none is left in the writer's channel.
func TestRecorderKeepsRecordsAddedAsItStops(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
	const rounds, adders, each = 10, 8, 100
	for round := range rounds {
		rec := newRecorder(db, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		ran := make(chan struct{})
		go func() { rec.run(ctx); close(ran) }()
		for !func() bool { rec.mu.RLock(); defer rec.mu.RUnlock(); return rec.running }() {
			time.Sleep(time.Millisecond)
		}
		var wg sync.WaitGroup
		for a := range adders {
			wg.Go(func() {
				for i := range each {
					if a == 0 && i == each/2 {
						cancel()
					}
					rec.add(recOp{attempt: &attemptRow{eventID: fmt.Sprintf("r%d-a%d-%d", round, a, i), activityID: "a",
						inbox: "https://h.example/inbox", host: "h.example", at: time.Now(), status: 202, outcome: OutcomeDelivered}})
				}
			})
		}
		wg.Wait()
		<-ran
		var n int
		if err := db.Read.QueryRow(`SELECT COUNT(*) FROM delivery_attempts WHERE event_id LIKE ?`, fmt.Sprintf("r%d-%%", round)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != adders*each {
			t.Fatalf("round %d: %d of %d records written", round, n, adders*each)
		}
	}
}
