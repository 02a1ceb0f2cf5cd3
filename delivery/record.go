package delivery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/sqldb"
)

// Attempt outcomes recorded in delivery_attempts; those of a POST are the
// outcome labels of the delivery metrics.
const (
	OutcomeDelivered = metrics.DeliveryDelivered
	OutcomeRetry     = metrics.DeliveryRetry
	OutcomePermanent = metrics.DeliveryPermanent
	OutcomeRefused   = metrics.DeliveryRefused
	// OutcomeDead: the delivery was dead-lettered without a POST (parked
	// longer than ParkMax).
	OutcomeDead = "dead"
)

// attemptRow is one row of delivery_attempts.
type attemptRow struct {
	eventID, activityID, inbox, host string
	at                               time.Time
	status                           int
	outcome                          string
	err                              string
	took                             time.Duration
}

// parkOp sets (at non-zero) or clears the parked_at of one delivery.
type parkOp struct {
	eventID string
	at      time.Time
}

// recOp is one write of the recorder.
type recOp struct {
	attempt *attemptRow
	// hostSuccess are sqlHostSuccess's arguments: a healthy host's
	// success.
	hostSuccess []any
	park        *parkOp
	unpark      string // a host whose deliveries are no longer parked
	done        chan error
}

// recorder writes attempt records, host state and parking marks in
// batches: one transaction per batch instead of one per delivery, which
// the delivery rate needs. Order is kept.
type recorder struct {
	db  *sqldb.DB
	log *slog.Logger
	ch  chan recOp
	// mu guards running against the writer's stop: an op goes into ch
	// only under the read lock while running, and the writer clears
	// running under the write lock before it takes what is left, so no op
	// is left in ch after the writer has gone.
	mu      sync.RWMutex
	running bool
}

// Recorder bounds.
const (
	recBuffer   = 8192
	recBatch    = 1024
	recInterval = 100 * time.Millisecond
	recWait     = 10 * time.Second
	maxErrLen   = 1000
)

func newRecorder(db *sqldb.DB, log *slog.Logger) *recorder {
	return &recorder{db: db, log: log, ch: make(chan recOp, recBuffer)}
}

// add queues op; when Run is not running, or the buffer is full, op is
// written at once, so nothing is dropped.
func (r *recorder) add(op recOp) {
	if r.queue(op) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), recWait)
	defer cancel()
	if err := r.write(ctx, []recOp{op}); err != nil {
		r.log.Warn("delivery: record write failed", "err", err)
	}
}

// queue puts op in the writer's channel and reports true, or reports
// false when the writer is not running or its buffer is full.
func (r *recorder) queue(op recOp) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if !r.running {
		return false
	}
	select {
	case r.ch <- op:
		return true
	default:
		return false
	}
}

// addWait queues op and waits until it is written (or writes it at once
// when Run is not running or its buffer is full).
func (r *recorder) addWait(ctx context.Context, op recOp) error {
	op.done = make(chan error, 1)
	if !r.queue(op) {
		op.done = nil
		return r.write(ctx, []recOp{op})
	}
	t := time.NewTimer(recWait)
	defer t.Stop()
	select {
	case err := <-op.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errors.New("delivery: record: timed out waiting for the writer")
	}
}

// setRunning marks the writer running or stopped; once stopped, no op
// enters its channel.
func (r *recorder) setRunning(on bool) {
	r.mu.Lock()
	r.running = on
	r.mu.Unlock()
}

