package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// BenchmarkEnqueue measures transactional enqueue (one data row and its
// event per transaction, through sqldb.DB.Tx, synchronous=FULL) against the
// raw commit rate of the same transaction without the event, measured in the
// same run in alternating chunks so both see the same machine. It reports
// both rates and their ratio (goal >= 0.5).
func BenchmarkEnqueue(b *testing.B) {
	db := openDB(b, storetest.Location(b), "FULL")
	ctx := context.Background()
	if _, err := db.Write.Exec(benchDataTable(db)); err != nil {
		b.Fatal(err)
	}
	const body = `{"type":"Note","content":"hello fediverse"}`
	raw := func() error {
		return db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO bench_data (body) VALUES (?)`, body)
			return err
		})
	}
	withEvent := func() error {
		return db.Tx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO bench_data (body) VALUES (?)`, body); err != nil {
				return err
			}
			return outbox.Enqueue(ctx, tx, outbox.Event{Type: "note.created", Payload: []byte(body)})
		})
	}
	const chunk = 50
	var rawTime, evTime time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += chunk {
		n := min(chunk, b.N-done)
		for _, phase := range []struct {
			fn  func() error
			acc *time.Duration
		}{{raw, &rawTime}, {withEvent, &evTime}} {
			start := time.Now()
			for range n {
				if err := phase.fn(); err != nil {
					b.Fatal(err)
				}
			}
			*phase.acc += time.Since(start)
		}
	}
	b.StopTimer()
	rawRate := float64(b.N) / rawTime.Seconds()
	evRate := float64(b.N) / evTime.Seconds()
	b.ReportMetric(rawRate, "raw_tx/s")
	b.ReportMetric(evRate, "enqueue_tx/s")
	b.ReportMetric(evRate/rawRate, "ratio")
}

// BenchmarkWorkerThroughput measures the db bus end to end with a no-op
// handler on a synchronous=FULL database: b.N events are enqueued up front,
// then the worker claims, runs and settles them all. Goal >= 5,000 events/s.
func BenchmarkWorkerThroughput(b *testing.B) {
	for _, bs := range []int{outbox.DefaultBatchSize, 500} {
		b.Run(fmt.Sprintf("batch=%d", bs), func(b *testing.B) {
			db := openDB(b, storetest.Location(b), "FULL")
			ctx := context.Background()
			for left := b.N; left > 0; left -= 1000 {
				evs := make([]outbox.Event, min(left, 1000))
				for i := range evs {
					evs[i] = outbox.Event{Type: "note.created", Payload: []byte(`{"n":1}`)}
				}
				if err := db.Tx(ctx, func(tx *sql.Tx) error { return outbox.Enqueue(ctx, tx, evs...) }); err != nil {
					b.Fatal(err)
				}
			}
			reg := outbox.NewRegistry()
			reg.Handle("note.created", "noop", func(context.Context, outbox.Event) error { return nil })
			var settledN atomic.Int64
			all := make(chan struct{})
			w, err := outbox.NewWorker(outbox.WorkerConfig{
				DB: db.Write, Read: db.Read, Registry: reg, BatchSize: bs,
				Observer: &outbox.Observer{Settled: func(string, outbox.Outcome) {
					if settledN.Add(1) == int64(b.N) {
						close(all)
					}
				}},
			})
			if err != nil {
				b.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			b.ResetTimer()
			start := time.Now()
			go func() { done <- w.Run(wctx) }()
			select {
			case <-all:
			case <-time.After(5 * time.Minute):
				b.Fatalf("only %d of %d events settled in 5 minutes", settledN.Load(), b.N)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			var notDone int
			if err := db.Read.QueryRow(`SELECT COUNT(*) FROM event_queue WHERE status != 'done'`).Scan(&notDone); err != nil || notDone != 0 {
				b.Fatalf("%d rows not done (%v)", notDone, err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkRunnerRun measures Runner.Run (the JetStream consumer's path: a
// ledger claim and a ledger settle per event) from 64 concurrent callers on a
// synchronous=FULL database, whose claims and settles share transactions.
func BenchmarkRunnerRun(b *testing.B) {
	db := openDB(b, storetest.Location(b), "FULL")
	reg := outbox.NewRegistry()
	reg.Handle("note.created", "noop", func(context.Context, outbox.Event) error { return nil })
	r, err := outbox.NewRunner(outbox.RunnerConfig{DB: db.Write, Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	b.SetParallelism(32) // 64 callers on 2 cores: like a consumer with many messages in flight
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := outbox.ChildID("3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f", fmt.Sprint(seq.Add(1)))
			if res := r.Run(context.Background(), outbox.Event{ID: id, Type: "note.created"}, 1); res.Outcome != outbox.Succeeded {
				b.Errorf("outcome %s", res.Outcome)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// benchDataTable creates the data table of the enqueue benchmarks, with an
// id the store assigns.
func benchDataTable(db *sqldb.DB) string {
	if db.Postgres() {
		return `CREATE TABLE bench_data (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, body TEXT NOT NULL)`
	}
	return `CREATE TABLE bench_data (id INTEGER PRIMARY KEY, body TEXT NOT NULL)`
}
