// Package outbox is courier's transactional outbox: events are inserted in the
// same transaction as the data that caused them (Enqueue), then claimed by a
// bus (the db worker, or the JetStream relay and consumer) and run through the
// processed-events ledger, so that no two deliveries run the same handler for
// the same event at once and a crash never loses an event.
//
// outbox knows events and SQL; it knows nothing of ActivityPub.
package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Row statuses of event_queue.
const (
	StatusPending      = "pending"
	StatusProcessing   = "processing"
	StatusDone         = "done"
	StatusDeadLettered = "dead_lettered"
)

// Event is one row of the outbox.
type Event struct {
	// ID is the event's UUID. Enqueue assigns a random one when empty; a
	// producer that may run twice (a fan-out) sets a deterministic one
	// (ChildID) so the second insert is ignored.
	ID string
	// Type names the event; handlers register by type.
	Type string
	// Target is an optional routing key the outbox can filter and act on
	// without reading the payload (a delivery's remote host).
	Target string
	// Payload is the event's JSON body.
	Payload json.RawMessage
	// OccurredAt is when the event happened; Enqueue sets now when zero.
	OccurredAt time.Time
	// NotBefore delays the first attempt; zero means as soon as possible.
	NotBefore time.Time
	// Lane orders claims: LaneInteractive (the default) before LaneBulk
	// (see lane.go).
	Lane int
}

// childSpace is the UUID namespace of derived event ids.
var childSpace = uuid.MustParse("6f0d9a3c-4f1e-5b8a-9c61-2d7e0b4a8f15")

// ChildID derives a deterministic event id from a parent event id and a key
// (for a delivery, the target inbox URL): a name-based UUID (v5), so running
// the producer twice yields the same child id.
func ChildID(parentID, key string) string {
	return uuid.NewSHA1(childSpace, []byte(parentID+"\x00"+key)).String()
}

// Now is the clock Enqueue uses; tests of other packages never need to touch
// it because event times are taken from the events themselves when set.
var now = time.Now

const insertEvent = `INSERT INTO event_queue
	(event_id, type, target, payload, status, attempts, next_attempt_at, occurred_at, created_at, updated_at, lane)
	VALUES (?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?)
	ON CONFLICT (event_id) DO NOTHING
	RETURNING id`

// insertNewEvent is insertEvent for an event whose id Enqueue drew at
// random (a version 4 UUID): no row can have it, so it goes without the
// conflict check. Were one ever to, the unique index fails the insert and
// the caller's transaction with it; nothing is lost.
const insertNewEvent = `INSERT INTO event_queue
	(event_id, type, target, payload, status, attempts, next_attempt_at, occurred_at, created_at, updated_at, lane)
	VALUES (?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?)
	RETURNING id`

const insertPayload = `INSERT INTO event_payloads (id, payload) VALUES (?, ?)`

// InlinePayload is the largest payload, in bytes, that Enqueue stores in its
// outbox row. A larger one (an activity's bytes) goes to event_payloads,
// keyed by the row id, so that the row that claiming and settling rewrite
// stays narrow (see migration 0008). Readers resolve either place.
const InlinePayload = 256

