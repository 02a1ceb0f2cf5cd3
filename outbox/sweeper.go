package outbox

import (
	"context"
	"log/slog"
	"time"
)

// Sweeper applies the retention of the ledger and of done outbox rows on an
// interval. The db worker runs one; a process whose events go through
// another bus (JetStream) runs one beside it.
type Sweeper struct {
	// Queue is the outbox. Required.
	Queue *Queue
	// LedgerRetention (default 30 days) and DoneRetention (default 7 days)
	// are as in WorkerConfig.
	LedgerRetention, DoneRetention time.Duration
	// Interval is the time between sweeps (default 10 min).
	Interval time.Duration
	// CountFoldInterval is the time between folds of the appended counts
	// of new rows (Queue.FoldCounts; default 5 s).
	CountFoldInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives one line per sweep that deleted something (nil
	// discards).
	Logger *slog.Logger
}

// Run sweeps at once and then every Interval until ctx ends.
func (s Sweeper) Run(ctx context.Context) error {
	def(&s.LedgerRetention, DefaultLedgerRetention)
	def(&s.DoneRetention, DefaultDoneRetention)
	def(&s.Interval, DefaultSweepInterval)
	def(&s.CountFoldInterval, DefaultCountFoldInterval)
	if s.Now == nil {
		s.Now = time.Now
	}
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	fold := time.NewTicker(s.CountFoldInterval)
	defer fold.Stop()
	for {
		now := s.Now()
		res, err := s.Queue.Sweep(ctx, now.Add(-s.LedgerRetention), now.Add(-s.DoneRetention))
		switch {
		case err != nil && ctx.Err() == nil:
			log.WarnContext(ctx, "outbox: retention sweep failed", "err", err)
		case res.Ledger > 0 || res.Done > 0:
			log.InfoContext(ctx, "outbox: retention sweep", "ledger_rows", res.Ledger, "done_rows", res.Done)
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				break wait
			case <-fold.C:
				if err := s.Queue.FoldCounts(ctx); err != nil && ctx.Err() == nil {
					log.WarnContext(ctx, "outbox: count fold failed", "err", err)
				}
			}
		}
	}
}
