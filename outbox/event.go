package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/courier-ap/courier/sqldb"
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
	// OrderKey is the order key of an outgoing activity's event (what the
	// activity is about, activitypub.OrderKey), kept indexed in its row so
	// that its handler can find the earlier events of the same key; empty
	// for other events.
	OrderKey string
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
	(event_id, type, target, payload, status, attempts, next_attempt_at, occurred_at, created_at, updated_at, lane, order_key)
	VALUES (?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (event_id) DO NOTHING
	RETURNING id`

// insertNewEvent is insertEvent for an event whose id Enqueue drew at
// random (a version 4 UUID): no row can have it, so it goes without the
// conflict check (on PostgreSQL an insert that may conflict reads the
// unique index first and writes its row twice: a speculative insertion,
// then its confirmation). Were one ever to, the unique index fails the
// insert and the caller's transaction with it; nothing is lost.
const insertNewEvent = `INSERT INTO event_queue
	(event_id, type, target, payload, status, attempts, next_attempt_at, occurred_at, created_at, updated_at, lane, order_key)
	VALUES (?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?, ?)
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
	t := now()
	rows := make([]enqueued, 0, len(events))
	var seen map[string]bool // ids of this call, when it has several events
	if len(events) > 1 {
		seen = make(map[string]bool, len(events))
	}
	for i := range events {
		ev := &events[i]
		r, err := enqueueArgs(ev, t)
		if err != nil {
			return err
		}
		if seen != nil {
			if seen[ev.ID] {
				continue // the second of one id: ignored as a conflict would
			}
			seen[ev.ID] = true
		}
		rows = append(rows, r)
	}
	e := enqueuer{ctx: ctx, tx: tx, observe: observe}
	defer e.close()
	// The rows go in their order, in runs of one kind of at most
	// enqueueChunk rows. A run of quiet rows (an id drawn here, a payload
	// kept inline: nothing of their insert is read back) is one deferred
	// multi-row insert, which PostgreSQL's driver sends with the
	// transaction's next round trip, often its COMMIT. Other rows need their
	// insert's answer (was the id new, which row id holds the large
	// payload): a full run is one multi-row insert, a shorter one goes row
	// by row. A statement's fixed cost (the driver's and, on PostgreSQL, a
	// round trip) is so paid once per run instead of once per row.
	several := len(rows) > 1
	for len(rows) > 0 {
		quiet := rows[0].quiet()
		n := 1
		for n < len(rows) && n < enqueueChunk && rows[n].quiet() == quiet {
			n++
		}
		run := rows[:n]
		rows = rows[n:]
		var err error
		switch {
		case quiet:
			err = e.insertQuiet(run)
		case n == enqueueChunk:
			err = e.insertChunk(run)
		default:
			for i := range run {
				if err = e.insertOne(&run[i], several); err != nil {
					break
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return e.count()
}

// enqueueChunk is how many rows one multi-row insert of Enqueue carries
// (12 arguments each, well inside both stores' bounds).
const enqueueChunk = 64

// insertEvents inserts enqueueChunk rows at once; it returns the id and
// event id of each row inserted (not of those a conflict ignored), in no
// particular order.
var insertEvents = `INSERT INTO event_queue
	(event_id, type, target, payload, status, attempts, next_attempt_at, occurred_at, created_at, updated_at, lane, order_key)
	VALUES ` + strings.TrimSuffix(strings.Repeat(`(?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?, ?), `, enqueueChunk), ", ") + `
	ON CONFLICT (event_id) DO NOTHING
	RETURNING id, event_id`

// insertQuietPrefix begins the deferred insert of n quiet rows, followed
// by n tuples of quietTuple: no conflict check (their ids were drawn here,
// as for insertNewEvent) and nothing returned.
const (
	insertQuietPrefix = sqldb.Deferred + `INSERT INTO event_queue
	(event_id, type, target, payload, status, attempts, next_attempt_at, occurred_at, created_at, updated_at, lane, order_key)
	VALUES `
	quietTuple = `(?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?, ?)`
)

// insertQuiet returns the deferred insert of n quiet rows.
func insertQuiet(n int) string {
	var b strings.Builder
	b.Grow(len(insertQuietPrefix) + n*(len(quietTuple)+2))
	b.WriteString(insertQuietPrefix)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quietTuple)
	}
	return b.String()
}

// insertQuietOne is insertQuiet(1), the statement of a lone event.
var insertQuietOne = insertQuiet(1)

// enqueued is one event of Enqueue with its row's arguments.
type enqueued struct {
	ev      *Event
	args    []any // insertEvent's
	payload []byte
	large   bool // the payload goes to event_payloads
	fresh   bool // the id was drawn here (insertNewEvent)
}

// quiet reports whether nothing of r's insert needs reading back: its id
// was drawn here (no conflict to learn of) and its payload stays in the row
// (no row id to key event_payloads by).
func (r *enqueued) quiet() bool { return r.fresh && !r.large }

// enqueueArgs checks ev, gives it an id and a time when it has none, and
// returns its row's arguments.
func enqueueArgs(ev *Event, t time.Time) (enqueued, error) {
	if ev.Type == "" {
		return enqueued{}, errors.New("outbox: enqueue: event without a type")
	}
	fresh := ev.ID == ""
	if fresh {
		ev.ID = uuid.NewString()
	} else if _, err := uuid.Parse(ev.ID); err != nil {
		return enqueued{}, fmt.Errorf("outbox: enqueue %s: event id %q is not a UUID", ev.Type, ev.ID)
	}
	if ev.OccurredAt.IsZero() {
		ev.OccurredAt = t
	}
	payload := ev.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("{}")
	}
	if !json.Valid(payload) {
		return enqueued{}, fmt.Errorf("outbox: enqueue %s: payload is not valid JSON", ev.Type)
	}
	due := t
	if ev.NotBefore.After(due) {
		due = ev.NotBefore
	}
	var target any
	if ev.Target != "" {
		target = ev.Target
	}
	var orderKey any
	if ev.OrderKey != "" {
		orderKey = ev.OrderKey
	}
	inline := ""
	if len(payload) <= InlinePayload {
		inline = string(payload)
	}
	return enqueued{ev: ev, payload: payload, large: inline == "", fresh: fresh,
		args: []any{ev.ID, ev.Type, target, inline, due.UnixMilli(), ev.OccurredAt.UnixMilli(), t.UnixMilli(), t.UnixMilli(), ev.Lane, orderKey}}, nil
}

// enqueuer runs the inserts of one Enqueue, with the statements it
// prepared in the transaction.
type enqueuer struct {
	ctx     context.Context
	tx      *sql.Tx
	observe func(string, int)

	one      [2]*sql.Stmt // insertEvent, insertNewEvent
	chunk    *sql.Stmt
	payloads *sql.Stmt
	large    int // large payloads stored so far

	// counted are the rows inserted so far, by type, in first-seen order:
	// Enqueue appends their counts to event_queue_count_deltas (count).
	counted []typeCount
}

// typeCount is a number of rows of one event type.
type typeCount struct {
	typ string
	n   int64
}

// inserted1 counts one more row of type typ and reports it to the observer.
func (e *enqueuer) inserted1(typ string) {
	if e.observe != nil {
		e.observe(typ, 1)
	}
	for i := range e.counted {
		if e.counted[i].typ == typ {
			e.counted[i].n++
			return
		}
	}
	e.counted = append(e.counted, typeCount{typ, 1})
}

// insertCounts begins the append of an enqueue's counts, one tuple per type.
const insertCounts = sqldb.Deferred + `INSERT INTO event_queue_count_deltas (status, type, n) VALUES `

// count appends the counts of the rows inserted to event_queue_count_deltas
// in the caller's transaction (migration 0020): deferred, so on PostgreSQL it
// goes with the COMMIT. A trigger used to count each row; Enqueue is the only
// code that inserts outbox rows, so counting here is as exact and cheaper.
func (e *enqueuer) count() error {
	if len(e.counted) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString(insertCounts)
	args := make([]any, 0, 2*len(e.counted))
	for i, c := range e.counted {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("('pending', ?, ?)")
		args = append(args, c.typ, c.n)
	}
	if _, err := e.tx.ExecContext(e.ctx, b.String(), args...); err != nil {
		return fmt.Errorf("outbox: enqueue: count: %w", err)
	}
	return nil
}

func (e *enqueuer) close() {
	for _, st := range []*sql.Stmt{e.one[0], e.one[1], e.chunk, e.payloads} {
		if st != nil {
			_ = st.Close()
		}
	}
}

// insertOne inserts r alone: an event given an id unless one with that id
// is in the outbox (insertEvent), one whose id was drawn here without the
// conflict check (insertNewEvent). When the call has several such rows
// they share the statement prepared in the transaction; a lone event runs
// it directly: on PostgreSQL a prepare and its close are a round trip
// each, and the driver keeps the statement prepared on the connection
// anyway; on SQLite both ways parse it once.
func (e *enqueuer) insertOne(r *enqueued, several bool) error {
	k, query := 0, insertEvent
	if r.fresh {
		k, query = 1, insertNewEvent
	}
	var row *sql.Row
	switch {
	case !several:
		row = e.tx.QueryRowContext(e.ctx, query, r.args...)
	default:
		if e.one[k] == nil {
			st, err := e.tx.PrepareContext(e.ctx, query)
			if err != nil {
				return fmt.Errorf("outbox: prepare enqueue: %w", err)
			}
			e.one[k] = st
		}
		row = e.one[k].QueryRowContext(e.ctx, r.args...)
	}
	var id int64
	err := row.Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // already in the outbox
	}
	if err != nil {
		return fmt.Errorf("outbox: enqueue %s %s: %w", r.ev.Type, r.ev.ID, err)
	}
	return e.inserted(r, id)
}

