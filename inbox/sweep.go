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

// Run applies Retention (to recorded activities and cached remote actors)
// and TombstoneRetention (to remote tombstones) every SweepInterval until ctx ends, then returns
// nil. A failed sweep is logged and tried again at the next interval.
func (im *Importer) Run(ctx context.Context) error {
	t := time.NewTicker(im.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := im.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			im.log.WarnContext(ctx, "inbox: retention sweep failed", "err", err)
		case n > 0:
			im.log.InfoContext(ctx, "inbox: retention sweep", "deleted", n)
		}
		n, err = im.SweepTombstones(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			im.log.WarnContext(ctx, "inbox: remote tombstone sweep failed", "err", err)
		case n > 0:
			im.log.InfoContext(ctx, "inbox: remote tombstone sweep", "deleted", n)
		}
		n, err = im.SweepMoves(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			im.log.WarnContext(ctx, "inbox: remote move sweep failed", "err", err)
		case n > 0:
			im.log.InfoContext(ctx, "inbox: remote move sweep", "deleted", n)
		}
		n, err = im.SweepRemoteActors(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			im.log.WarnContext(ctx, "inbox: remote actor sweep failed", "err", err)
		case n > 0:
			im.log.InfoContext(ctx, "inbox: remote actor sweep", "deleted", n)
		}
	}
}
