package delivery

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// The processes that deliver on one database share a healthy host's
// PerHostConcurrency: each keeps a row in delivery_processes (Announce),
// counts the rows seen in the last processLive, and allows a host
// PerHostConcurrency divided by that count (at least 1), so a host gets no
// more POSTs at once from several workers than from one (or one per
// worker, when there are more workers than PerHostConcurrency).
const (
	// processBeat is how often a process writes its row and counts the
	// others.
	processBeat = 10 * time.Second
	// processLive is how long a row counts after it was last written: a
	// process that died stops counting after it.
	processLive = 30 * time.Second
	// processForget is when the row of a process that died without
	// deleting it is deleted.
	processForget = 10 * time.Minute
)

// peers is this process's place among the processes that deliver.
type peers struct {
	id    string
	every time.Duration // processBeat; shorter in tests
	live  atomic.Int64  // processes delivering as last counted, 0 when not announced
}

func newPeers() *peers { return &peers{id: uuid.NewString(), every: processBeat} }

// Announce counts this process among the processes that deliver from the
// database it uses until ctx ends, then deletes its row and returns nil. A
// process that runs the deliveries (a server with the db bus's worker, a
// worker) runs it beside Run; one that only serves does not, and is not
// counted. A failed write or count is logged and retried at the next beat;
// meanwhile the last count holds.
func (s *Service) Announce(ctx context.Context) error {
	hostname, err := os.Hostname()
	if err != nil {
		hostname = "unknown"
	}
	started := s.now().UnixMilli()
	beat := func() {
		if err := s.beat(ctx, hostname, started); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "delivery: process row not written", "err", err)
		}
	}
	beat()
	t := time.NewTicker(s.peers.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.peers.live.Store(0)
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if _, err := s.db.Write.ExecContext(dctx, `DELETE FROM delivery_processes WHERE id = ?`, s.peers.id); err != nil {
				s.log.WarnContext(dctx, "delivery: process row not deleted; it stops counting in 30 s", "err", err)
			}
			return nil
		case <-t.C:
			beat()
		}
	}
}

// beat writes this process's row, forgets the rows of processes long
// gone, and counts the live ones.
func (s *Service) beat(ctx context.Context, hostname string, started int64) error {
	now := s.now()
	if _, err := s.db.Write.ExecContext(ctx, `INSERT INTO delivery_processes (id, hostname, pid, started_at, seen_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at`,
		s.peers.id, hostname, os.Getpid(), started, now.UnixMilli()); err != nil {
		return fmt.Errorf("delivery: process row: %w", err)
	}
	if _, err := s.db.Write.ExecContext(ctx, `DELETE FROM delivery_processes WHERE seen_at < ?`,
		now.Add(-processForget).UnixMilli()); err != nil {
		return fmt.Errorf("delivery: forget processes: %w", err)
	}
	var n int64
	if err := s.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM delivery_processes WHERE seen_at >= ?`,
		now.Add(-processLive).UnixMilli()).Scan(&n); err != nil {
		return fmt.Errorf("delivery: count processes: %w", err)
	}
	s.peers.live.Store(max(n, 1))
	return nil
}

// hostLimit is how many POSTs this process may have in the air to one
// healthy host: its share of PerHostConcurrency among the processes that
// deliver.
func (s *Service) hostLimit() int {
	n := int(s.peers.live.Load())
	if n <= 1 {
		return s.cfg.PerHostConcurrency
	}
	return max(1, s.cfg.PerHostConcurrency/n)
}

// Process is one process that delivers, as its row in delivery_processes
// says.
type Process struct {
	ID        string
	Hostname  string
	PID       int
	StartedAt time.Time
	SeenAt    time.Time
}

// Processes returns the processes that deliver from this database and
// were seen in the last 30 s, the longest running first.
func (s *Service) Processes(ctx context.Context) ([]Process, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT id, hostname, pid, started_at, seen_at FROM delivery_processes
		WHERE seen_at >= ? ORDER BY started_at, id`, s.now().Add(-processLive).UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("delivery: processes: %w", err)
	}
	defer rows.Close()
	var out []Process
	for rows.Next() {
		var (
			p             Process
			started, seen int64
		)
		if err := rows.Scan(&p.ID, &p.Hostname, &p.PID, &started, &seen); err != nil {
			return nil, fmt.Errorf("delivery: processes: %w", err)
		}
		p.StartedAt, p.SeenAt = time.UnixMilli(started), time.UnixMilli(seen)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("delivery: processes: %w", err)
	}
	return out, nil
}
