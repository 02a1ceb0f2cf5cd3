package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/sqlite"
)

// bigPayload is a JSON payload longer than outbox.InlinePayload.
func bigPayload(n int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"n":%d,"content":%q}`, n, strings.Repeat("x", outbox.InlinePayload)))
}

// A payload larger than InlinePayload is stored beside its row and comes
// back whole from every reader: claims, List and Get, the id claim's Load,
// and the event_queue_payloads view; a small one stays in the row. A
// repeated event stores nothing, and deleting a row deletes its payload.
func TestLargePayloadsLiveBesideTheirRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	small := json.RawMessage(`{"activity_id":"https://remote.example/a/1"}`)
	evs := []outbox.Event{
		{Type: "activity.outgoing", Payload: bigPayload(1)},
		{Type: "delivery.post", Payload: small},
		{Type: "activity.outgoing", Payload: bigPayload(3)},
	}
	ids := b.enqueue(t, evs...)
	// The same events again (a producer running twice): ignored, with
	// their payloads.
	b.enqueue(t, evs...)

	var inline, beside int
	if err := b.db.Read.QueryRow(`SELECT
			(SELECT COUNT(*) FROM event_queue WHERE payload <> ''),
			(SELECT COUNT(*) FROM event_payloads)`).Scan(&inline, &beside); err != nil {
		t.Fatal(err)
	}
	if inline != 1 || beside != 2 {
		t.Fatalf("%d payloads inline and %d beside, want 1 and 2", inline, beside)
	}
	want := map[string]string{ids[0]: string(bigPayload(1)), ids[1]: string(small), ids[2]: string(bigPayload(3))}
	check := func(how string, id string, got []byte) {
		t.Helper()
		if string(got) != want[id] {
			t.Fatalf("%s: payload of %s = %.60s..., want %.60s...", how, id, got, want[id])
		}
	}
	for _, id := range ids {
		check("List", id, b.row(t, id).Event.Payload)
		var view string
		if err := b.db.Read.QueryRow(`SELECT payload FROM event_queue_payloads WHERE event_id = ?`, id).Scan(&view); err != nil {
			t.Fatal(err)
		}
		check("view", id, []byte(view))
	}
	// A row another program wrote with an empty payload (not JSON, and
	// no payload beside it) still reads, as empty.
	if _, err := b.db.Write.Exec(`INSERT INTO event_queue (event_id, type, payload, next_attempt_at, occurred_at,
		created_at, updated_at) VALUES (NULL, 'foreign', '', 0, 0, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	q := b.queue()
	foreign, err := q.List(ctx, outbox.Filter{Type: "foreign"})
	if err != nil || len(foreign) != 1 || len(foreign[0].Event.Payload) != 0 {
		t.Fatalf("foreign row = %+v, %v", foreign, err)
	}
	if _, err := b.db.Write.Exec(`DELETE FROM event_queue WHERE type = 'foreign'`); err != nil {
		t.Fatal(err)
	}
	got, err := q.Get(ctx, b.row(t, ids[2]).ID)
	if err != nil {
		t.Fatal(err)
	}
	check("Get", ids[2], got.Event.Payload)

	rows, err := q.Claim(ctx, 2, time.Minute)
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim = %d rows, %v", len(rows), err)
	}
	for _, r := range rows {
		check("Claim", r.Event.ID, r.Event.Payload)
	}
	c, _, err := q.SettleAndClaimIDs(ctx, 5, time.Minute, outbox.Settlement{Row: rows[0], Result: outbox.Result{Outcome: outbox.Succeeded}})
	if err != nil || len(c.IDs) != 1 {
		t.Fatalf("id claim = %+v, %v", c, err)
	}
	loaded, err := q.Load(ctx, c)
	if err != nil || len(loaded) != 1 {
		t.Fatalf("load = %d rows, %v", len(loaded), err)
	}
	check("Load", loaded[0].Event.ID, loaded[0].Event.Payload)

	// Retention deletes the done row and its payload with it.
	b.clock.Advance(time.Hour)
	res, err := q.Sweep(ctx, b.clock.Now().Add(-time.Minute), b.clock.Now().Add(time.Minute))
	if err != nil || res.Done != 1 {
		t.Fatalf("sweep = %+v, %v", res, err)
	}
	if err := b.db.Read.QueryRow(`SELECT COUNT(*) FROM event_payloads`).Scan(&beside); err != nil {
		t.Fatal(err)
	}
	if beside != 1 {
		t.Fatalf("%d payloads beside rows after deleting one of two, want 1", beside)
	}
}

