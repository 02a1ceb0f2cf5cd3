package delivery

import (
	"strings"
	"testing"

	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// TestFanoutGateReadsByIndex: the earlier fan-outs of a key are read
// through the order index of the outbox (event_queue_order) and the event's
// own row by its event id: no scan of the outbox, no sort, however many
// events it holds.
func TestFanoutGateReadsByIndex(t *testing.T) {
	if storetest.Dialect() != sqldb.SQLite {
		t.Skip("reads SQLite's query plans: SQLite only")
	}
	t.Parallel()
	db := storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
	p := queryPlan(t, db, sqlFanoutBefore, HandlerFanout, "k", "e", orderScan)
	if !strings.Contains(p, "USING INDEX event_queue_order") || strings.Contains(p, "TEMP B-TREE") ||
		strings.Contains(p, "SCAN q") || strings.Contains(p, "SCAN s") || strings.Contains(p, "SCAN l") {
		t.Errorf("earlier fan-outs plan %q: want the order index, no scan, no sort", p)
	}
}
