package delivery

import (
	"strings"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// An activity and its Undo share an order key; activities about one object
// share its id; two actors' Likes of one note do not share one.
func TestOrderKeys(t *testing.T) {
	parse := func(doc string) *activitypub.Activity {
		t.Helper()
		a, err := activitypub.ParseActivity([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	const note = "https://c.example/objects/1"
	like := parse(`{"id":"https://c.example/a/1","type":"Like","actor":"https://c.example/users/alice","object":"` + note + `"}`)
	undo := parse(`{"id":"https://c.example/a/2","type":"Undo","actor":"https://c.example/users/alice","object":
		{"id":"https://c.example/a/1","type":"Like","actor":"https://c.example/users/alice","object":"` + note + `"}}`)
	other := parse(`{"id":"https://c.example/a/3","type":"Like","actor":"https://c.example/users/bob","object":"` + note + `"}`)
	create := parse(`{"id":"https://c.example/a/4","type":"Create","actor":"https://c.example/users/alice","object":{"id":"` + note + `","type":"Note"}}`)
	update := parse(`{"id":"https://c.example/a/5","type":"Update","actor":"https://c.example/users/alice","object":{"id":"` + note + `","type":"Note"}}`)
	del := parse(`{"id":"https://c.example/a/6","type":"Delete","actor":"https://c.example/users/alice","object":"` + note + `"}`)
	accept := parse(`{"id":"https://c.example/a/7","type":"Accept","actor":"https://c.example/users/alice","object":"https://r.example/f/1"}`)

	kl, _ := activitypub.OrderKey(like)
	ku, _ := activitypub.OrderKey(undo)
	ko, _ := activitypub.OrderKey(other)
	if kl == "" || kl != ku || kl == ko {
		t.Errorf("Like %q, its Undo %q, another actor's Like %q", kl, ku, ko)
	}
	for _, c := range []struct {
		act  *activitypub.Activity
		kind string
	}{{create, orderCreate}, {update, orderUpdate}, {del, ""}} {
		if k, kind := activitypub.OrderKey(c.act); k != note || kind != c.kind {
			t.Errorf("%s: key %q kind %q, want %q %q", c.act.Type, k, kind, note, c.kind)
		}
	}
	if k, _ := activitypub.OrderKey(accept); k != "" {
		t.Errorf("Accept has order key %q, want none", k)
	}
}

// The predecessor check reads the order index backwards from the delivery's
// own place and stops after orderScan rows: no scan of the object's
// deliveries and no sort, so an object with 10,000 pending deliveries
// costs each of them the same as one.
func TestOrderGateReadsByIndex(t *testing.T) {
	if storetest.Dialect() != sqldb.SQLite {
		t.Skip("reads SQLite's query plans: SQLite only")
	}
	t.Parallel()
	db := storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
	p := queryPlan(t, db, sqlOrderBefore, HandlerPost, "k", "https://r.example/inbox", 10, orderScan)
	if !strings.Contains(p, "USING INDEX delivery_targets_order") || strings.Contains(p, "TEMP B-TREE") ||
		strings.Contains(p, "SCAN p") || strings.Contains(p, "SCAN q") || strings.Contains(p, "SCAN l") {
		t.Errorf("predecessor plan %q: want the order index, no scan, no sort", p)
	}
}

// queryPlan returns SQLite's plan of query with args, its steps joined by
// "; ".
func queryPlan(t *testing.T, db *sqldb.DB, query string, args ...any) string {
	t.Helper()
	rs, err := db.Read.Query("EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var plan []string
	for rs.Next() {
		var id, parent, notused int
		var detail string
		if err := rs.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}
