package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Sweep deletes the recorded activities imported more than Retention ago,
// and the bytes of forwarded activities kept as long, and returns how many
// recorded activities it deleted. A redelivery of a deleted one would be
// recorded and imported again; imports are upserts, and the Date window
// keeps old signed requests from being replayed.
func (im *Importer) Sweep(ctx context.Context) (int, error) {
	cutoff := im.cfg.Now().Add(-im.cfg.Retention).UnixMilli()
	var n int64
	err := im.cfg.DB.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM inbox_activities WHERE imported_at IS NOT NULL AND imported_at < ?`, cutoff)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		// The bytes kept for forwards go with them.
		_, err = im.st.SweepForwardsTx(ctx, tx, time.UnixMilli(cutoff))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("inbox: sweep: %w", err)
	}
	return int(n), nil
}

// sweepBatch bounds the rows one sweep transaction deletes.
const sweepBatch = 1000

// SweepRemoteActors deletes the cached remote actors not fetched for
// Retention (see store.SweepRemoteActors) and returns how many it deleted.
func (im *Importer) SweepRemoteActors(ctx context.Context) (int, error) {
	n, err := im.cfg.Store.SweepRemoteActors(ctx, im.cfg.Now().Add(-im.cfg.Retention), sweepBatch)
	if err != nil {
		return n, fmt.Errorf("inbox: sweep remote actors: %w", err)
	}
	return n, nil
}

// Run applies Retention (to recorded activities and cached remote actors),
// TombstoneRetention (to remote tombstones) and store.MoveCooldown (to
// remote accounts' Moves) every SweepInterval until ctx ends, then returns
// nil. A failed sweep is logged and tried again at the next interval.
func (im *Importer) Run(ctx context.Context) error {
	t := time.NewTicker(im.cfg.SweepInterval)
	defer t.Stop()
	sweeps := []struct {
		what  string
		sweep func(context.Context) (int, error)
	}{
		{"retention", im.Sweep},
		{"remote tombstone", im.SweepTombstones},
		{"remote move", im.SweepMoves},
		{"remote actor", im.SweepRemoteActors},
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, sw := range sweeps {
			n, err := sw.sweep(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				im.log.WarnContext(ctx, "inbox: "+sw.what+" sweep failed", "err", err)
			case n > 0:
				im.log.InfoContext(ctx, "inbox: "+sw.what+" sweep", "deleted", n)
			}
		}
	}
}
