package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
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
		if cs[i], readErr, err = r.claimRetrying(s, eventID, h, token, e, ok); readErr != nil || err != nil {
			return nil, readErr, err
		}
	}
	return cs, nil, nil
}

// claimRetrying claims (eventID, h) given its ledger row e (ok: there is
// one) as claimOne does, reading the row again, up to ledgerTries times in
// all, while concurrent transactions win.
func (r *Runner) claimRetrying(s *stmts, eventID string, h NamedHandler, token int64, e ledgerEntry, ok bool) (claim, error, error) {
	for try := 1; ; try++ {
		c, won, err := r.claimOne(s, eventID, h, token, e, ok)
		if err != nil || won {
			return c, nil, err
		}
		if try == ledgerTries {
			return claim{}, fmt.Errorf("outbox: ledger claim %s/%s: changed by other claimers %d times", eventID, h.Name, try), nil
		}
		var readErr error
		if e, ok, readErr = readLedgerOne(s, eventID, h.Name); readErr != nil {
			return claim{}, readErr, nil
		}
	}
}

// ledgerWant is one event of a claimed batch and the handlers to claim it
// for.
type ledgerWant struct {
	eventID string
	hs      []NamedHandler
}

// ledgerBatch bounds the events one ledger read lists and the claims one
// insert writes (well below both stores' limits on bound parameters).
const ledgerBatch = 128

// Statements of the batched ledger claim, by width (the next power of two,
// the extra places repeating the last event or claim, which changes
// nothing): the rows of a list of events, and the claims of a list of
// (event, handler), each inserted unless a claim exists. The insert
// returns the claims it wrote; on PostgreSQL one a concurrent transaction
// wrote first is not among them.
var (
	sqlLedgerReadMany = idStatements(`SELECT event_id, handler, status, started_at FROM processed_events
		WHERE event_id IN (`)
	sqlLedgerInsertMany = func() map[int]string {
		m := make(map[int]string)
		for w := 1; w <= ledgerBatch; w *= 2 {
			var b strings.Builder
			b.WriteString(`INSERT INTO processed_events (event_id, handler, status, started_at, processed_at) VALUES `)
			for i := range w {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(`(?, ?, 'in_progress', ?, NULL)`)
			}
			b.WriteString(` ON CONFLICT (event_id, handler) DO NOTHING RETURNING event_id, handler`)
			m[w] = b.String()
		}
		return m
	}()
)

// widthOf is the width of a batched statement for n items, at most most.
func widthOf(n, most int) int {
	w := 1
	for w < n {
		w *= 2
	}
	return min(w, most)
}

// claimLedgers claims the ledger of a claimed batch, as claimLedger does
// for each of its events, in a few statements: one insert per ledgerBatch
// claims, each written unless a claim exists (the common case: a new
// event has none). The claims an insert did not write (an event run
// before, or claimed meanwhile by a concurrent transaction) are read, one
// read per maxIDs events, and judged one by one as claimLedger judges them
// (done, held elsewhere, or taken over). It returns each event's claims and
// read error, in the order of wants; err means the transaction failed. An
// event with a read error keeps the claims its insert wrote, for the
// delivery to release (its handlers do not run).
func (r *Runner) claimLedgers(s *stmts, wants []ledgerWant, token int64) (claims [][]claim, readErrs []error, err error) {
	claims, readErrs = make([][]claim, len(wants)), make([]error, len(wants))
	type pending struct{ want, handler int }
	var inserts []pending
	for i, wt := range wants {
		claims[i] = make([]claim, len(wt.hs))
		for k := range wt.hs {
			inserts = append(inserts, pending{i, k})
		}
	}
	var lost []pending // claims an insert did not write
	for lo := 0; lo < len(inserts); lo += ledgerBatch {
		chunk := inserts[lo:min(lo+ledgerBatch, len(inserts))]
		w := widthOf(len(chunk), ledgerBatch)
		args := make([]any, 0, 3*w)
		for j := range w {
			p := chunk[min(j, len(chunk)-1)]
			args = append(args, wants[p.want].eventID, wants[p.want].hs[p.handler].Name, token)
		}
		won, err := insertLedgers(s, sqlLedgerInsertMany[w], args)
		if err != nil {
			return nil, nil, fmt.Errorf("outbox: ledger claim: %w", err)
		}
		for _, p := range chunk {
			h := wants[p.want].hs[p.handler]
			if won[wants[p.want].eventID+"\x00"+h.Name] {
				claims[p.want][p.handler] = claim{h: h, token: token, result: ClaimClaimed}
				continue
			}
			lost = append(lost, p)
		}
	}
	if len(lost) > 0 {
		// The events of the lost claims, each once, and their ledger rows.
		var (
			of   []ledgerWant
			seen = map[int]bool{}
		)
		for _, p := range lost {
			if !seen[p.want] {
				seen[p.want] = true
				of = append(of, wants[p.want])
			}
		}
		have := make(map[string]map[string]ledgerEntry, len(of))
		var rerr error
		for lo := 0; lo < len(of) && rerr == nil; lo += maxIDs {
			rerr = readLedgers(s, of[lo:min(lo+maxIDs, len(of))], have)
		}
		for _, p := range lost {
			wt, h := wants[p.want], wants[p.want].hs[p.handler]
			if rerr != nil {
				readErrs[p.want] = rerr
			}
			if readErrs[p.want] != nil {
				continue
			}
			e, ok := have[wt.eventID][h.Name]
			c, cerr, err := r.claimRetrying(s, wt.eventID, h, token, e, ok)
			if err != nil {
				return nil, nil, err
			}
			if cerr != nil {
				readErrs[p.want] = cerr
				continue
			}
			claims[p.want][p.handler] = c
		}
	}
	return claims, readErrs, nil
}

