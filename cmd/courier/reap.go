package main

import (
	"context"

	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
)

// deliveryDone tells the key reaper whether a deleted actor's Delete is
// past delivery: its fan-out ran (or died) and each of its deliveries was
// delivered, given up or drained. Until then the actor's key stays, so
// every delivery still queued is signed.
type deliveryDone struct {
	queue    *outbox.Queue
	delivery *delivery.Service
}

func (d deliveryDone) DeliveryFinished(ctx context.Context, eventID, activityID string) (bool, error) {
	rows, err := d.queue.List(ctx, outbox.Filter{EventID: eventID, Limit: 1})
	if err != nil {
		return false, err
	}
	if len(rows) == 1 && rows[0].Status == outbox.StatusDeadLettered {
		return true, nil // the fan-out died: no delivery waits for the key
	}
	ledger, err := d.queue.Ledger(ctx, eventID)
	if err != nil {
		return false, err
	}
	fanned := false
	for _, e := range ledger {
		fanned = fanned || e.Status == outbox.LedgerDone
	}
	if !fanned {
		// Its row and ledger swept (retention) means long past; else the
		// fan-out has not run yet.
		return len(rows) == 0 && len(ledger) == 0, nil
	}
	const page = 1000
	for after := ""; ; {
		st, err := d.delivery.Status(ctx, activityID, delivery.StatusQuery{After: after, Limit: page})
		if err != nil {
			return false, err
		}
		for _, s := range st {
			switch s.State {
			case delivery.StateDelivered, delivery.StateFailed, delivery.StateDiscarded:
			default:
				return false, nil
			}
		}
		if len(st) < page {
			return true, nil
		}
		after = st[len(st)-1].Inbox
	}
}