// SettleAndClaimIDs claims like Claim (stale claims first, then the
// oldest due), reading only ids; Load reads the claimed rows in claim order,
// and leaves out a row another claim has taken since.
func TestClaimIDsThenLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := b.clock.Now()
	evs := make([]outbox.Event, 6)
	for i := range evs {
		evs[i] = outbox.Event{Type: "note", Target: "remote.example", Payload: bigPayload(i),
			NotBefore: now.Add(-time.Duration(10-i) * time.Second)}
	}
	ids := b.enqueue(t, evs...)
	q := b.queue()
	const lease = time.Minute

	// An older claim that will go stale.
	stale, err := q.Claim(ctx, 1, lease)
	if err != nil || len(stale) != 1 || stale[0].Event.ID != ids[0] {
		t.Fatalf("first claim = %+v, %v", stale, err)
	}
	b.clock.Advance(2 * lease)

	c, n, err := q.SettleAndClaimIDs(ctx, 3, lease)
	if err != nil || n != 0 || len(c.IDs) != 3 {
		t.Fatalf("id claim = %+v, %d, %v", c, n, err)
	}
	if c.Token.Before(b.clock.Now()) {
		t.Fatalf("token %v is older than the claim", c.Token)
	}
	if !c.OldestDue.Equal(evs[0].NotBefore.Truncate(time.Millisecond)) {
		t.Fatalf("oldest due = %v, want %v (the stale row's)", c.OldestDue, evs[0].NotBefore)
	}
	rows, err := q.Load(ctx, c)
	if err != nil || len(rows) != 3 {
		t.Fatalf("load = %d rows, %v", len(rows), err)
	}
	for i, r := range rows {
		if r.Event.ID != ids[i] || r.ID != c.IDs[i] || r.Status != outbox.StatusProcessing ||
			!r.ClaimedAt.Equal(c.Token) || string(r.Event.Payload) != string(bigPayload(i)) {
			t.Fatalf("loaded row %d = %+v", i, r)
		}
	}
	// The first claimer's settlement no longer applies to the row taken over.
	if n, err := q.Complete(ctx, stale[0]); err != nil || n != 0 {
		t.Fatalf("stale complete = %d, %v; want 0", n, err)
	}

	// Another claimer takes the rows of c over once c's lease expired: Load
	// of c finds none of them any more.
	b.clock.Advance(2 * lease)
	c2, _, err := q.SettleAndClaimIDs(ctx, 2, lease)
	if err != nil || len(c2.IDs) != 2 || c2.IDs[0] != c.IDs[0] {
		t.Fatalf("takeover = %+v, %v", c2, err)
	}
	rows, err = q.Load(ctx, c)
	if err != nil || len(rows) != 1 || rows[0].ID != c.IDs[2] {
		t.Fatalf("load of the expired claim = %+v, %v; want only its last row", rows, err)
	}

	// Settling by the rows Load returned completes them.
	settle := make([]outbox.Settlement, 0, 3)
	for _, r := range append(rows, mustLoad(t, q, c2)...) {
		settle = append(settle, outbox.Settlement{Row: r, Result: outbox.Result{Outcome: outbox.Succeeded}})
	}
	c3, n, err := q.SettleAndClaimIDs(ctx, 10, lease, settle...)
	if err != nil || n != 3 || len(c3.IDs) != 3 {
		t.Fatalf("settle and claim the rest = %+v, %d settled, %v", c3, n, err)
	}
	for _, id := range ids[:3] {
		if r := b.row(t, id); r.Status != outbox.StatusDone {
			t.Fatalf("row %s = %+v", id, r)
		}
	}
}

