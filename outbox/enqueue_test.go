package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/courier-ap/courier/outbox"
)

// TestEnqueueManyEvents enqueues, in one call, more events than one
// multi-row insert carries: new ones (some with payloads too large for the
// row, one without an id), ones already in the outbox, and repeats of one
// id within the call. Each new event is one row, in the order given (the
// claim's order, which a fan-out's interleaving by host relies on), with
// its payload where readers find it; the rest are ignored as conflicts and
// not reported to the observer.
func TestEnqueueManyEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parent := "2f0c6a52-3b1e-4d7e-9a0c-5e8f1d2c3b4a"
	child := func(i int) string { return outbox.ChildID(parent, fmt.Sprintf("https://h%d.example/inbox", i)) }
	payload := func(i int) string {
		if i%7 == 0 { // larger than InlinePayload: stored in event_payloads
			return fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("x", outbox.InlinePayload))
		}
		return fmt.Sprintf(`{"n":%d}`, i)
	}
	var before []outbox.Event
	for i := range 10 {
		before = append(before, outbox.Event{ID: child(i * 20), Type: "child", Payload: []byte(payload(i * 20))})
	}
	if err := b.db.Tx(context.Background(), func(tx *sql.Tx) error {
		return outbox.Enqueue(context.Background(), tx, before...)
	}); err != nil {
		t.Fatal(err)
	}
	observed := 0
	ctx := outbox.WithEnqueueObserver(context.Background(), func(_ string, n int) { observed += n })
	var evs, want []outbox.Event
	for i := range 300 {
		ev := outbox.Event{ID: child(i), Type: "child", Payload: []byte(payload(i))}
		evs = append(evs, ev)
		if i%20 != 0 || i >= 20*len(before) {
			want = append(want, ev)
		}
		if i%50 == 3 {
			evs = append(evs, outbox.Event{ID: child(i), Type: "child", Payload: []byte(`{"repeat":true}`)})
		}
	}
	evs = append(evs, outbox.Event{Type: "child", Payload: []byte(`{"n":"no id"}`)})
	if err := b.db.Tx(ctx, func(tx *sql.Tx) error { return outbox.Enqueue(ctx, tx, evs...) }); err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.ID == "" {
		t.Fatal("the event without an id got none written back")
	}
	want = append(want, last)
	if observed != len(want) {
		t.Fatalf("observer saw %d events, want %d", observed, len(want))
	}
	rows, err := b.db.Read.Query(`SELECT q.event_id, COALESCE(p.payload, q.payload) FROM event_queue q
		LEFT JOIN event_payloads p ON p.id = q.id WHERE q.created_at >= 0 ORDER BY q.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]string{}
	var order []string
	for rows.Next() {
		var id, p string
		if err := rows.Scan(&id, &p); err != nil {
			t.Fatal(err)
		}
		got[id] = p
		order = append(order, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(before)+len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(before)+len(want))
	}
	var wantOrder []string
	for _, ev := range append(slices.Clone(before), want...) {
		wantOrder = append(wantOrder, ev.ID)
		if got[ev.ID] != string(ev.Payload) {
			t.Fatalf("event %s: payload %.60q, want %.60q", ev.ID, got[ev.ID], ev.Payload)
		}
	}
	if !slices.Equal(order, wantOrder) {
		t.Fatal("the rows are not in the order the events were given")
	}
}

// Events without ids, whose inserts are deferred in runs (nothing of them
// is read back), keep their place among events that need their insert's
// answer (given ids, large payloads): one call of 200 mixed events makes
// 200 rows in the order given, each payload where readers find it, each
// reported to the observer.
func TestEnqueueKeepsTheOrderOfDeferredRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	observed := 0
	ctx := outbox.WithEnqueueObserver(context.Background(), func(_ string, n int) { observed += n })
	var evs []outbox.Event
	for i := range 200 {
		ev := outbox.Event{Type: "mixed", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		switch {
		case i%9 == 0: // an id given: conflict-checked
			ev.ID = outbox.ChildID("8d1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b", fmt.Sprint(i))
		case i%13 == 0: // too large for the row: event_payloads needs its row id
			ev.Payload = []byte(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("y", outbox.InlinePayload)))
		}
		if i >= 100 && i < 180 { // a run longer than one multi-row insert
			ev.ID, ev.Payload = "", []byte(fmt.Sprintf(`{"n":%d}`, i))
		}
		evs = append(evs, ev)
	}
	if err := b.db.Tx(ctx, func(tx *sql.Tx) error { return outbox.Enqueue(ctx, tx, evs...) }); err != nil {
		t.Fatal(err)
	}
	if observed != len(evs) {
		t.Fatalf("observer saw %d events, want %d", observed, len(evs))
	}
	rows, err := b.db.Read.Query(`SELECT q.event_id, COALESCE(p.payload, q.payload) FROM event_queue q
		LEFT JOIN event_payloads p ON p.id = q.id WHERE q.type = 'mixed' ORDER BY q.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for ; rows.Next(); i++ {
		var id, p string
		if err := rows.Scan(&id, &p); err != nil {
			t.Fatal(err)
		}
		if i >= len(evs) || id != evs[i].ID || p != string(evs[i].Payload) {
			t.Fatalf("row %d: %s %.40q; want event %d in the order given", i, id, p, i)
		}
	}
	if err := rows.Err(); err != nil || i != len(evs) {
		t.Fatalf("%d rows (%v), want %d", i, err, len(evs))
	}
}

// Enqueue counts every row it inserts, whichever statements carry its rows
// (a deferred run of quiet rows, ids drawn here and payloads in the row;
// rows with given ids, conflict-checked; large payloads), in transactions
// of sqldb.DB.Tx and of the pool's own: after each kind of call the counts
// Stats reads are the rows'.
func TestEnqueueCountsWhatItInserts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	q := outbox.NewQueue(b.db.Write, outbox.QueueOptions{Read: b.db.Read})
	given := func(i int) string { return outbox.ChildID("5b0e6a9c-2d1f-4e3a-9b8c-7d6e5f4a3b2c", fmt.Sprint(i)) }
	large := `{"pad":"` + strings.Repeat("z", outbox.InlinePayload) + `"}`
	calls := [][]outbox.Event{
		{{Type: "count.a"}}, // a lone event
		{{Type: "count.a"}, {Type: "count.b"}, {Type: "count.a"}},               // one quiet run, two types
		{{Type: "count.b", ID: given(1)}, {Type: "count.a"}, {Type: "count.c"}}, // quiet after a given id
		{{Type: "count.a"}, {Type: "count.c", ID: given(2)}},                    // ends with a given id
		{{Type: "count.b", ID: given(1)}},                                       // a conflict: nothing
		{{Type: "count.c"}, {Type: "count.c", Payload: []byte(large)}},          // ends with a large payload
	}
	for i, evs := range calls {
		err := b.db.Tx(ctx, func(tx *sql.Tx) error {
			return outbox.Enqueue(ctx, tx, evs...)
		})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// A transaction of the pool's own.
	tx, err := b.db.Write.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Enqueue(ctx, tx, outbox.Event{Type: "count.b"}, outbox.Event{Type: "count.b"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	stats, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"count.a": 5, "count.b": 4, "count.c": 4}
	for typ, n := range want {
		var rows int64
		if err := b.db.Read.QueryRow(`SELECT COUNT(*) FROM event_queue WHERE type = ? AND status = 'pending'`, typ).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != n || stats[outbox.StatusPending][typ] != n {
			t.Errorf("%s: %d rows, counted %d; want %d", typ, rows, stats[outbox.StatusPending][typ], n)
		}
	}
}