// run writes queued ops until ctx ends, then writes what is left.
func (r *recorder) run(ctx context.Context) {
	r.setRunning(true)
	defer r.setRunning(false)
	batch := make([]recOp, 0, recBatch)
	t := time.NewTicker(recInterval)
	defer t.Stop()
	// A write runs to its end even when ctx ends meanwhile (bounded by
	// recWait): the records it carries exist nowhere else.
	flush := func(ctx context.Context) {
		if len(batch) == 0 {
			return
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recWait)
		defer cancel()
		err := r.write(wctx, batch)
		if err != nil {
			r.log.Warn("delivery: record write failed", "err", err, "records", len(batch))
		}
		for _, op := range batch {
			if op.done != nil {
				op.done <- err
			}
		}
		batch = batch[:0]
	}
	for {
		select {
		case op := <-r.ch:
			batch = append(batch, op)
			if len(batch) >= recBatch || op.done != nil {
				flush(ctx)
			}
		case <-t.C:
			flush(ctx)
		case <-ctx.Done():
			r.setRunning(false)
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recWait)
			defer cancel()
			for {
				select {
				case op := <-r.ch:
					batch = append(batch, op)
					if len(batch) >= recBatch {
						flush(fctx)
					}
				default:
					flush(fctx)
					return
				}
			}
		}
	}
}

// writeTries bounds the transactions of one write that PostgreSQL aborts
// to break a deadlock with another process's writes.
const writeTries = 3

// write applies ops in one transaction. Healthy hosts' successes are
// written last, in the order of their hosts, so that two processes'
// batches lock delivery_hosts rows in one order; a transaction PostgreSQL
// aborted as a deadlock victim or a serialization failure is run again.
func (r *recorder) write(ctx context.Context, ops []recOp) error {
	var err error
	for range writeTries {
		if err = r.writeOnce(ctx, ops); !retryable(err) {
			break
		}
	}
	return err
}

// retryable reports whether err is PostgreSQL's deadlock_detected (40P01)
// or serialization_failure (40001): the transaction was rolled back and
// may run again.
func retryable(err error) bool {
	var st interface{ SQLState() string }
	if !errors.As(err, &st) {
		return false
	}
	return st.SQLState() == "40P01" || st.SQLState() == "40001"
}

