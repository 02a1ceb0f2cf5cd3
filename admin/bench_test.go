package admin_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// benchRows is the size of the outbox the read benchmarks query: a large
// backlog for one server.
const benchRows = 20_000

// fillOutbox enqueues benchRows pending events over two types and twenty
// hosts, in transactions of 1000.
func fillOutbox(b *bundle) {
	for i := 0; i < benchRows; i += 1000 {
		evs := make([]outbox.Event, 1000)
		for j := range evs {
			n := i + j
			evs[j] = outbox.Event{Type: []string{"delivery.post", "activity.outgoing"}[n%2],
				Target: fmt.Sprintf("h%d.example", n%20), Payload: json.RawMessage(`{"inbox":"https://h.example/inbox"}`)}
		}
		b.enqueue(evs...)
	}
}

// deadLetter claims every due row of typ and dead-letters it, as the real
// outbox does after the last failed attempt.
func deadLetter(b *bundle, typ string) int {
	b.t.Helper()
	rows, err := b.queue.Claim(b.ctx, 1000, time.Hour)
	if err != nil {
		b.t.Fatal(err)
	}
	var ss []outbox.Settlement
	for _, r := range rows {
		res := outbox.Result{Outcome: outbox.Released}
		if r.Event.Type == typ {
			res = outbox.Result{Outcome: outbox.Dead, Err: errors.New("status 500")}
		}
		ss = append(ss, outbox.Settlement{Row: r, Result: res})
	}
	if _, err := b.queue.Settle(b.ctx, ss...); err != nil {
		b.t.Fatal(err)
	}
	n := 0
	for _, s := range ss {
		if s.Result.Outcome == outbox.Dead {
			n++
		}
	}
	return n
}

// BenchmarkRead measures the read endpoints over HTTP against an outbox of
// benchRows rows.
func BenchmarkRead(bm *testing.B) {
	b := setup(bm)
	fillOutbox(b)
	// Fifty rows claimed by a worker that died.
	if _, err := b.queue.Claim(b.ctx, 50, time.Minute); err != nil {
		bm.Fatal(err)
	}
	b.clock.Advance(outbox.DefaultLease + time.Second)
	var first admin.EventList
	b.call("GET", "/admin/events?limit=1", http.StatusOK, &first)
	some := first.Events[0].EventID
	for _, c := range []struct{ name, path string }{
		{"events_page", "/admin/events?status=pending&limit=100"},
		{"events_page_deep", "/admin/events?status=pending&limit=100&cursor=" + fmt.Sprint(benchRows/2)},
		{"events_type_host", "/admin/events?type=delivery.post&host=h4.example&limit=100"},
		{"events_stuck", "/admin/events?status=stuck"},
		{"events_older_than", "/admin/events?older_than=1h&limit=100"},
		{"event_detail", "/admin/events/" + some},
		{"stats", "/admin/stats"},
	} {
		bm.Run(c.name, func(bm *testing.B) {
			for bm.Loop() {
				b.call("GET", c.path, http.StatusOK, nil)
			}
		})
	}
}

// BenchmarkBulkRetry measures retrying dead-lettered events through the
// API (one write transaction per event), against the machine's own rate of
// single-row update commits measured in the same run on the same settings.
func BenchmarkBulkRetry(bm *testing.B) {
	b := setup(bm)
	const batch = 500
	b.enqueue(events(batch, "r", "x.example")...)
	commits := commitRate(bm)
	var retried int64
	for bm.Loop() {
		bm.StopTimer()
		if n := deadLetter(b, "r"); n != batch {
			bm.Fatalf("dead-lettered %d, want %d", n, batch)
		}
		bm.StartTimer()
		var res admin.RetryResult
		b.call("POST", fmt.Sprintf("/admin/events/retry?type=r&limit=%d", batch), http.StatusOK, &res)
		if res.Retried != batch {
			bm.Fatalf("retried %d, want %d", res.Retried, batch)
		}
		retried += res.Retried
	}
	rate := float64(retried) / bm.Elapsed().Seconds()
	bm.ReportMetric(rate, "retries/s")
	bm.ReportMetric(commits, "commits/s")
	bm.ReportMetric(rate/commits, "ratio")
}

// commitRate measures single-row UPDATE transactions per second on a
// scratch database of the store under test, opened like courier's.
func commitRate(tb testing.TB) float64 {
	tb.Helper()
	ctx := context.Background()
	db := storetest.Open(tb, storetest.Location(tb), storetest.Options{Synchronous: "NORMAL"})
	if _, err := db.Write.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)`); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Write.ExecContext(ctx, `INSERT INTO t (id, v) VALUES (1, 0)`); err != nil {
		tb.Fatal(err)
	}
	const n = 2000
	start := time.Now()
	for i := range n {
		if err := db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE t SET v = ? WHERE id = 1`, i)
			return err
		}); err != nil {
			tb.Fatal(err)
		}
	}
	return n / time.Since(start).Seconds()
}
