package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Ledger statuses of processed_events.
const (
	LedgerInProgress = "in_progress"
	LedgerDone       = "done"
)

const (
	sqlLedgerRead    = `SELECT handler, status, started_at FROM processed_events WHERE event_id = ?`
	sqlLedgerReadOne = `SELECT status, started_at FROM processed_events WHERE event_id = ? AND handler = ?`
	// A claim inserted meanwhile by a concurrent transaction (PostgreSQL)
	// makes the insert change nothing, once that transaction has
	// committed; the claim then reads it again.
	sqlLedgerInsert = `INSERT INTO processed_events (event_id, handler, status, started_at, processed_at)
		VALUES (?, ?, 'in_progress', ?, NULL) ON CONFLICT (event_id, handler) DO NOTHING`
	sqlLedgerTakeOver = `UPDATE processed_events SET started_at = ?, processed_at = NULL
		WHERE event_id = ? AND handler = ? AND status = 'in_progress' AND started_at = ?`
	sqlLedgerDone = `UPDATE processed_events SET status = 'done', processed_at = ?
		WHERE event_id = ? AND handler = ? AND status = 'in_progress' AND started_at = ?`
	sqlLedgerRelease = `DELETE FROM processed_events
		WHERE event_id = ? AND handler = ? AND status = 'in_progress' AND started_at = ?`
)

type ledgerEntry struct {
	status    string
	startedAt int64
}

// ledgerTries bounds how often a claim of one (event, handler) reads the
// ledger again after a concurrent transaction changed it between the read
// and the write (PostgreSQL; on SQLite the write lock keeps the rows read).
const ledgerTries = 4

// claimLedger claims (eventID, h) for every handler in hs with owner token
// token, inside the caller's write transaction. A failed read is returned as
// readErr (the delivery fails, the transaction is fine); a failed write is
// returned as err (the transaction is not).
//
// Every write is conditional on what was read: the insert changes nothing
// when a claim exists, the takeover nothing when the claim it read has
// changed. On PostgreSQL, where claims run side by side, either outcome
// means a concurrent transaction claimed first and committed; the handler's
// row is read again and judged anew, so two claimers never both hold it.
func (r *Runner) claimLedger(s *stmts, eventID string, hs []NamedHandler, token int64) (cs []claim, readErr, err error) {
	have, readErr := readLedger(s, eventID)
	if readErr != nil {
		return nil, readErr, nil
	}
	cs = make([]claim, len(hs))
	for i, h := range hs {
		e, ok := have[h.Name]
		for try := 1; ; try++ {
			c, won, err := r.claimOne(s, eventID, h, token, e, ok)
			if err != nil {
				return nil, nil, err
			}
			if won {
				cs[i] = c
				break
			}
			if try == ledgerTries {
				return nil, fmt.Errorf("outbox: ledger claim %s/%s: changed by other claimers %d times", eventID, h.Name, try), nil
			}
			if e, ok, readErr = readLedgerOne(s, eventID, h.Name); readErr != nil {
				return nil, readErr, nil
			}
		}
	}
	return cs, nil, nil
}

// claimOne claims (eventID, h) given its ledger row e (ok: there is one).
// won is false when a concurrent transaction changed the row first.
func (r *Runner) claimOne(s *stmts, eventID string, h NamedHandler, token int64, e ledgerEntry, ok bool) (c claim, won bool, err error) {
	c = claim{h: h, token: token}
	switch {
	case !ok:
		n, err := s.exec(sqlLedgerInsert, eventID, h.Name, token)
		if err != nil {
			return c, false, fmt.Errorf("outbox: ledger claim %s/%s: %w", eventID, h.Name, err)
		}
		c.result = ClaimClaimed
		return c, n == 1, nil
	case e.status == LedgerDone:
		c.result = ClaimAlreadyDone
	case e.startedAt <= token-r.cfg.LedgerLease.Milliseconds():
		n, err := s.exec(sqlLedgerTakeOver, token, eventID, h.Name, e.startedAt)
		if err != nil {
			return c, false, fmt.Errorf("outbox: ledger take over %s/%s: %w", eventID, h.Name, err)
		}
		c.result = ClaimTakenOver
		c.from = e.startedAt
		return c, n == 1, nil
	default:
		c.result = ClaimHeldElsewhere
		c.until = time.UnixMilli(e.startedAt).Add(r.cfg.LedgerLease)
	}
	return c, true, nil
}