// Enqueue inserts events into the outbox inside the caller's transaction. It
// is the only code that inserts outbox rows. It never opens a transaction: the
// events commit or roll back with the caller's data. An event whose id is
// already in the outbox is ignored (conflict-ignore), which makes producers
// with deterministic ids idempotent. Events without an id get a random UUID;
// the ids are written back into the caller's slice.
func Enqueue(ctx context.Context, tx *sql.Tx, events ...Event) error {
	if len(events) == 0 {
		return nil
	}
	observe, _ := ctx.Value(enqueueKey{}).(func(string, int))
	// Several events share one statement prepared in the transaction. One
	// event runs it directly: on PostgreSQL a prepare and its close are a
	// round trip each, and the driver keeps the statement prepared on the
	// connection anyway; on SQLite both ways parse it once.
	//
	// An event given an id is inserted unless one with that id is in
	// the outbox (insertEvent); an id Enqueue drew at random is new, and
	// its insert skips the conflict check (insertNewEvent): on PostgreSQL
	// an insert that may conflict reads the unique index first and writes
	// its row twice (a speculative insertion, then its confirmation).
	var prepared [2]*sql.Stmt
	defer func() {
		for _, st := range prepared {
			if st != nil {
				st.Close()
			}
		}
	}()
	queries := [2]string{insertEvent, insertNewEvent}
	insert := func(fresh bool, args ...any) (int64, error) {
		k := 0
		if fresh {
			k = 1
		}
		var row *sql.Row
		if len(events) == 1 {
			row = tx.QueryRowContext(ctx, queries[k], args...)
		} else {
			if prepared[k] == nil {
				st, err := tx.PrepareContext(ctx, queries[k])
				if err != nil {
					return 0, fmt.Errorf("prepare: %w", err)
				}
				prepared[k] = st
			}
			row = prepared[k].QueryRowContext(ctx, args...)
		}
		var id int64
		err := row.Scan(&id)
		return id, err
	}
	var payloads *sql.Stmt // prepared at the second large payload
	defer func() {
		if payloads != nil {
			payloads.Close()
		}
	}()
	large := 0
	t := now()
	for i := range events {
		ev := &events[i]
		if ev.Type == "" {
			return errors.New("outbox: enqueue: event without a type")
		}
		fresh := ev.ID == ""
		if fresh {
			ev.ID = uuid.NewString()
		} else if _, err := uuid.Parse(ev.ID); err != nil {
			return fmt.Errorf("outbox: enqueue %s: event id %q is not a UUID", ev.Type, ev.ID)
		}
		if ev.OccurredAt.IsZero() {
			ev.OccurredAt = t
		}
		payload := ev.Payload
		if len(payload) == 0 {
			payload = json.RawMessage("{}")
		}
		if !json.Valid(payload) {
			return fmt.Errorf("outbox: enqueue %s: payload is not valid JSON", ev.Type)
		}
		due := t
		if ev.NotBefore.After(due) {
			due = ev.NotBefore
		}
		var target any
		if ev.Target != "" {
			target = ev.Target
		}
		inline := ""
		if len(payload) <= InlinePayload {
			inline = string(payload)
		}
		id, err := insert(fresh, ev.ID, ev.Type, target, inline,
			due.UnixMilli(), ev.OccurredAt.UnixMilli(), t.UnixMilli(), t.UnixMilli(), ev.Lane)
		if errors.Is(err, sql.ErrNoRows) {
			continue // already in the outbox
		}
		if err != nil {
			return fmt.Errorf("outbox: enqueue %s %s: %w", ev.Type, ev.ID, err)
		}
		if inline == "" {
			large++
			if err := insertLarge(ctx, tx, &payloads, large, id, payload); err != nil {
				return fmt.Errorf("outbox: enqueue %s %s: payload: %w", ev.Type, ev.ID, err)
			}
		}
		if observe != nil {
			observe(ev.Type, 1)
		}
	}
	return nil
}

// insertLarge stores the payload of the row id, the n-th large one of its
// enqueue, in event_payloads: the first directly, as a lone event's row, the
// others through *stmt, prepared at the second.
func insertLarge(ctx context.Context, tx *sql.Tx, stmt **sql.Stmt, n int, id int64, payload []byte) error {
	if n == 1 {
		_, err := tx.ExecContext(ctx, insertPayload, id, string(payload))
		return err
	}
	var err error
	if *stmt == nil {
		if *stmt, err = tx.PrepareContext(ctx, insertPayload); err != nil {
			return err
		}
	}
	_, err = (*stmt).ExecContext(ctx, id, string(payload))
	return err
}

type enqueueKey struct{}

// WithEnqueueObserver returns a context under which Enqueue reports every
// event it inserts (not those a conflict ignored) to fn, for metrics. The
// count is taken at insert time: an event whose transaction then rolls back
// has been counted too. fn must not block.
func WithEnqueueObserver(ctx context.Context, fn func(eventType string, n int)) context.Context {
	return context.WithValue(ctx, enqueueKey{}, fn)
}

// Backoff is the retry delay after the attempt-th failed attempt (1-based):
// 5 s doubling per attempt, capped at 300 s. Both buses use it: the db worker
// to reschedule a row, the JetStream consumer to nak with delay.
func Backoff(attempt int) time.Duration {
	const base, ceiling = 5 * time.Second, 300 * time.Second
	if attempt < 1 {
		attempt = 1
	}
	if attempt > 7 { // 5 s << 6 = 320 s is already past the cap
		return ceiling
	}
	return min(base<<(attempt-1), ceiling)
}

// PermanentError marks a failure that no retry can fix: the event is
// dead-lettered at once with this error.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the bus dead-letters the event at once.
func Permanent(err error) error { return &PermanentError{Err: err} }

// DeferError asks the bus to run the event again at Until without spending an
// attempt (a fresh ledger claim held elsewhere, a parked host).
type DeferError struct {
	Until  time.Time
	Reason string
}

func (e *DeferError) Error() string {
	return fmt.Sprintf("deferred until %s: %s", e.Until.UTC().Format(time.RFC3339), e.Reason)
}

// Defer returns an error that reschedules the event at until without spending
// an attempt.
func Defer(until time.Time, reason string) error { return &DeferError{Until: until, Reason: reason} }

// RetryAfterError is a failure that spends an attempt but must not be retried
// before After has passed (a remote's Retry-After): the bus waits the larger of
// After and Backoff(attempt).
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.After)
}
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter wraps err with a lower bound on the next attempt's delay.
func RetryAfter(err error, after time.Duration) error {
	return &RetryAfterError{After: after, Err: err}
}
