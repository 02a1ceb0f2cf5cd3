package delivery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
)

// Order per (object, inbox), and no resurrection (migration 0032).
//
// The fan-out records on each delivery its order key (orderKey: what the
// activity is about, shared by an activity and its Undo) and its sequence
// (the parent event's outbox row id, the order the activities were
// written in). Before a delivery takes anything of its host (health,
// slot), orderGate looks at its nearest predecessors of the same key to
// the same inbox, by index: while one is unsettled, the delivery is
// deferred without spending an attempt, until about the predecessor's
// next run; the predecessor's settling in this process wakes it sooner.
// A Create or Update whose object has since been deleted is not sent: it
// settles as superseded.

// Delivery states of delivery_targets.state: settled without delivery.
const (
	targetSuperseded = "superseded"
	targetDead       = "dead"
)

// ErrSuperseded is the cause of a delivery settled without being sent: its
// Create or Update's object was deleted before it went.
var ErrSuperseded = errors.New("delivery: superseded: the object was deleted before this delivery went")

// orderScan bounds the predecessors a delivery looks at (nearest first):
// the check costs an index probe and at most this many rows, however many
// deliveries its object has.
const orderScan = 16

// Waiting for a predecessor: a delivery whose predecessor is due at T
// looks again at T + orderSlack (on the JetStream bus, a predecessor
// failing in the stream is due about a backoff after its last failure);
// one whose predecessor's next run is not known (running, or waiting in
// the stream) after orderRecheck; never later than orderRecheckMax.
const (
	orderSlack      = time.Second
	orderRecheck    = 2 * time.Second
	orderRecheckMax = 30 * time.Second
)

// Values of delivery_targets.order_kind: a Create or an Update, which a
// deletion of its object supersedes.
const (
	orderCreate = activitypub.OrderCreate
	orderUpdate = activitypub.OrderUpdate
)

// sqlOrderSelf reads a delivery's own order key, sequence and inbox, its
// state, and for a Create or Update whether its object is deleted.
const sqlOrderSelf = `SELECT m.order_key, m.order_seq, m.inbox, m.state,
		m.order_kind,
		(SELECT o.deleted_at FROM objects o WHERE m.order_kind IS NOT NULL AND o.uri = m.order_key)
	FROM delivery_targets m WHERE m.event_id = ?`

// sqlOrderBefore reads the nearest predecessors of a delivery (same key,
// same inbox, smaller sequence: an index range read backwards, stopped
// after a few rows) with what settles them: their own state, their outbox
// row's status and due time, and their ledger mark (done once the handler
// succeeded, on either bus).
var sqlOrderBefore = `SELECT p.event_id, p.state, p.created_at, q.status, q.next_attempt_at, q.attempts, q.updated_at,
		l.status, ` + sqlExhausted("p.event_id") + `
	FROM delivery_targets p
	LEFT JOIN event_queue q ON q.event_id = p.event_id
	LEFT JOIN processed_events l ON l.event_id = p.event_id AND l.handler = ?
	WHERE p.order_key = ? AND p.inbox = ? AND p.order_seq < ?
	ORDER BY p.order_seq DESC
	LIMIT ?`

// orderGate decides whether delivery ev of activity type typ may go now:
// nil when it may, ErrSuperseded when its object was deleted, or an
// outbox.DeferError while an earlier delivery of the same order key to the
// same inbox is unsettled. A predecessor is settled when it was delivered
// or superseded (its ledger mark is done), given up (dead-lettered, or
// state dead), discarded or swept (no row), or older than orderWaitMax. A
// Create has no predecessor: nothing is written about an object before it.
func (s *Service) orderGate(ctx context.Context, ev outbox.Event) error {
	if s.cfg.unordered {
		return nil
	}
	var (
		key, inbox, state, kind sql.NullString
		seq, deleted            sql.NullInt64
	)
	err := s.orderSelf.QueryRowContext(ctx, ev.ID).Scan(&key, &seq, &inbox, &state, &kind, &deleted)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil // no record of it (swept): nothing to order it by
	case err != nil:
		return fmt.Errorf("delivery: order of %s: %w", ev.ID, err)
	case deleted.Valid || state.String == targetSuperseded:
		return ErrSuperseded
	case !key.Valid || !seq.Valid || kind.String == orderCreate:
		return nil
	}
	rows, err := s.orderBefore.QueryContext(ctx, HandlerPost, key.String, inbox.String, seq.Int64, orderScan)
	if err != nil {
		return fmt.Errorf("delivery: order of %s: %w", ev.ID, err)
	}
	defer rows.Close()
	var w predWait
	w.start(s)
	for rows.Next() {
		var (
			p      predecessor
			pState sql.NullString
		)
		if err := rows.Scan(&p.id, &pState, &p.created, &p.status, &p.next, &p.attempts, &p.updated, &p.ledger, &p.exhausted); err != nil {
			return fmt.Errorf("delivery: order of %s: %w", ev.ID, err)
		}
		// A state of its own (superseded, dead) or no outbox row (discarded,
		// swept) settles it too.
		p.settled = pState.Valid || !p.status.Valid || p.exhausted
		w.add(p)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("delivery: order of %s: %w", ev.ID, err)
	}
	return s.deferBehind(ev.ID, w, "waiting for the earlier delivery "+w.first+" of the same object to the same inbox")
}

// predecessor is an earlier event of the same order key (a delivery to
// the same inbox, or a fan-out) as the gates read it: its outbox row's
// status, due time, failures and last change, and its ledger mark.
type predecessor struct {
	id, status, ledger               sql.NullString
	created, next, attempts, updated sql.NullInt64
	exhausted                        bool // given up by JetStream (sqlExhausted)
	settled                          bool // settled by its own record
}