// readLedgerOne reads the ledger row of (eventID, handler).
func readLedgerOne(s *stmts, eventID, handler string) (ledgerEntry, bool, error) {
	rows, err := s.query(sqlLedgerReadOne, eventID, handler)
	if err != nil {
		return ledgerEntry{}, false, fmt.Errorf("outbox: ledger read %s/%s: %w", eventID, handler, err)
	}
	defer rows.Close()
	var e ledgerEntry
	if !rows.Next() {
		return e, false, rows.Err()
	}
	if err := rows.Scan(&e.status, &e.startedAt); err != nil {
		return e, false, fmt.Errorf("outbox: ledger read %s/%s: %w", eventID, handler, err)
	}
	return e, true, rows.Err()
}

// observeClaims reports committed claims to the observer and the log.
func (r *Runner) observeClaims(ctx context.Context, eventID string, cs []claim) {
	for _, c := range cs {
		if c.result == "" {
			continue
		}
		r.obs.ledgerClaimed(c.h.Name, c.result)
		if c.result == ClaimTakenOver {
			r.log.InfoContext(ctx, "outbox: expired ledger claim taken over", "event_id", eventID,
				"handler", c.h.Name, "claimed_at", time.UnixMilli(c.from).UTC())
		}
	}
}

func readLedger(s *stmts, eventID string) (map[string]ledgerEntry, error) {
	rows, err := s.query(sqlLedgerRead, eventID)
	if err != nil {
		return nil, fmt.Errorf("outbox: ledger read %s: %w", eventID, err)
	}
	defer rows.Close()
	have := map[string]ledgerEntry{}
	for rows.Next() {
		var h string
		var e ledgerEntry
		if err := rows.Scan(&h, &e.status, &e.startedAt); err != nil {
			return nil, fmt.Errorf("outbox: ledger read %s: %w", eventID, err)
		}
		have[h] = e
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: ledger read %s: %w", eventID, err)
	}
	return have, nil
}

// settleLedger marks done or releases claims, each conditioned on its owner
// token: a claim that was taken over in the meantime is left alone.
func (r *Runner) settleLedger(s *stmts, ops []ledgerOp) error {
	now := r.cfg.Now().UnixMilli()
	for _, op := range ops {
		var err error
		var n int64
		if op.done {
			n, err = s.exec(sqlLedgerDone, now, op.eventID, op.handler, op.token)
		} else {
			n, err = s.exec(sqlLedgerRelease, op.eventID, op.handler, op.token)
		}
		if err != nil {
			return fmt.Errorf("outbox: ledger settle %s/%s: %w", op.eventID, op.handler, err)
		}
		if n == 0 {
			r.log.Warn("outbox: ledger claim was taken over before it was settled", "event_id", op.eventID,
				"handler", op.handler)
		}
	}
	return nil
}

// LedgerEntry is one row of the processed-events ledger.
type LedgerEntry struct {
	EventID     string
	Handler     string
	Status      string // LedgerInProgress or LedgerDone
	StartedAt   time.Time
	ProcessedAt time.Time // zero while in progress
}

// Ledger returns the ledger rows of an event, by handler name.
func (q *Queue) Ledger(ctx context.Context, eventID string) ([]LedgerEntry, error) {
	rows, err := q.read.QueryContext(ctx, `SELECT event_id, handler, status, started_at, processed_at
		FROM processed_events WHERE event_id = ? ORDER BY handler`, eventID)
	if err != nil {
		return nil, fmt.Errorf("outbox: ledger of %s: %w", eventID, err)
	}
	defer rows.Close()
	var out []LedgerEntry
	for rows.Next() {
		var e LedgerEntry
		var started int64
		var processed sql.NullInt64
		if err := rows.Scan(&e.EventID, &e.Handler, &e.Status, &started, &processed); err != nil {
			return nil, fmt.Errorf("outbox: ledger of %s: %w", eventID, err)
		}
		e.StartedAt = time.UnixMilli(started)
		if processed.Valid {
			e.ProcessedAt = time.UnixMilli(processed.Int64)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: ledger of %s: %w", eventID, err)
	}
	return out, nil
}
