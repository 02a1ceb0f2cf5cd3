package admin_test

import (
	"net/http"
	"testing"

	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/outbox"
)

// The event listing shows each row's claim lane.
func TestListEventsShowsLane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bulk := events(1, "delivery.post", "a.example")
	bulk[0].Lane = outbox.LaneBulk
	b.enqueue(bulk...)
	inter := b.enqueue(events(1, "delivery.post", "b.example")...)
	var l admin.EventList
	b.call("GET", "/admin/events?status=pending", http.StatusOK, &l)
	lanes := map[string]string{}
	for _, e := range l.Events {
		lanes[e.EventID] = e.Lane
	}
	if lanes[bulk[0].ID] != "bulk" || lanes[inter[0].ID] != "interactive" || len(lanes) != 2 {
		t.Errorf("lanes %v, want %s bulk and %s interactive", lanes, bulk[0].ID, inter[0].ID)
	}
}
