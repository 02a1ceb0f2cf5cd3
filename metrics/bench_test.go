package metrics_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// nsPerOp times n calls of fn, the machine's own reference in the same run.
func nsPerOp(n int, fn func()) float64 {
	start := time.Now()
	for range n {
		fn()
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

// BenchmarkOutboxHandled is the hot path every handler run takes. x_raw
// compares it with the bare client_golang calls it wraps (a counter and a
// histogram looked up by label values), so the cost of the label guards
// shows as a ratio.
func BenchmarkOutboxHandled(b *testing.B) {
	m, err := metrics.NewWithConfig(prometheus.NewRegistry(), metrics.Config{NoRuntimeCollectors: true})
	if err != nil {
		b.Fatal(err)
	}
	counter := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c"}, []string{"handler", "outcome"})
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h"}, []string{"handler"})
	raw := nsPerOp(200_000, func() {
		counter.WithLabelValues("delivery.post", "success").Inc()
		hist.WithLabelValues("delivery.post").Observe(0.02)
	})
	o := m.Outbox()
	b.ReportAllocs()
	for b.Loop() {
		o.Handled("note.create", "delivery.post", metrics.OutcomeSuccess, 20*time.Millisecond)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/raw, "x_raw")
}

// BenchmarkScrapeQueue scrapes the queue gauges of a real outbox (the store under test) of
// 50,000 rows (20 types by 4 statuses). x_queries compares a scrape with
// running the same two queries directly, so it is the collector's overhead.
func BenchmarkScrapeQueue(b *testing.B) {
	ctx := context.Background()
	db := storetest.Open(b, storetest.Location(b), storetest.Options{Synchronous: "NORMAL"})
	const rows = 50_000
	now := time.Now()
	statuses := []string{"pending", "processing", "done", "dead_lettered"}
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO event_queue
			(event_id, type, payload, status, attempts, next_attempt_at, occurred_at, created_at, updated_at)
			VALUES (?, ?, '{}', ?, 0, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i := range rows {
			t := now.Add(time.Duration(i%600-300) * time.Second).UnixMilli()
			if _, err := stmt.ExecContext(ctx, uuid.NewString(), fmt.Sprintf("type.%d", i%20),
				statuses[i%len(statuses)], t, t, t, t); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	qs := sqlQueueStats{db.Read}
	direct := nsPerOp(20, func() {
		if err := qs.CountRows(ctx, func(string, string, int64) {}); err != nil {
			b.Fatal(err)
		}
		if _, _, err := qs.OldestPendingDue(ctx, now); err != nil {
			b.Fatal(err)
		}
	})
	reg := prometheus.NewRegistry()
	m, err := metrics.NewWithConfig(reg, metrics.Config{NoRuntimeCollectors: true})
	if err != nil {
		b.Fatal(err)
	}
	m.WatchQueue(qs)
	for b.Loop() {
		mfs, err := reg.Gather()
		if err != nil || len(mfs) == 0 {
			b.Fatalf("gather: %d families, %v", len(mfs), err)
		}
	}
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(per/direct, "x_queries")
	b.ReportMetric(per/1e6, "ms/scrape")
}
