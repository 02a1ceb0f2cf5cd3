package delivery

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/courier-ap/courier/outbox"
)

// Outcomes is told, in a transaction of its own per settled delivery, of
// the deliveries of local activities that settled: a dead-lettered one
// at once, and an activity's last one once all its deliveries were
// delivered. Package app/webhook implements it.
type Outcomes interface {
	// WantsOutcomes reports whether outcomes are wanted now (an endpoint
	// takes delivery events); when not, delivering costs nothing more.
	WantsOutcomes(ctx context.Context) bool
	// Settled is called in tx, which recorded the outcome; an error rolls
	// it back and the delivery is run again.
	Settled(ctx context.Context, tx *sql.Tx, o Outcome) error
}

// Outcome is a settled delivery, or the completed delivery of an
// activity.
type Outcome struct {
	ActorID    int64
	ActorName  string
	ActivityID string
	// Dead is a dead-lettered delivery to Inbox (EventID), for Error;
	// otherwise every one of the activity's Inboxes deliveries was
	// delivered.
	Dead    bool
	EventID string
	Inbox   string
	Error   string
	Inboxes int
}

// Outcome values of delivery_outcomes.
const (
	settledDelivered = "delivered"
	settledDead      = "dead"
)

// deliverSettled is the EventPost handler: deliver, then tell
// Config.Outcomes of a delivery that settled (delivered, or dead: a
// permanent failure, or a failure on the last attempt).
func (s *Service) deliverSettled(ctx context.Context, ev outbox.Event) error {
	err := s.deliver(ctx, ev)
	if errors.Is(err, ErrSuperseded) {
		var p Post
		_ = json.Unmarshal(ev.Payload, &p)
		if err := s.supersede(ctx, p, ev.ID, ev.Target); err != nil {
			return err
		}
		s.wakeWaiters(ev.ID)
		return nil
	}
	var def *outbox.DeferError
	var perm *outbox.PermanentError
	outcome := ""
	switch {
	case err == nil:
		outcome = settledDelivered
	case errors.As(err, &def), ctx.Err() != nil:
		return err
	case errors.As(err, &perm), outbox.Attempt(ctx) >= s.cfg.MaxAttempts:
		outcome = settledDead
		// Given up: the deliveries after it of its object to its inbox
		// no longer wait for it, on either bus (order.go).
		if serr := s.setTargetState(ctx, ev.ID, targetDead); serr != nil {
			s.log.WarnContext(ctx, "delivery: dead state not recorded", "event_id", ev.ID, "err", serr)
		}
	default:
		return err
	}
	s.wakeWaiters(ev.ID)
	if s.cfg.Outcomes == nil || !s.cfg.Outcomes.WantsOutcomes(ctx) {
		return err
	}
	var p Post
	if json.Unmarshal(ev.Payload, &p) != nil || p.ActivityID == "" {
		return err
	}
	if serr := s.settle(ctx, ev.ID, p, outcome, err); serr != nil {
		s.log.WarnContext(ctx, "delivery: outcome not recorded; the delivery runs again", "event_id", ev.ID, "err", serr)
		if err == nil {
			return serr
		}
	}
	return err
}

// settle records the outcome of delivery eventID of p in one transaction
// and tells Config.Outcomes: a dead one at once, a delivered one when it
// was the activity's last. The activity's row is locked first, so that of
// two last deliveries settling at once on PostgreSQL the second sees the
// first's row.
func (s *Service) settle(ctx context.Context, eventID string, p Post, outcome string, cause error) error {
	lock := `SELECT a.actor_id, c.name FROM activities a JOIN actors c ON c.id = a.actor_id WHERE a.uri = ?`
	if s.db.Postgres() {
		lock += ` FOR NO KEY UPDATE OF a`
	}
	return s.db.Tx(ctx, func(tx *sql.Tx) error {
		o := Outcome{ActivityID: p.ActivityID, EventID: eventID, Inbox: p.Inbox}
		err := tx.QueryRowContext(ctx, lock, p.ActivityID).Scan(&o.ActorID, &o.ActorName)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // not a local actor's stored activity
		}
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO delivery_outcomes (event_id, activity_id, outcome, settled_at)
			VALUES (?, ?, ?, ?) ON CONFLICT (event_id) DO NOTHING`, eventID, p.ActivityID, outcome, s.now().UnixMilli())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // settled before: told then
		}
		if outcome == settledDead {
			o.Dead = true
			if cause != nil {
				o.Error = cause.Error()
			}
			return s.cfg.Outcomes.Settled(ctx, tx, o)
		}
		var total, delivered int
		err = tx.QueryRowContext(ctx, `UPDATE delivery_outcome_counts SET delivered = delivered + 1, updated_at = ?
			WHERE activity_id = ? RETURNING total, delivered`, s.now().UnixMilli(), p.ActivityID).Scan(&total, &delivered)
		if errors.Is(err, sql.ErrNoRows) {
			// The activity's first outcome (its row is locked above).
			if err = tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM delivery_targets WHERE activity_id = ?`,
				p.ActivityID).Scan(&total); err != nil {
				return fmt.Errorf("count deliveries of %s: %w", p.ActivityID, err)
			}
			delivered = 1
			_, err = tx.ExecContext(ctx, `INSERT INTO delivery_outcome_counts (activity_id, total, delivered, updated_at)
				VALUES (?, ?, ?, ?)`, p.ActivityID, total, delivered, s.now().UnixMilli())
		}
		if err != nil {
			return fmt.Errorf("count outcomes of %s: %w", p.ActivityID, err)
		}
		if total == 0 || delivered < total {
			return nil
		}
		o.Inboxes = total
		return s.cfg.Outcomes.Settled(ctx, tx, o)
	})
}
