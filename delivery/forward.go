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

// HandlerForward handles activitypub.EventForward events.
const HandlerForward = "delivery.forward"

// forward handles an activitypub.EventForward event (an inbound activity
// the inbox forwards, ActivityPub 7.1.2): it resolves the followers of the
// local actors the event names to their inboxes (a host's shared inbox
// once), leaves out the hosts of the activity's actor and of its sender
// and courier's own, and enqueues one EventPost per inbox in one
// transaction, as the fan-out does: ids outbox.ChildID(event, inbox),
// conflict-ignored, so the forward happens once however often the event
// runs. Each POST is signed by the local actor its recipient follows (the
// first named, for an inbox shared by followers of several) and carries
// the activity's bytes exactly as received (store.ForwardDocument).
func (s *Service) forward(ctx context.Context, ev outbox.Event) error {
	var f activitypub.Forward
	if err := json.Unmarshal(ev.Payload, &f); err != nil || f.ActivityID == "" || len(f.Actors) == 0 {
		return outbox.Permanent(fmt.Errorf("%w: forward %s: %v", ErrPayload, ev.ID, err))
	}
	doc, err := s.store.ForwardDocument(ctx, f.ActivityID)
	if errors.Is(err, store.ErrNotFound) {
		return outbox.Permanent(fmt.Errorf("%w: forward %s: the bytes of %s are not kept", ErrPayload, ev.ID, f.ActivityID))
	}
	if err != nil {
		return fmt.Errorf("delivery: forward %s: %w", ev.ID, err)
	}
	act, err := activitypub.ParseActivity(doc)
	if err != nil || act.ID != f.ActivityID {
		return outbox.Permanent(fmt.Errorf("%w: forward %s: the kept bytes are not activity %s: %v", ErrPayload, ev.ID, f.ActivityID, err))
	}
	// Forwards are ordered as fan-outs are: an object's Update or Delete
	// is forwarded after its Create's forward (eventGate), and each of its
	// deliveries goes after the earlier ones of its object to its inbox
	// (orderGate; a Create or Update of an object deleted since is
	// superseded).
	if err := s.eventGate(ctx, ev, act, HandlerForward, "forward"); err != nil {
		return err
	}
	excluded := map[string]bool{}
	for _, u := range append([]string{s.uris.Base}, f.Exclude...) {
		if h, ok := inboxHost(u); ok {
			excluded[h] = true
		}
	}
	byInbox := map[string]*target{}
	signer := map[string]string{}
	for _, uri := range f.Actors {
		actor, err := s.store.ActorByURI(ctx, uri)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted since
		}
		if err != nil {
			return fmt.Errorf("delivery: forward %s: %w", ev.ID, err)
		}
		boxes, err := s.store.DeliveryInboxes(ctx, actor.ID)
		if err != nil {
			return fmt.Errorf("delivery: forward %s: followers of %s: %w", ev.ID, actor.URI, err)
		}
		for _, b := range boxes {
			host, ok := inboxHost(b.URL)
			if !ok || excluded[host] || s.uris.IsLocal(b.URL) || byInbox[b.URL] != nil {
				continue
			}
			byInbox[b.URL] = &target{inbox: b.URL, host: host, recipient: b.Recipient, shared: b.Shared, several: b.Several}
			signer[b.URL] = actor.URI
		}
	}
	targets := interleave(byInbox)
	if len(targets) == 0 {
		s.log.DebugContext(ctx, "delivery: nothing to forward to", "event_id", ev.ID, "activity_id", act.ID)
		return nil
	}
	lane := outbox.LaneInteractive
	if len(targets) > s.cfg.BulkFanout {
		lane = outbox.LaneBulk
	}
	events := make([]outbox.Event, 0, len(targets))
	for _, t := range targets {
		p := Post{Actor: signer[t.inbox], ActivityID: act.ID, Inbox: t.inbox, Forward: true}
		if !t.shared && !t.several {
			p.Recipient = t.recipient
		}
		payload, err := json.Marshal(p)
		if err != nil {
			return outbox.Permanent(fmt.Errorf("delivery: forward %s: encode: %w", ev.ID, err))
		}
		id := outbox.ChildID(ev.ID, t.inbox)
		events = append(events, outbox.Event{
			ID: id, Type: EventPost, Target: t.host, Payload: payload, OccurredAt: ev.OccurredAt, Lane: lane,
		})
	}
	now := s.now().UnixMilli()
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		return s.enqueueDeliveriesTx(ctx, tx, ev.ID, act, targets, events, now)
	})
	if err != nil {
		return fmt.Errorf("delivery: forward %s: %w", ev.ID, err)
	}
	s.log.DebugContext(ctx, "delivery: forwarded", "event_id", ev.ID, "activity_id", act.ID, "inboxes", len(events))
	return nil
}

// forwardSettled is the forward handler: forward, then wake the later
// forwards of the activity's object waiting for this one (eventGate), and
// take a given-up forward out of its key's order.
func (s *Service) forwardSettled(ctx context.Context, ev outbox.Event) error {
	err := s.forward(ctx, ev)
	if err == nil {
		s.wakeWaiters(ev.ID)
		return nil
	}
	if s.givenUp(ctx, err) {
		s.leaveOrder(ctx, ev.ID)
		s.wakeWaiters(ev.ID)
	}
	return err
}