// insertChunk inserts enqueueChunk rows in one statement.
func (e *enqueuer) insertChunk(rs []enqueued) error {
	if e.chunk == nil {
		st, err := e.tx.PrepareContext(e.ctx, insertEvents)
		if err != nil {
			return fmt.Errorf("outbox: prepare enqueue: %w", err)
		}
		e.chunk = st
	}
	args := make([]any, 0, len(rs)*len(rs[0].args))
	byID := make(map[string]*enqueued, len(rs))
	for i := range rs {
		args = append(args, rs[i].args...)
		byID[rs[i].ev.ID] = &rs[i]
	}
	res, err := e.chunk.QueryContext(e.ctx, args...)
	if err != nil {
		return fmt.Errorf("outbox: enqueue %d events: %w", len(rs), err)
	}
	type done struct {
		r  *enqueued
		id int64
	}
	ins := make([]done, 0, len(rs))
	for res.Next() {
		var (
			id      int64
			eventID string
		)
		if err := res.Scan(&id, &eventID); err != nil {
			res.Close()
			return fmt.Errorf("outbox: enqueue %d events: %w", len(rs), err)
		}
		if r := byID[eventID]; r != nil {
			ins = append(ins, done{r, id})
		}
	}
	if err := res.Err(); err != nil {
		res.Close()
		return fmt.Errorf("outbox: enqueue %d events: %w", len(rs), err)
	}
	if err := res.Close(); err != nil {
		return fmt.Errorf("outbox: enqueue %d events: %w", len(rs), err)
	}
	for _, d := range ins {
		if err := e.inserted(d.r, d.id); err != nil {
			return err
		}
	}
	return nil
}

