package delivery

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// Outcomes is told, in a transaction of its own per settled delivery, of
// the deliveries of local activities that settled: a dead-lettered one
// at once, and an activity's last one once all its deliveries were
// delivered. The application's notifications of them implement it.
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
	// Superseded is how many of the completed activity's deliveries were
	// not sent because its object was deleted first (order.go); Inboxes
	// counts the others, which were delivered.
	Superseded int
}

// Outcome values of delivery_outcomes.
const (
	settledDelivered  = "delivered"
	settledDead       = "dead"
	settledSuperseded = "superseded" // settles like a delivered one, unsent
)

// fanoutSettled is the fan-out handler: fan out, and when the fan-out is
// given up for good (nothing left to deliver to, or its last attempt
// failed), settle the activity's delivery dead as a dead POST is
// (giveUp).
func (s *Service) fanoutSettled(ctx context.Context, ev outbox.Event) error {
	err := s.fanout(ctx, ev)
	if err == nil {
		s.wakeWaiters(ev.ID) // later fan-outs of its key (fanoutGate)
	}
	if !s.givenUp(ctx, err) {
		return err
	}
	s.leaveOrder(ctx, ev.ID)
	s.wakeWaiters(ev.ID)
	var out activitypub.Outgoing
	if json.Unmarshal(ev.Payload, &out) != nil {
		return err
	}
	act, perr := activitypub.ParseActivity(out.Activity)
	if perr != nil {
		return err
	}
	inbox := act.ObjectID
	if act.Type != "Follow" {
		inbox = ""
	}
	s.giveUp(ctx, ev.ID, Post{Actor: out.Actor, ActivityID: act.ID, Inbox: inbox}, err)
	return err
}

// givenUp reports whether a handler's err ends its event for good: a
// permanent failure, or a failure on the last attempt.
func (s *Service) givenUp(ctx context.Context, err error) bool {
	var def *outbox.DeferError
	var perm *outbox.PermanentError
	switch {
	case err == nil, errors.As(err, &def), ctx.Err() != nil:
		return false
	}
	return errors.As(err, &perm) || outbox.Attempt(ctx) >= s.cfg.MaxAttempts
}

// giveUp settles delivery eventID of p dead: the pending follow of a
// Follow is removed (store.GiveUpFollow), so that the actor may send a new
// one, and Config.Outcomes is told (delivery.dead). A failure here is
// logged: the event is dead either way.
func (s *Service) giveUp(ctx context.Context, eventID string, p Post, cause error) {
	if removed, err := s.store.GiveUpFollow(ctx, p.ActivityID); err != nil {
		s.log.WarnContext(ctx, "delivery: the pending follow of a dead Follow was not removed",
			"event_id", eventID, "activity_id", p.ActivityID, "err", err)
	} else if removed {
		s.log.InfoContext(ctx, "delivery: a Follow was given up; its pending follow is removed",
			"event_id", eventID, "activity_id", p.ActivityID, "err", cause)
	}
	if s.cfg.Outcomes == nil || !s.cfg.Outcomes.WantsOutcomes(ctx) {
		return
	}
	if err := s.settle(ctx, eventID, p, settledDead, cause); err != nil {
		s.log.WarnContext(ctx, "delivery: a dead delivery's outcome was not recorded",
			"event_id", eventID, "activity_id", p.ActivityID, "err", err)
	}
}

// deliverSettled is the EventPost handler: deliver, then tell
// Config.Outcomes of a delivery that settled (delivered, or dead: a
// permanent failure, or a failure on the last attempt).
func (s *Service) deliverSettled(ctx context.Context, ev outbox.Event) error {
	err := s.deliver(ctx, ev)
	var p Post
	_ = json.Unmarshal(ev.Payload, &p)
	if errors.Is(err, ErrSuperseded) {
		if err := s.supersede(ctx, p, ev.ID, ev.Target); err != nil {
			return err
		}
		s.wakeWaiters(ev.ID)
		if p.ActivityID == "" || s.cfg.Outcomes == nil || !s.cfg.Outcomes.WantsOutcomes(ctx) {
			return nil
		}
		// A superseded delivery is over too: the activity's last
		// settled delivery still completes it (delivery.completed).
		if serr := s.settle(ctx, ev.ID, p, settledSuperseded, nil); serr != nil {
			s.log.WarnContext(ctx, "delivery: outcome not recorded; the delivery runs again", "event_id", ev.ID, "err", serr)
			return serr
		}
		return nil
	}
	var def *outbox.DeferError
	switch {
	case errors.As(err, &def), ctx.Err() != nil:
		return err
	case s.givenUp(ctx, err):
		// Given up: the deliveries after it of its object to its inbox
		// no longer wait for it, on either bus (order.go).
		if serr := s.setTargetState(ctx, ev.ID, targetDead); serr != nil {
			s.log.WarnContext(ctx, "delivery: dead state not recorded", "event_id", ev.ID, "err", serr)
		}
		s.wakeWaiters(ev.ID)
		if p.ActivityID != "" {
			s.giveUp(ctx, ev.ID, p, err)
		}
		return err
	case err != nil:
		return err
	}
	s.wakeWaiters(ev.ID)
	if p.ActivityID == "" || s.cfg.Outcomes == nil || !s.cfg.Outcomes.WantsOutcomes(ctx) {
		return nil
	}
	if serr := s.settle(ctx, ev.ID, p, settledDelivered, nil); serr != nil {
		s.log.WarnContext(ctx, "delivery: outcome not recorded; the delivery runs again", "event_id", ev.ID, "err", serr)
		return serr
	}
	return nil
}

// settle records the outcome of delivery eventID of p in one transaction
// and tells Config.Outcomes: a dead one at once, a delivered one when it
// was the activity's last. The activity's row is locked first, so that of
// two last deliveries settling at once on PostgreSQL the second sees the
// first's row.
func (s *Service) settle(ctx context.Context, eventID string, p Post, outcome string, cause error) error {
	return s.db.Tx(ctx, func(tx *sql.Tx) error {
		o := Outcome{ActivityID: p.ActivityID, EventID: eventID, Inbox: p.Inbox}
		var err error
		o.ActorID, o.ActorName, err = s.store.LockActivityActorTx(ctx, tx, p.ActivityID)
		if errors.Is(err, store.ErrNotFound) {
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
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM delivery_outcomes WHERE activity_id = ? AND outcome = ?`,
			p.ActivityID, settledSuperseded).Scan(&o.Superseded); err != nil {
			return fmt.Errorf("count superseded deliveries of %s: %w", p.ActivityID, err)
		}
		o.Inboxes = total - o.Superseded
		return s.cfg.Outcomes.Settled(ctx, tx, o)
	})
}
