package admin_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/courier-ap/courier/admin"
)

// The throughput endpoint counts the last hour's delivery attempts minute
// by minute, every minute present, attempts outside the window left out;
// without a delivery record it answers 409.
func TestThroughputLastHour(t *testing.T) {
	t.Parallel()
	b := setup(t, func(b *bundle, c *admin.Config) { c.Rates = admin.NewDeliveryRates(b.db.Read) })
	now := b.clock.Now()
	attempt := func(at time.Time, outcome string, n int) {
		for range n {
			if _, err := b.db.Write.ExecContext(b.ctx, `INSERT INTO delivery_attempts
				(event_id, activity_id, inbox, host, attempted_at, status_code, outcome) VALUES
				('e', 'https://courier.example/activities/a', 'https://h.example/inbox', 'h.example', ?, 202, ?)`,
				at.UnixMilli(), outcome); err != nil {
				t.Fatal(err)
			}
		}
	}
	attempt(now.Add(-2*time.Minute), "delivered", 3)
	attempt(now.Add(-2*time.Minute), "retry", 1)
	attempt(now.Add(-30*time.Minute), "permanent", 2)
	attempt(now.Add(-2*time.Hour), "delivered", 5) // outside the window
	var tp admin.Throughput
	b.call("GET", "/admin/throughput", http.StatusOK, &tp)
	if tp.StepSeconds != 60 || len(tp.Buckets) != 60 {
		t.Fatalf("step %d, %d buckets, want 60 s and 60", tp.StepSeconds, len(tp.Buckets))
	}
	var delivered, failed int64
	for i, bk := range tp.Buckets {
		delivered += bk.Delivered
		failed += bk.Failed
		if i > 0 && bk.Start.Sub(tp.Buckets[i-1].Start) != time.Minute {
			t.Fatalf("bucket %d starts %s after the one before", i, bk.Start.Sub(tp.Buckets[i-1].Start))
		}
	}
	if delivered != 3 || failed != 3 {
		t.Errorf("window counts delivered %d, failed %d, want 3 and 3", delivered, failed)
	}
	two := now.Add(-2 * time.Minute).Truncate(time.Minute)
	for _, bk := range tp.Buckets {
		if bk.Start.Equal(two) && (bk.Delivered != 3 || bk.Failed != 1) {
			t.Errorf("bucket of %s: %+v", two, bk)
		}
	}
	b.wantError("GET", "/admin/throughput?window=2h", "", http.StatusBadRequest, "unknown parameter")

	off := setup(t)
	off.wantError("GET", "/admin/throughput", "", http.StatusConflict, "not available")
}

// Stats says how long the pending row due the longest has waited.
func TestStatsOldestDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var s admin.Stats
	b.call("GET", "/admin/stats", http.StatusOK, &s)
	if s.OldestDueSeconds != 0 {
		t.Fatalf("empty outbox: oldest due %d", s.OldestDueSeconds)
	}
	from := time.Now()
	b.enqueue(events(1, "x", "")...) // due at the real time, an hour before the test clock
	to := time.Now()
	b.call("GET", "/admin/stats", http.StatusOK, &s)
	// The test clock is fixed; the row is due when it was enqueued, however
	// long the steps before took on a loaded machine.
	lo, hi := int64(b.clock.Now().Sub(to)/time.Second)-1, int64(b.clock.Now().Sub(from)/time.Second)+1
	if s.OldestDueSeconds < lo || s.OldestDueSeconds > hi || lo < 3500 {
		t.Errorf("oldest due %d s, want %d to %d (about an hour)", s.OldestDueSeconds, lo, hi)
	}
}
