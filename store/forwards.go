package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// RecordForwardTx keeps, in tx, the bytes of the inbound activity
// activityID exactly as received, for its forwards (ActivityPub 7.1.2) to
// send unchanged. Recording an activity again keeps the first bytes.
func (s *Store) RecordForwardTx(ctx context.Context, tx *sql.Tx, activityID string, document []byte, at time.Time) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO forwards (activity_id, document, created_at) VALUES (?, ?, ?)
		ON CONFLICT (activity_id) DO NOTHING`, activityID, string(document), ms(at))
	return wrap("record forward", err)
}

// ForwardDocument returns the bytes RecordForwardTx kept for activityID;
// ErrNotFound when none are (never recorded, or swept).
func (s *Store) ForwardDocument(ctx context.Context, activityID string) ([]byte, error) {
	var doc string
	err := s.db.Read.QueryRowContext(ctx, `SELECT document FROM forwards WHERE activity_id = ?`, activityID).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, wrap("forward document", err)
	}
	return []byte(doc), nil
}

// SweepForwardsTx deletes, in tx, the forwarded activities recorded before
// cutoff and returns how many went.
func (s *Store) SweepForwardsTx(ctx context.Context, tx *sql.Tx, cutoff time.Time) (int64, error) {
	res, err := tx.ExecContext(ctx, `DELETE FROM forwards WHERE created_at < ?`, ms(cutoff))
	if err != nil {
		return 0, wrap("sweep forwards", err)
	}
	return res.RowsAffected()
}