// sqlExhausted is the gates' column that says a predecessor (its event id
// the column eventID) was given up
// on the JetStream bus: its message exhausted its deliveries (or was
// terminated) without its handler settling it, recorded by package
// natsbus, and no replay asked for since. Without it such an event, done
// in its row (relayed) and never marked done in the ledger, would hold the
// later ones of its key until orderWaitMax.
func sqlExhausted(eventID string) string {
	return `EXISTS (SELECT 1 FROM jetstream_exhausted x WHERE x.event_id = ` + eventID + `
		AND x.replay_requested_at IS NULL AND x.replayed_at IS NULL)`
}

// predWait gathers the unsettled predecessors of one event: the nearest
// (first) and when to look again (until).
type predWait struct {
	now    time.Time
	oldest int64
	first  string
	until  time.Time
}

func (w *predWait) start(s *Service) {
	w.now = s.now()
	w.oldest = w.now.Add(-s.orderWaitMax()).UnixMilli()
}

// add takes one predecessor. It is settled when delivered or fanned out
// (its ledger mark is done, on either bus), dead-lettered, settled by its
// own record, or older than orderWaitMax; otherwise the event waits for
// it until about its next run.
func (w *predWait) add(p predecessor) {
	if p.settled || p.ledger.String == outbox.LedgerDone || p.status.String == outbox.StatusDeadLettered ||
		p.created.Int64 < w.oldest {
		return
	}
	if w.first == "" {
		w.first = p.id.String
	}
	in := orderRecheck
	switch {
	case p.status.String == outbox.StatusPending && p.next.Valid:
		in = max(time.UnixMilli(p.next.Int64).Sub(w.now), 0) + orderSlack
	case p.status.String == outbox.StatusDone && p.attempts.Int64 > 0 && p.updated.Valid:
		// Published to JetStream and failing there: its row counts the
		// failures (the last at updated_at), its next try comes about a
		// backoff later.
		retry := time.UnixMilli(p.updated.Int64).Add(outbox.Backoff(int(p.attempts.Int64)))
		in = max(retry.Sub(w.now)+orderSlack, orderRecheck)
	}
	if at := w.now.Add(min(in, orderRecheckMax)); at.After(w.until) {
		w.until = at
	}
}

// deferBehind is nil when event id has no unsettled predecessor in w, and
// otherwise a deferral until w.until (no attempt spent), remembered so that
// the nearest predecessor's settling in this process wakes it sooner.
func (s *Service) deferBehind(id string, w predWait, reason string) error {
	if w.first == "" {
		return nil
	}
	s.order.wait(w.first, id)
	s.cfg.Metrics.OrderWait()
	return outbox.Defer(w.until, reason)
}

// orderWaitMax is the age past which a predecessor is no longer waited
// for: by then it was dead-lettered (its attempts, or ParkMax parked), and
// one whose settling went unseen (its records swept) holds nothing back.
func (s *Service) orderWaitMax() time.Duration { return s.cfg.ParkMax + 24*time.Hour }

// supersede settles delivery eventID as superseded: its state is kept (the
// admin views show it) and counted; the outbox row is done.
func (s *Service) supersede(ctx context.Context, p Post, eventID, host string) error {
	if err := s.setTargetState(ctx, eventID, targetSuperseded); err != nil {
		return err
	}
	s.cfg.Metrics.Superseded()
	s.log.InfoContext(ctx, "delivery: superseded: the object was deleted before this delivery went",
		"event_id", eventID, "activity_id", p.ActivityID, "inbox", p.Inbox, "host", host)
	return nil
}

// setTargetState records that delivery eventID settled without delivery.
func (s *Service) setTargetState(ctx context.Context, eventID, state string) error {
	_, err := s.db.Write.ExecContext(ctx, `UPDATE delivery_targets SET state = ? WHERE event_id = ?`, state, eventID)
	if err != nil {
		return fmt.Errorf("delivery: %s %s: %w", state, eventID, err)
	}
	return nil
}

// Superseded reports whether delivery eventID settled as superseded (not
// sent: its object was deleted before it went).
func (s *Service) Superseded(ctx context.Context, eventID string) (bool, error) {
	var st sql.NullString
	err := s.db.Read.QueryRowContext(ctx, `SELECT state FROM delivery_targets WHERE event_id = ?`, eventID).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delivery: state of %s: %w", eventID, err)
	}
	return st.String == targetSuperseded, nil
}

// orderWaiters remembers, in this process, the deliveries waiting for a
// predecessor, so that the predecessor's settling here makes them due at
// once (others look again on their own, see orderRecheck).
type orderWaiters struct {
	mu sync.Mutex
	m  map[string][]string // predecessor event id -> waiting event ids
}

// maxOrderWaiters bounds the map; when full it is cleared, which only
// costs the waiting deliveries their recheck.
const maxOrderWaiters = 100_000

func (o *orderWaiters) wait(pred, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil || len(o.m) >= maxOrderWaiters {
		o.m = map[string][]string{}
	}
	for _, w := range o.m[pred] {
		if w == id {
			return
		}
	}
	o.m[pred] = append(o.m[pred], id)
}

// settled returns and forgets the deliveries waiting for pred.
func (o *orderWaiters) settled(pred string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	ws := o.m[pred]
	delete(o.m, pred)
	return ws
}

// wakeWaiters queues the rows of the deliveries waiting for eventID, which
// settled, for release (with the landed flights', releaseLanded).
func (s *Service) wakeWaiters(eventID string) {
	ws := s.order.settled(eventID)
	if len(ws) == 0 {
		return
	}
	fs := s.flights
	fs.mu.Lock()
	for _, id := range ws {
		fs.toRelease[id] = releaseTries
	}
	fs.mu.Unlock()
}
