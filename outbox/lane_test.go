package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
)

// An interactive row enqueued behind thousands of due bulk rows is in the
// next claim, and bulk rows still get their share of every claim while
// interactive rows keep coming.
func TestClaimOrdersLanes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bulk := make([]outbox.Event, 3000)
	for i := range bulk {
		bulk[i] = outbox.Event{Type: "bulk", Lane: outbox.LaneBulk}
	}
	b.enqueue(t, bulk...)
	b.clock.Advance(time.Second)
	accept := b.enqueue(t, outbox.Event{Type: "accept"})[0]
	q := b.queue()

	rows, err := q.Claim(context.Background(), 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 100 {
		t.Fatalf("claimed %d rows, want 100", len(rows))
	}
	found := false
	for _, r := range rows {
		if r.Event.ID == accept {
			found = true
			if r.Event.Lane != outbox.LaneInteractive {
				t.Errorf("the accept's lane is %d", r.Event.Lane)
			}
		} else if r.Event.Lane != outbox.LaneBulk {
			t.Errorf("bulk row %s claimed with lane %d", r.Event.ID, r.Event.Lane)
		}
	}
	if !found {
		t.Fatal("the interactive row enqueued last is not in the first claim")
	}
	if got := b.row(t, accept); got.Event.Lane != outbox.LaneInteractive || got.Status != outbox.StatusProcessing {
		t.Errorf("accept row = %+v", got)
	}

	inter := make([]outbox.Event, 500)
	for i := range inter {
		inter[i] = outbox.Event{Type: "reply"}
	}
	b.enqueue(t, inter...)
	rows, err = q.Claim(context.Background(), 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lanes := map[int]int{}
	for _, r := range rows {
		lanes[r.Event.Lane]++
	}
	if lanes[outbox.LaneBulk] != 100/outbox.BulkShare || lanes[outbox.LaneInteractive] != 100-100/outbox.BulkShare {
		t.Errorf("claim of 100 with both lanes due: %v, want %d bulk", lanes, 100/outbox.BulkShare)
	}
}
