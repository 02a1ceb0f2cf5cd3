package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// Remote tombstones (migration 0033): the remote objects a Delete named,
// stored here or not, so that a Create or Update of one arriving after its
// Delete (peers deliver out of order too) is not stored. They are bounded
// in number (the oldest go first) and swept after a retention the inbox
// chooses; a stored object that was deleted also stays a tombstone in
// objects, which is never swept.

// RemoteTombstoneStats is what the remote tombstones hold: how many, and
// how many late Creates and Updates they turned away.
type RemoteTombstoneStats struct {
	Held    int64 `json:"held"`
	Refused int64 `json:"refused"`
}

// DeleteRemoteObjectTx applies a remote actor's Delete of the object uri in
// tx: a stored object becomes a tombstone as TombstoneTx makes it (false
// when it already was one), an object never stored makes no row in objects;
// either way uri gets a remote tombstone naming actorURI, and when more
// than limit are held the oldest go. It reports whether a stored object
// changed or a new remote tombstone was made.
func (s *Store) DeleteRemoteObjectTx(ctx context.Context, tx *sql.Tx, uri, actorURI string, limit int) (bool, error) {
	if s.uris.IsLocal(uri) {
		return false, Errorf(EFORBIDDEN, "object %q is local", uri)
	}
	if limit < 1 {
		return false, Errorf(EINVALID, "remote tombstone bound %d", limit)
	}
	if err := s.lockObjectURITx(ctx, tx, uri); err != nil {
		return false, err
	}
	changed := false
	if _, err := s.objectForUpdate(ctx, tx, uri); err == nil {
		if changed, err = s.TombstoneTx(ctx, tx, uri, actorURI); err != nil {
			return false, err
		}
	} else if !errors.Is(err, ErrNotFound) {
		return false, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO remote_tombstones (object_uri, actor_uri, deleted_at)
		VALUES (?, ?, ?) ON CONFLICT (object_uri) DO NOTHING`, uri, actorURI, ms(s.clock()))
	if err != nil {
		return false, wrap("remote tombstone", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return changed, nil
	}
	var held int64
	if err := tx.QueryRowContext(ctx, `UPDATE remote_tombstone_counts SET held = held + 1 WHERE id = 1
		RETURNING held`).Scan(&held); err != nil {
		return false, wrap("remote tombstone count", err)
	}
	if over := held - int64(limit); over > 0 {
		res, err := tx.ExecContext(ctx, `DELETE FROM remote_tombstones WHERE object_uri IN (
			SELECT object_uri FROM remote_tombstones ORDER BY deleted_at, object_uri LIMIT ?)`, over)
		if err != nil {
			return false, wrap("remote tombstone bound", err)
		}
		n, _ := res.RowsAffected()
		if _, err := tx.ExecContext(ctx, `UPDATE remote_tombstone_counts SET held = held - ? WHERE id = 1`, n); err != nil {
			return false, wrap("remote tombstone count", err)
		}
	}
	return true, nil
}

// RemoteTombstonedTx reports, in tx, whether the remote object uri has a
// remote tombstone, and counts it as a late Create or Update turned away
// when it has. On PostgreSQL it waits for a Delete of uri being applied
// beside it (the lock DeleteRemoteObjectTx takes), so the two cannot both
// miss each other.
func (s *Store) RemoteTombstonedTx(ctx context.Context, tx *sql.Tx, uri string) (bool, error) {
	if err := s.lockObjectURITx(ctx, tx, uri); err != nil {
		return false, err
	}
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM remote_tombstones WHERE object_uri = ?`, uri).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, wrap("remote tombstone", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE remote_tombstone_counts SET refused = refused + 1 WHERE id = 1`); err != nil {
		return false, wrap("remote tombstone count", err)
	}
	return true, nil
}

// RemoteTombstoned reports whether the remote object uri has a remote
// tombstone (a read outside any transaction: the import checks again in
// its own).
func (s *Store) RemoteTombstoned(ctx context.Context, uri string) (bool, error) {
	return s.holds(ctx, "remote tombstone", `SELECT EXISTS (SELECT 1 FROM remote_tombstones WHERE object_uri = ?)`, uri)
}

// RemoteTombstoneStats returns the count of remote tombstones and of the
// Creates and Updates they turned away (one row, kept on write).
func (s *Store) RemoteTombstoneStats(ctx context.Context) (RemoteTombstoneStats, error) {
	var st RemoteTombstoneStats
	err := s.db.Read.QueryRowContext(ctx, `SELECT held, refused FROM remote_tombstone_counts WHERE id = 1`).
		Scan(&st.Held, &st.Refused)
	if err != nil {
		return st, wrap("remote tombstone stats", err)
	}
	return st, nil
}

// SweepRemoteTombstones deletes the remote tombstones made before cutoff,
// batch rows a transaction, and returns how many it deleted.
func (s *Store) SweepRemoteTombstones(ctx context.Context, cutoff time.Time, batch int) (int, error) {
	return s.sweepBatches(ctx, "sweep remote tombstones", batch, func(tx *sql.Tx) (int64, error) {
		n, err := deletedRows(tx.ExecContext(ctx, `DELETE FROM remote_tombstones WHERE object_uri IN (
			SELECT object_uri FROM remote_tombstones WHERE deleted_at < ? ORDER BY deleted_at LIMIT ?)`,
			ms(cutoff), batch))
		if err != nil || n == 0 {
			return n, err
		}
		_, err = tx.ExecContext(ctx, `UPDATE remote_tombstone_counts SET held = held - ? WHERE id = 1`, n)
		return n, err
	})
}