func (r *recorder) writeOnce(ctx context.Context, ops []recOp) error {
	var successes [][]any
	err := r.db.Tx(ctx, func(tx *sql.Tx) error {
		successes = successes[:0]
		stmts := map[string]*sql.Stmt{}
		defer func() {
			for _, s := range stmts {
				_ = s.Close()
			}
		}()
		exec := func(q string, args ...any) error {
			st, ok := stmts[q]
			if !ok {
				var err error
				if st, err = tx.PrepareContext(ctx, q); err != nil {
					return err
				}
				stmts[q] = st
			}
			_, err := st.ExecContext(ctx, args...)
			return err
		}
		// Attempts only add rows to their own table: they go in first, many
		// to a statement; the other writes follow in order.
		var attempts [][]any
		for _, op := range ops {
			if a := op.attempt; a != nil {
				msg := a.err
				if len(msg) > maxErrLen {
					msg = msg[:maxErrLen]
				}
				attempts = append(attempts, []any{a.eventID, a.activityID, a.inbox, a.host, a.at.UnixMilli(),
					a.status, a.outcome, msg, a.took.Milliseconds()})
			}
		}
		if err := insertRows(ctx, tx, `INSERT INTO delivery_attempts (event_id, activity_id, inbox, host, attempted_at,
			status_code, outcome, error, duration_ms) VALUES `, "", attempts); err != nil {
			return err
		}
		for _, op := range ops {
			var err error
			switch {
			case op.attempt != nil:
			case op.hostSuccess != nil:
				successes = append(successes, op.hostSuccess)
			case op.park != nil && !op.park.at.IsZero():
				err = exec(`UPDATE delivery_targets SET parked_at = ? WHERE event_id = ? AND parked_at IS NULL`,
					op.park.at.UnixMilli(), op.park.eventID)
			case op.park != nil:
				err = exec(`UPDATE delivery_targets SET parked_at = NULL WHERE event_id = ?`, op.park.eventID)
			case op.unpark != "":
				err = exec(`UPDATE delivery_targets SET parked_at = NULL WHERE host = ? AND parked_at IS NOT NULL`,
					op.unpark)
			}
			if err != nil {
				return err
			}
		}
		slices.SortStableFunc(successes, func(a, b []any) int { return strings.Compare(a[0].(string), b[0].(string)) })
		for _, args := range successes {
			if err := exec(sqlHostSuccess, args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delivery: record: %w", err)
	}
	return nil
}

// parkedAt returns when the delivery eventID was first parked (zero when
// it is not parked).
func (s *Service) parkedAt(ctx context.Context, eventID string) (time.Time, error) {
	var at sql.NullInt64
	err := s.db.Read.QueryRowContext(ctx, `SELECT parked_at FROM delivery_targets WHERE event_id = ?`, eventID).Scan(&at)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, fmt.Errorf("delivery: parked_at of %s: %w", eventID, err)
	}
	return fromNull(at), nil
}

// sweep deletes attempt records and delivery rows older than Retention, in
// bounded chunks. It returns how many rows it deleted.
func (s *Service) sweep(ctx context.Context) (int64, error) {
	before := s.now().Add(-s.cfg.Retention).UnixMilli()
	var total int64
	for _, q := range []string{
		`DELETE FROM delivery_attempts WHERE id IN (SELECT id FROM delivery_attempts WHERE attempted_at < ? LIMIT 1000)`,
		`DELETE FROM delivery_targets WHERE event_id IN (SELECT event_id FROM delivery_targets
			WHERE created_at < ? LIMIT 1000)`,
		`DELETE FROM delivery_outcomes WHERE event_id IN (SELECT event_id FROM delivery_outcomes
			WHERE settled_at < ? LIMIT 1000)`,
		`DELETE FROM delivery_outcome_counts WHERE activity_id IN (SELECT activity_id FROM delivery_outcome_counts
			WHERE updated_at < ? LIMIT 1000)`,
	} {
		for range 1000 {
			var n int64
			err := s.db.Tx(ctx, func(tx *sql.Tx) error {
				res, err := tx.ExecContext(ctx, q, before)
				if err != nil {
					return err
				}
				n, err = res.RowsAffected()
				return err
			})
			if err != nil {
				return total, fmt.Errorf("delivery: sweep: %w", err)
			}
			total += n
			if n < 1000 {
				break
			}
		}
	}
	return total, nil
}

// insertChunk is how many rows one statement of insertRows carries.
const insertChunk = 64

// insertRows runs the insert head + VALUES rows + tail in tx, insertChunk
// rows to a statement (each prepared once in tx), the rest one by one: a
// statement's fixed cost (the driver's, and a round trip on PostgreSQL) is
// then paid per chunk, not per row. Every row has as many values as the
// first.
func insertRows(ctx context.Context, tx *sql.Tx, head, tail string, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	one := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(rows[0])), ", ") + ")"
	run := func(n int, rows [][]any) error {
		st, err := tx.PrepareContext(ctx, head+strings.TrimSuffix(strings.Repeat(one+", ", n), ", ")+tail)
		if err != nil {
			return err
		}
		defer st.Close()
		args := make([]any, 0, n*len(rows[0]))
		for len(rows) >= n {
			args = args[:0]
			for _, r := range rows[:n] {
				args = append(args, r...)
			}
			if _, err := st.ExecContext(ctx, args...); err != nil {
				return err
			}
			rows = rows[n:]
		}
		return nil
	}
	full := len(rows) / insertChunk * insertChunk
	if full > 0 {
		if err := run(insertChunk, rows[:full]); err != nil {
			return err
		}
	}
	switch rest := rows[full:]; len(rest) {
	case 0:
		return nil
	case 1: // no prepare: on PostgreSQL it and its close are a round trip each
		_, err := tx.ExecContext(ctx, head+one+tail, rest[0]...)
		return err
	default:
		return run(1, rest)
	}
}
