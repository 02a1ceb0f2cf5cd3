package metrics_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// The stats tests run once per store: a SQLite file, or with
// COURIER_TEST_STORE=postgres a PostgreSQL database (storetest).
func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

// sqlQueueStats reads the outbox gauges from a real, migrated event_queue
// with the queries an outbox store runs; it is the reference shape of a
// QueueStats implementation.
type sqlQueueStats struct{ db *sql.DB }

func (s sqlQueueStats) CountRows(ctx context.Context, fn func(status, eventType string, rows int64)) error {
	rows, err := s.db.QueryContext(ctx, `SELECT status, type, COUNT(*) FROM event_queue GROUP BY status, type`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var status, typ string
		var n int64
		if err := rows.Scan(&status, &typ, &n); err != nil {
			return err
		}
		fn(status, typ, n)
	}
	return rows.Err()
}

func (s sqlQueueStats) OldestPendingDue(ctx context.Context, now time.Time) (time.Time, bool, error) {
	var due sql.NullInt64
	err := s.db.QueryRowContext(ctx,
		`SELECT MIN(next_attempt_at) FROM event_queue WHERE status = 'pending' AND next_attempt_at <= ?`,
		now.UnixMilli()).Scan(&due)
	if err != nil || !due.Valid {
		return time.Time{}, false, err
	}
	return time.UnixMilli(due.Int64), true, nil
}

type statsBundle struct {
	db  *sqldb.DB
	m   *metrics.Metrics
	reg *prometheus.Registry
	now time.Time
}

