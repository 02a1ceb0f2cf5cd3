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
	sqlLedgerRead   = `SELECT handler, status, started_at FROM processed_events WHERE event_id = ?`
	sqlLedgerInsert = `INSERT INTO processed_events (event_id, handler, status, started_at, processed_at)
		VALUES (?, ?, 'in_progress', ?, NULL)`
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

// claimLedger claims (eventID, h) for every handler in hs with owner token
// token, inside the caller's write transaction. A failed read is returned as
// readErr (the delivery fails, the transaction is fine); a failed write is
// returned as err (the transaction is not).
func (r *Runner) claimLedger(s *stmts, eventID string, hs []NamedHandler, token int64) (cs []claim, readErr, err error) {
	have, readErr := readLedger(s, eventID)
	if readErr != nil {
		return nil, readErr, nil
	}
	expired := token - r.cfg.LedgerLease.Milliseconds()
	cs = make([]claim, len(hs))
	for i, h := range hs {
		c := claim{h: h, token: token}
		e, ok := have[h.Name]
		switch {
		case !ok:
			if _, err := s.exec(sqlLedgerInsert, eventID, h.Name, token); err != nil {
				return nil, nil, fmt.Errorf("outbox: ledger claim %s/%s: %w", eventID, h.Name, err)
			}
			c.result = ClaimClaimed
		case e.status == LedgerDone:
			c.result = ClaimAlreadyDone
		case e.startedAt <= expired:
			n, err := s.exec(sqlLedgerTakeOver, token, eventID, h.Name, e.startedAt)
			if err != nil {
				return nil, nil, fmt.Errorf("outbox: ledger take over %s/%s: %w", eventID, h.Name, err)
			}
			if n != 1 {
				return nil, nil, fmt.Errorf("outbox: ledger take over %s/%s: claim changed under a write lock", eventID, h.Name)
			}
			c.result = ClaimTakenOver
			c.from = e.startedAt
		default:
			c.result = ClaimHeldElsewhere
			c.until = time.UnixMilli(e.startedAt).Add(r.cfg.LedgerLease)
		}
		cs[i] = c
	}
	return cs, nil, nil
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
