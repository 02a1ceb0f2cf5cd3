package delivery

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// TestProcessesShareHostConcurrency runs the announcements of two
// delivering processes on one store: alone, a process allows a healthy
// host PerHostConcurrency POSTs; beside another, half; beside three
// others, one each, never less. A process that stops deletes its row and
// the other's share grows back; the row of a process that died counts for
// processLive and is forgotten after processForget.
func TestProcessesShareHostConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	loc := storetest.Location(t)
	now := time.Now()
	newProc := func() *Service {
		db := storetest.Open(t, loc, storetest.Options{Synchronous: "NORMAL"})
		s := &Service{cfg: Config{Now: func() time.Time { return now }}.withDefaults(), db: db,
			log: slog.New(slog.DiscardHandler), peers: newPeers()}
		s.peers.every = 10 * time.Millisecond
		return s
	}
	waitLimit := func(s *Service, want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for s.hostLimit() != want {
			if time.Now().After(deadline) {
				t.Fatalf("host limit %d (%d processes counted), want %d", s.hostLimit(), s.peers.live.Load(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	announce := func(s *Service) (stop func()) {
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := s.Announce(actx); err != nil {
				t.Errorf("announce: %v", err)
			}
		}()
		return func() { cancel(); <-done }
	}
	a, b := newProc(), newProc()
	if got := a.hostLimit(); got != DefaultPerHostConcurrency {
		t.Fatalf("before announcing: host limit %d, want %d", got, DefaultPerHostConcurrency)
	}
	stopA := announce(a)
	defer stopA()
	waitLimit(a, DefaultPerHostConcurrency)
	stopB := announce(b)
	waitLimit(a, DefaultPerHostConcurrency/2)
	waitLimit(b, DefaultPerHostConcurrency/2)

	// Two processes that died without deleting their rows, seen a moment
	// ago, count as well: four processes, one POST each.
	dead := func(id string, seen time.Time) {
		t.Helper()
		if _, err := a.db.Write.ExecContext(ctx, `INSERT INTO delivery_processes (id, hostname, pid, started_at, seen_at)
			VALUES (?, 'gone.example', 1, ?, ?)`, id, seen.UnixMilli(), seen.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	dead("dead-1", now.Add(-processLive/2))
	dead("dead-2", now.Add(-processLive/2))
	waitLimit(a, 1)
	stopB()
	if n := count(t, a.db, `SELECT COUNT(*) FROM delivery_processes WHERE id = ?`, b.peers.id); n != 0 {
		t.Fatalf("a stopped process left %d rows", n)
	}
	if b.hostLimit() != DefaultPerHostConcurrency {
		t.Fatalf("a process no longer announcing has host limit %d, want %d", b.hostLimit(), DefaultPerHostConcurrency)
	}
	waitLimit(a, DefaultPerHostConcurrency/3)
	// Past processLive the dead rows stop counting; past processForget
	// they are deleted.
	if _, err := a.db.Write.ExecContext(ctx, `UPDATE delivery_processes SET seen_at = ? WHERE id = 'dead-1'`,
		now.Add(-processLive-time.Second).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.db.Write.ExecContext(ctx, `UPDATE delivery_processes SET seen_at = ? WHERE id = 'dead-2'`,
		now.Add(-processForget-time.Second).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	waitLimit(a, DefaultPerHostConcurrency)
	deadline := time.Now().Add(30 * time.Second)
	for count(t, a.db, `SELECT COUNT(*) FROM delivery_processes WHERE id = 'dead-2'`) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the row of a process gone longer than processForget was not deleted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := count(t, a.db, `SELECT COUNT(*) FROM delivery_processes WHERE id = 'dead-1'`); n != 1 {
		t.Fatalf("the row of a process gone less than processForget: %d rows, want it kept", n)
	}
}

func count(t *testing.T, db *sqldb.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Read.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