// readLedgers reads the ledger rows of the events of wants into have.
func readLedgers(s *stmts, wants []ledgerWant, have map[string]map[string]ledgerEntry) error {
	w := widthOf(len(wants), maxIDs)
	args := make([]any, w)
	for j := range w {
		args[j] = wants[min(j, len(wants)-1)].eventID
	}
	rows, err := s.query(sqlLedgerReadMany[w], args...)
	if err != nil {
		return fmt.Errorf("outbox: ledger read of %d events: %w", len(wants), err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, h string
		var e ledgerEntry
		if err := rows.Scan(&id, &h, &e.status, &e.startedAt); err != nil {
			return fmt.Errorf("outbox: ledger read of %d events: %w", len(wants), err)
		}
		if have[id] == nil {
			have[id] = map[string]ledgerEntry{}
		}
		have[id][h] = e
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("outbox: ledger read of %d events: %w", len(wants), err)
	}
	return nil
}

// insertLedgers runs one batched ledger insert and returns the claims it
// wrote, keyed event id NUL handler.
func insertLedgers(s *stmts, query string, args []any) (map[string]bool, error) {
	rows, err := s.query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	won := map[string]bool{}
	for rows.Next() {
		var id, h string
		if err := rows.Scan(&id, &h); err != nil {
			return nil, err
		}
		won[id+"\x00"+h] = true
	}
	return won, rows.Err()
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

// sqlLedgerDoneMany marks done the claims of one owner token and handler
// among a list of events (by width, as sqlRowsDone), returning the events
// whose claim it marked.
var sqlLedgerDoneMany = func() map[int]string {
	m := idStatements(`UPDATE processed_events SET status = 'done', processed_at = ?
		WHERE status = 'in_progress' AND started_at = ? AND handler = ? AND event_id IN (`)
	for w, q := range m {
		m[w] = q + ` RETURNING event_id`
	}
	return m
}()

// settleLedgers applies ops as settleLedger does, marking the done claims
// of one owner token and handler in one statement (per maxIDs events);
// releases go one by one.
func (r *Runner) settleLedgers(s *stmts, ops []ledgerOp) error {
	type key struct {
		token   int64
		handler string
	}
	var (
		order    []key
		byKey    = map[key][]string{}
		releases []ledgerOp
	)
	for _, op := range ops {
		if !op.done {
			releases = append(releases, op)
			continue
		}
		k := key{op.token, op.handler}
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], op.eventID)
	}
	now := r.cfg.Now().UnixMilli()
	for _, k := range order {
		ids := byKey[k]
		for len(ids) > 0 {
			chunk := ids[:min(len(ids), maxIDs)]
			ids = ids[len(chunk):]
			w := idWidth(len(chunk))
			args := make([]any, 0, 3+w)
			args = append(args, now, k.token, k.handler)
			for i := range w {
				args = append(args, chunk[min(i, len(chunk)-1)])
			}
			marked, err := returnedIDs(s, sqlLedgerDoneMany[w], args)
			if err != nil {
				return fmt.Errorf("outbox: ledger settle of %d events/%s: %w", len(chunk), k.handler, err)
			}
			if len(marked) == len(chunk) {
				continue
			}
			for _, id := range chunk {
				if !marked[id] {
					r.log.Warn("outbox: ledger claim was taken over before it was settled", "event_id", id,
						"handler", k.handler)
				}
			}
		}
	}
	return r.settleLedger(s, releases)
}

// returnedIDs runs query and returns the set of ids it returns.
func returnedIDs(s *stmts, query string, args []any) (map[string]bool, error) {
	rows, err := s.query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		got[id] = true
	}
	return got, rows.Err()
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
