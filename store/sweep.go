package store

import (
	"context"
	"database/sql"
)

// sweepBatches deletes in batches: del deletes at most batch rows in tx and
// says how many; it runs, a transaction each, until a batch deletes fewer
// than batch rows. It returns how many rows were deleted in all; what
// names the sweep in an error.
func (s *Store) sweepBatches(ctx context.Context, what string, batch int, del func(tx *sql.Tx) (int64, error)) (int, error) {
	total := 0
	for {
		var n int64
		err := s.db.Tx(ctx, func(tx *sql.Tx) error {
			var err error
			n, err = del(tx)
			return err
		})
		if err != nil {
			return total, wrap(what, err)
		}
		total += int(n)
		if n < int64(batch) {
			return total, nil
		}
	}
}

// deletedRows returns how many rows res deleted.
func deletedRows(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