// insertQuiet inserts quiet rows (enqueued.quiet) in one deferred
// statement.
func (e *enqueuer) insertQuiet(rs []enqueued) error {
	query := insertQuietOne
	if len(rs) > 1 {
		query = insertQuiet(len(rs))
	}
	args := rs[0].args
	if len(rs) > 1 {
		args = make([]any, 0, len(rs)*len(rs[0].args))
		for i := range rs {
			args = append(args, rs[i].args...)
		}
	}
	if _, err := e.tx.ExecContext(e.ctx, query, args...); err != nil {
		if len(rs) == 1 {
			return fmt.Errorf("outbox: enqueue %s %s: %w", rs[0].ev.Type, rs[0].ev.ID, err)
		}
		return fmt.Errorf("outbox: enqueue %d events: %w", len(rs), err)
	}
	for i := range rs {
		e.inserted1(rs[i].ev.Type)
	}
	return nil
}

// inserted stores the large payload of r, inserted as row id, and reports
// the event to the observer.
func (e *enqueuer) inserted(r *enqueued, id int64) error {
	if r.large {
		e.large++
		if err := insertLarge(e.ctx, e.tx, &e.payloads, e.large, id, r.payload); err != nil {
			return fmt.Errorf("outbox: enqueue %s %s: payload: %w", r.ev.Type, r.ev.ID, err)
		}
	}
	e.inserted1(r.ev.Type)
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