func setupStats(t *testing.T) *statsBundle {
	t.Helper()
	db := storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
	b := &statsBundle{db: db, reg: prometheus.NewPedanticRegistry(), now: time.UnixMilli(1_800_000_000_000)}
	var err error
	b.m, err = metrics.NewWithConfig(b.reg, metrics.Config{
		NoRuntimeCollectors: true,
		Now:                 func() time.Time { return b.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// insert writes an outbox row the way the outbox does, with times relative
// to the bundle's clock.
func (b *statsBundle) insert(t *testing.T, eventID, typ, status string, dueIn time.Duration) {
	t.Helper()
	now := b.now.UnixMilli()
	err := b.db.Tx(t.Context(), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(t.Context(), `INSERT INTO event_queue
			(event_id, type, payload, status, attempts, next_attempt_at, occurred_at, created_at, updated_at)
			VALUES (?, ?, '{}', ?, 0, ?, ?, ?, ?)`,
			eventID, typ, status, b.now.Add(dueIn).UnixMilli(), now, now, now)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestQueueStatsFromTheDatabase(t *testing.T) {
	t.Parallel()
	b := setupStats(t)

	// Before a source is attached the gauges are absent, not zero.
	if n := testutil.CollectAndCount(b.reg, "courier_outbox_rows", "courier_stats_up"); n != 0 {
		t.Fatalf("series before WatchQueue = %d, want 0", n)
	}
	b.m.WatchQueue(sqlQueueStats{b.db.Read})

	b.insert(t, "00000000-0000-4000-8000-000000000001", "delivery.post", "pending", -90*time.Second)
	b.insert(t, "00000000-0000-4000-8000-000000000002", "delivery.post", "pending", -30*time.Second)
	b.insert(t, "00000000-0000-4000-8000-000000000003", "delivery.post", "pending", time.Hour) // not due yet
	b.insert(t, "00000000-0000-4000-8000-000000000004", "delivery.post", "dead_lettered", -time.Hour)
	b.insert(t, "00000000-0000-4000-8000-000000000005", "inbox.import", "done", -time.Hour)
	b.insert(t, "00000000-0000-4000-8000-000000000006", "inbox.import", "processing", -time.Minute)

	want := `
# HELP courier_outbox_oldest_due_pending_age_seconds How long the pending row that has been due the longest has waited since it became due (0 when none is due), read at scrape time.
# TYPE courier_outbox_oldest_due_pending_age_seconds gauge
courier_outbox_oldest_due_pending_age_seconds 90
# HELP courier_outbox_rows Outbox rows by status (pending, processing, done, dead_lettered) and event type, read at scrape time.
# TYPE courier_outbox_rows gauge
courier_outbox_rows{status="dead_lettered",type="delivery.post"} 1
courier_outbox_rows{status="done",type="inbox.import"} 1
courier_outbox_rows{status="pending",type="delivery.post"} 3
courier_outbox_rows{status="processing",type="inbox.import"} 1
# HELP courier_stats_up 1 when the latest scrape-time query of source (queue, hosts) succeeded, 0 when it failed or timed out.
# TYPE courier_stats_up gauge
courier_stats_up{source="queue"} 1
`
	if err := testutil.GatherAndCompare(b.reg, strings.NewReader(want),
		"courier_outbox_rows", "courier_outbox_oldest_due_pending_age_seconds", "courier_stats_up"); err != nil {
		t.Fatal(err)
	}

	// Time passes; the scrape reads the clock, not a cached value.
	b.now = b.now.Add(time.Minute)
	if got := gaugeValue(t, b.reg, "courier_outbox_oldest_due_pending_age_seconds"); got != 150 {
		t.Fatalf("oldest due age after a minute = %g, want 150", got)
	}

	// No pending row due: the age is 0, not absent.
	if err := b.db.Tx(t.Context(), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(t.Context(), `UPDATE event_queue SET status = 'done' WHERE next_attempt_at <= ?`, b.now.UnixMilli())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := gaugeValue(t, b.reg, "courier_outbox_oldest_due_pending_age_seconds"); got != 0 {
		t.Fatalf("oldest due age with nothing due = %g, want 0", got)
	}
}

func TestQueueStatsClosedDatabaseReportsDown(t *testing.T) {
	t.Parallel()
	b := setupStats(t)
	b.m.WatchQueue(sqlQueueStats{b.db.Read})
	if err := b.db.Close(); err != nil {
		t.Fatal(err)
	}
	if got := gaugeValue(t, b.reg, "courier_stats_up"); got != 0 {
		t.Fatalf("courier_stats_up after close = %g, want 0", got)
	}
	if n := testutil.CollectAndCount(b.reg, "courier_outbox_rows", "courier_outbox_oldest_due_pending_age_seconds"); n != 0 {
		t.Fatalf("queue gauges reported after a failed query: %d series", n)
	}
}

// blockingStats never answers until its context ends, like a database
// locked by a long transaction.
type blockingStats struct{ calls atomic.Int32 }

func (s *blockingStats) CountRows(ctx context.Context, _ func(string, string, int64)) error {
	s.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (s *blockingStats) OldestPendingDue(ctx context.Context, _ time.Time) (time.Time, bool, error) {
	return time.Time{}, false, errors.New("unreachable")
}

func (s *blockingStats) CountHosts(ctx context.Context, _ func(string, int64)) error {
	s.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (s *blockingStats) CountParked(context.Context) (int64, error) { return 0, nil }

func TestScrapeTimeoutBoundsSlowSources(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.NewWithConfig(reg, metrics.Config{NoRuntimeCollectors: true, ScrapeTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	slow := &blockingStats{}
	m.WatchQueue(slow)
	m.WatchHosts(slow)
	start := time.Now()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Without the timeout the gather would wait for ever; the bound is
	// generous so that a loaded machine does not fail it.
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("gather took %s with a 50 ms scrape timeout", took)
	}
	if slow.calls.Load() != 2 {
		t.Fatalf("sources queried %d times, want 2", slow.calls.Load())
	}
	var ups int
	for _, mf := range mfs {
		if mf.GetName() == "courier_stats_up" {
			for _, mm := range mf.GetMetric() {
				ups++
				if mm.GetGauge().GetValue() != 0 {
					t.Errorf("courier_stats_up%v = %g, want 0", mm.GetLabel(), mm.GetGauge().GetValue())
				}
			}
		}
		if mf.GetName() == "courier_delivery_hosts" || mf.GetName() == "courier_outbox_rows" {
			t.Errorf("%s reported after a timed-out query", mf.GetName())
		}
	}
	if ups != 2 {
		t.Fatalf("courier_stats_up series = %d, want 2", ups)
	}
}

// memHosts is an in-memory host table, the shape of a delivery health
// tracker kept in memory.
type memHosts struct {
	states map[string]string
	parked int64
}

func (h memHosts) CountHosts(_ context.Context, fn func(string, int64)) error {
	counts := map[string]int64{}
	for _, s := range h.states {
		counts[s]++
	}
	for s, n := range counts {
		fn(s, n)
	}
	return nil
}

func (h memHosts) CountParked(context.Context) (int64, error) { return h.parked, nil }

func TestHostStats(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.NewWithConfig(reg, metrics.Config{NoRuntimeCollectors: true, MaxLabelValues: 2})
	if err != nil {
		t.Fatal(err)
	}
	m.WatchHosts(memHosts{
		states: map[string]string{"a.example": "healthy", "b.example": "healthy", "c.example": "unavailable",
			"d.example": "failing", "e.example": "weird"},
		parked: 7,
	})
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "courier_delivery_hosts":
			for _, mm := range mf.GetMetric() {
				got[mm.GetLabel()[0].GetValue()] = mm.GetGauge().GetValue()
			}
		case "courier_delivery_parked":
			got["parked"] = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	// Two distinct states fit under MaxLabelValues 2; the rest fold into
	// "other" and are summed, never duplicated.
	var total float64
	for k, v := range got {
		if k != "parked" {
			total += v
		}
	}
	if total != 5 || got["parked"] != 7 || got["other"] == 0 || len(got) != 4 {
		t.Fatalf("host gauges = %v, want 5 hosts over two states plus other, and 7 parked", got)
	}
}

func gaugeValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("gauge %s not gathered exactly once", name)
	return 0
}

func TestFuncAdapters(t *testing.T) {
	t.Parallel()
	b := setupStats(t)
	b.insert(t, "00000000-0000-4000-8000-000000000011", "note.create", "pending", -10*time.Second)
	b.insert(t, "00000000-0000-4000-8000-000000000012", "note.create", "pending", -5*time.Second)
	qs := sqlQueueStats{b.db.Read}
	b.m.WatchQueue(metrics.QueueFuncs{
		// The shape of a store's Stats method: status, then type.
		Rows: func(ctx context.Context) (map[string]map[string]int64, error) {
			out := map[string]map[string]int64{}
			err := qs.CountRows(ctx, func(status, typ string, n int64) {
				if out[status] == nil {
					out[status] = map[string]int64{}
				}
				out[status][typ] = n
			})
			return out, err
		},
		OldestDue: qs.OldestPendingDue,
	})
	b.m.WatchHosts(metrics.HostFuncs{Hosts: func(context.Context) (map[string]int64, error) {
		return map[string]int64{"healthy": 4}, nil
	}}) // Parked not wired: the hosts source reports down
	want := `
# HELP courier_outbox_oldest_due_pending_age_seconds How long the pending row that has been due the longest has waited since it became due (0 when none is due), read at scrape time.
# TYPE courier_outbox_oldest_due_pending_age_seconds gauge
courier_outbox_oldest_due_pending_age_seconds 10
# HELP courier_outbox_rows Outbox rows by status (pending, processing, done, dead_lettered) and event type, read at scrape time.
# TYPE courier_outbox_rows gauge
courier_outbox_rows{status="pending",type="note.create"} 2
# HELP courier_stats_up 1 when the latest scrape-time query of source (queue, hosts) succeeded, 0 when it failed or timed out.
# TYPE courier_stats_up gauge
courier_stats_up{source="hosts"} 0
courier_stats_up{source="queue"} 1
`
	if err := testutil.GatherAndCompare(b.reg, strings.NewReader(want),
		"courier_outbox_rows", "courier_outbox_oldest_due_pending_age_seconds", "courier_stats_up", "courier_delivery_hosts"); err != nil {
		t.Fatal(err)
	}
	if _, err := (metrics.HostFuncs{}).CountParked(t.Context()); !errors.Is(err, metrics.ErrNotWired) {
		t.Fatalf("unwired CountParked = %v, want ErrNotWired", err)
	}
	if _, _, err := (metrics.QueueFuncs{}).OldestPendingDue(t.Context(), time.Now()); !errors.Is(err, metrics.ErrNotWired) {
		t.Fatalf("unwired OldestPendingDue = %v, want ErrNotWired", err)
	}
}
