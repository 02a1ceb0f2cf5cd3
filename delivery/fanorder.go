package delivery

import (
	"context"
	"fmt"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
)

// Order of fan-outs (migration 0040). orderGate orders the deliveries of
// one key to one inbox once both activities were fanned out; a delivery
// whose predecessor was not fanned out yet has nothing to wait for. So the
// fan-out of an ordered activity (other than a Create, the first of its
// key) waits, deferred without spending an attempt, while an earlier
// outgoing event of the same order key (event_queue.order_key, set when
// the activity was written) has not been fanned out: its fan-out neither
// done (the ledger's mark, on either bus; on the JetStream bus the row is
// done once relayed) nor given up (dead-lettered; leaveOrder), and its row neither
// swept nor older than orderWaitMax. The earlier fan-out's end in this
// process wakes it.

// sqlFanoutBefore reads the nearest earlier outgoing events of a key (an
// index range read backwards, stopped after a few rows) with what settles
// their fan-out: their row's status and due time, and the fan-out's ledger
// mark.
var sqlFanoutBefore = `SELECT q.event_id, q.status, q.created_at, q.next_attempt_at, q.attempts, q.updated_at,
		l.status, ` + sqlExhausted("q.event_id") + `
	FROM event_queue q
	LEFT JOIN processed_events l ON l.event_id = q.event_id AND l.handler = ?
	WHERE q.order_key = ? AND q.id < (SELECT s.id FROM event_queue s WHERE s.event_id = ?)
	ORDER BY q.id DESC
	LIMIT ?`

// fanoutGate decides whether the fan-out ev of act may run now: nil when
// it may, an outbox.DeferError while an earlier fan-out of the same order
// key is unsettled.
func (s *Service) fanoutGate(ctx context.Context, ev outbox.Event, act *activitypub.Activity) error {
	return s.eventGate(ctx, ev, act, HandlerFanout, "fan-out")
}

// eventGate is fanoutGate for the events handler handles (the fan-outs of
// local activities, or the forwards of inbound ones: each event type's
// order keys are its own, a local object's or a remote one's).
func (s *Service) eventGate(ctx context.Context, ev outbox.Event, act *activitypub.Activity, handler, what string) error {
	key, kind := activitypub.OrderKey(act)
	if key == "" || kind == orderCreate || s.cfg.unordered {
		return nil
	}
	rows, err := s.fanoutBefore.QueryContext(ctx, handler, key, ev.ID, orderScan)
	if err != nil {
		return fmt.Errorf("delivery: order of %s %s: %w", what, ev.ID, err)
	}
	defer rows.Close()
	var w predWait
	w.start(s)
	for rows.Next() {
		var p predecessor
		if err := rows.Scan(&p.id, &p.status, &p.created, &p.next, &p.attempts, &p.updated, &p.ledger, &p.exhausted); err != nil {
			return fmt.Errorf("delivery: order of %s %s: %w", what, ev.ID, err)
		}
		p.settled = p.exhausted
		w.add(p)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("delivery: order of %s %s: %w", what, ev.ID, err)
	}
	return s.deferBehind(ev.ID, w, "waiting for the "+what+" of the earlier activity "+w.first+" of the same object")
}

// leaveOrder takes the given-up fan-out eventID out of its key's order
// (its row's order key is cleared), so that later fan-outs of the key no
// longer wait for it. On the database bus its dead-lettered row says as
// much; on the JetStream bus its row stays done (relayed) while the event
// is dead-lettered in the stream, and only this tells.
func (s *Service) leaveOrder(ctx context.Context, eventID string) {
	_, err := s.db.Write.ExecContext(ctx,
		`UPDATE event_queue SET order_key = NULL WHERE event_id = ? AND order_key IS NOT NULL`, eventID)
	if err != nil {
		s.log.WarnContext(ctx, "delivery: a given-up fan-out still holds later ones of its object",
			"event_id", eventID, "err", err)
	}
}
