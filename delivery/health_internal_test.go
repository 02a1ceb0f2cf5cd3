package delivery

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqldb/storetest"
)

// monoClock is a monotonic clock for Health.mono that moves only when told.
type monoClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *monoClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *monoClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestHealthyCopyStandsUntilBadNews shows when this process's copy of a
// healthy host's row stands for the row: while no host has had bad news
// (a change to failing, unavailable or paused, written here by hand as
// another process or an operator would, so only the migration's triggers
// count it), however long ago the row was read; bad news is seen by the
// first delivery admitted healthFresh after this process last read the
// count, and not before; a failing or paused host is read every time, so
// its recovery by another process is seen at once.
func TestHealthyCopyStandsUntilBadNews(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	now := time.Now()
	s := &Service{cfg: Config{Now: func() time.Time { return now }}.withDefaults(), db: db,
		log: slog.New(slog.DiscardHandler)}
	h := newHealth(s)
	clock := &monoClock{t: time.Unix(1000, 0)}
	h.mono = clock.now
	const host = "fresh.example"
	other := func(state string, failures int) {
		t.Helper()
		if _, err := db.Write.ExecContext(ctx, `INSERT INTO delivery_hosts (host, state, consecutive_failures, updated_at)
			VALUES (?, ?, ?, ?) ON CONFLICT (host) DO UPDATE SET state = excluded.state,
			consecutive_failures = excluded.consecutive_failures`, host, state, failures, now.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	load := func() hostState {
		t.Helper()
		e, err := h.load(ctx, host)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if e := load(); e.down() {
		t.Fatalf("a host without a row: %+v, want healthy", e.HostStatus)
	}
	other(HostFailing, 3)
	clock.add(healthFresh - time.Millisecond)
	if e := load(); e.down() {
		t.Fatalf("within healthFresh of the last read: %s, want the healthy copy", e.State)
	}
	clock.add(time.Millisecond)
	if e := load(); e.State != HostFailing || e.ConsecutiveFailures != 3 {
		t.Fatalf("healthFresh after the last read: %s with %d failures, want failing with 3", e.State, e.ConsecutiveFailures)
	}
	other(HostHealthy, 0)
	if e := load(); e.down() {
		t.Fatalf("a failing copy is read again at once: got %s, want the healthy row", e.State)
	}
	// A paused host's copy is never taken for the row either.
	if _, err := db.Write.ExecContext(ctx, `UPDATE delivery_hosts SET paused_at = ? WHERE host = ?`, now.UnixMilli(), host); err != nil {
		t.Fatal(err)
	}
	clock.add(healthFresh)
	if e := load(); !e.Paused {
		t.Fatal("the pause was not read")
	}
	if _, err := db.Write.ExecContext(ctx, `UPDATE delivery_hosts SET paused_at = NULL WHERE host = ?`, host); err != nil {
		t.Fatal(err)
	}
	if e := load(); e.Paused {
		t.Fatal("a paused copy stood for the row: the resume was not read")
	}

	// Good news written elsewhere (a success, which counts nothing) is not
	// read while the count stands, however long ago the row was read.
	success := func(at int64) {
		t.Helper()
		if _, err := db.Write.ExecContext(ctx, `UPDATE delivery_hosts SET last_success_at = ? WHERE host = ?`, at, host); err != nil {
			t.Fatal(err)
		}
	}
	success(1000)
	clock.add(100 * healthFresh)
	if e := load(); !e.LastSuccessAt.IsZero() {
		t.Fatalf("the healthy copy was read again without bad news: last success %v", e.LastSuccessAt)
	}
	// Bad news of another host makes every healthy copy stale, from the
	// next read of the count on.
	if _, err := db.Write.ExecContext(ctx, `INSERT INTO delivery_hosts (host, state, consecutive_failures, updated_at)
		VALUES ('other.example', 'failing', 1, ?)`, now.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if e := load(); !e.LastSuccessAt.IsZero() {
		t.Fatal("the copy was read again before the count was")
	}
	clock.add(healthFresh)
	if e := load(); e.LastSuccessAt.UnixMilli() != 1000 {
		t.Fatalf("after bad news of another host: last success %v, want the row's", e.LastSuccessAt)
	}
	success(2000)
	clock.add(100 * healthFresh)
	if e := load(); e.LastSuccessAt.UnixMilli() != 1000 {
		t.Fatalf("the copy read after the bad news did not stand: last success %v", e.LastSuccessAt)
	}
}