func mustLoad(t *testing.T, q *outbox.Queue, c outbox.Claimed) []outbox.Row {
	t.Helper()
	rows, err := q.Load(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// Claims and completions of rows with gaps between their ids (a row deferred
// in the middle) change exactly the rows meant, as those of consecutive rows
// do.
func TestClaimAndCompleteAroundGaps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	evs := make([]outbox.Event, 6)
	for i := range evs {
		evs[i] = outbox.Event{Type: "note"}
	}
	evs[2].NotBefore = b.clock.Now().Add(time.Hour) // not due: a gap
	ids := b.enqueue(t, evs...)
	q := b.queue()
	c, _, err := q.SettleAndClaimIDs(ctx, 10, time.Minute)
	if err != nil || len(c.IDs) != 5 {
		t.Fatalf("claim = %+v, %v", c, err)
	}
	if r := b.row(t, ids[2]); r.Status != outbox.StatusPending {
		t.Fatalf("the row not due was claimed: %+v", r)
	}
	rows := mustLoad(t, q, c)
	// Complete every other claimed row: gaps again.
	var settle []outbox.Settlement
	for i, r := range rows {
		if i%2 == 0 {
			settle = append(settle, outbox.Settlement{Row: r, Result: outbox.Result{Outcome: outbox.Succeeded}})
		}
	}
	if _, n, err := q.SettleAndClaimIDs(ctx, 0, time.Minute, settle...); err != nil || n != len(settle) {
		t.Fatalf("complete = %d, %v; want %d", n, err, len(settle))
	}
	done := map[string]bool{}
	for _, st := range settle {
		done[st.Row.Event.ID] = true
	}
	for i, id := range ids {
		r := b.row(t, id)
		switch {
		case i == 2 && r.Status != outbox.StatusPending,
			i != 2 && done[id] && r.Status != outbox.StatusDone,
			i != 2 && !done[id] && r.Status != outbox.StatusProcessing:
			t.Errorf("row %d = %s (done: %v)", i, r.Status, done[id])
		}
	}
}

// The retention sweep walks the table in id order: it deletes every done row
// last updated before the bound across many chunks and across gaps in the
// ids, passes over rows in other states, and leaves rows done later.
func TestSweepWalksDoneRowsInIDOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	q := b.queue()
	const old = 2500
	evs := make([]outbox.Event, old)
	for i := range evs {
		evs[i] = outbox.Event{Type: "note", Payload: bigPayload(i)}
	}
	evs[4].NotBefore = b.clock.Now().Add(24 * time.Hour) // stays pending
	ids := b.enqueue(t, evs...)
	dead := b.row(t, ids[1500]).ID
	for {
		c, _, err := q.SettleAndClaimIDs(ctx, 300, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.IDs) == 0 {
			break
		}
		var settle []outbox.Settlement
		for _, r := range mustLoad(t, q, c) {
			res := outbox.Result{Outcome: outbox.Succeeded}
			if r.ID == dead {
				res = outbox.Result{Outcome: outbox.Dead, Err: fmt.Errorf("refused")}
			}
			settle = append(settle, outbox.Settlement{Row: r, Result: res})
		}
		if _, err := q.Settle(ctx, settle...); err != nil {
			t.Fatal(err)
		}
	}
	// A gap wider than a chunk.
	if _, err := b.db.Write.Exec(`DELETE FROM event_queue WHERE id BETWEEN ? AND ?`,
		b.row(t, ids[100]).ID, b.row(t, ids[1300]).ID); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Hour)
	recent := b.enqueue(t, outbox.Event{Type: "note"}, outbox.Event{Type: "note"})
	rows, err := q.Claim(ctx, 10, time.Minute)
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim of the recent rows = %d, %v", len(rows), err)
	}
	if _, err := q.Complete(ctx, rows...); err != nil {
		t.Fatal(err)
	}

	res, err := q.Sweep(ctx, b.clock.Now().Add(-time.Hour), b.clock.Now().Add(-30*time.Minute))
	if want := int64(old - 2 - 1201); err != nil || res.Done != want {
		t.Fatalf("sweep = %+v, %v; want %d done rows", res, err, want)
	}
	var left []string
	rs, err := b.db.Read.Query(`SELECT event_id FROM event_queue ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left = append(left, id)
	}
	if want := []string{ids[4], ids[1500], recent[0], recent[1]}; fmt.Sprint(left) != fmt.Sprint(want) {
		t.Fatalf("rows left = %v, want the pending, the dead and the recent ones %v", left, want)
	}
	var payloads int
	if err := b.db.Read.QueryRow(`SELECT COUNT(*) FROM event_payloads`).Scan(&payloads); err != nil || payloads != 2 {
		t.Fatalf("%d payloads left, %v; want those of the pending and the dead row", payloads, err)
	}
}

// A database at version 7 (payloads inline, an index of done rows) moves to
// the current schema with its rows intact: they read as before, a claim
// takes them, and the retention sweep deletes the old done ones.
func TestUpgradeKeepsInlinePayloads(t *testing.T) {
	if storetest.Dialect() != sqldb.SQLite {
		t.Skip("an upgrade of a SQLite file from version 7: SQLite only (PostgreSQL came after 0016)")
	}
	t.Parallel()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "courier.db"), sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Write.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
		applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.Version > 7 {
			break
		}
		if _, err := db.Write.Exec(m.SQL); err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
		if _, err := db.Write.Exec(`INSERT INTO schema_migrations VALUES (?, ?, 0)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	big := string(bigPayload(1))
	for i, st := range []string{"done", "done", "pending"} {
		if _, err := db.Write.Exec(`INSERT INTO event_queue (event_id, type, payload, status, next_attempt_at,
			occurred_at, created_at, updated_at) VALUES (?, 'activity.outgoing', ?, ?, 0, 0, 0, 0)`,
			fmt.Sprintf("00000000-0000-4000-8000-00000000000%d", i), big, st); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := migrations.Apply(ctx, db.Write, migrations.Options{})
	if err != nil || len(applied) == 0 || applied[0] != 8 {
		t.Fatalf("upgrade applied %v, %v; want 8 onwards", applied, err)
	}
	var doneIndex int
	if err := db.Read.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name = 'event_queue_done'`).
		Scan(&doneIndex); err != nil || doneIndex != 0 {
		t.Fatalf("index of done rows after the upgrade: %d, %v", doneIndex, err)
	}
	q := outbox.NewQueue(db.Write, outbox.QueueOptions{Read: db.Read})
	rows, err := q.Claim(ctx, 10, time.Minute)
	if err != nil || len(rows) != 1 || string(rows[0].Event.Payload) != big {
		t.Fatalf("claim after the upgrade = %+v, %v", rows, err)
	}
	res, err := q.Sweep(ctx, time.UnixMilli(1), time.UnixMilli(1))
	if err != nil || res.Done != 2 {
		t.Fatalf("sweep after the upgrade = %+v, %v; want the 2 old done rows", res, err)
	}
}
