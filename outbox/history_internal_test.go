package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

func openMigrated(t *testing.T) *sqldb.DB {
	t.Helper()
	return storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
}

func queryPlan(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rs, err := db.Query("EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	defer rs.Close()
	var lines []string
	for rs.Next() {
		var id, parent, notused int
		var detail string
		if err := rs.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, detail)
	}
	return strings.Join(lines, "; ")
}

// The lists and counts of open rows (by status, host and type) read the
// open rows' partial indexes, which done rows never enter, so their cost
// does not grow with history.
func TestOpenRowQueriesUseOpenIndexes(t *testing.T) {
	if storetest.Dialect() != sqldb.SQLite {
		t.Skip("reads SQLite's query plans: SQLite only")
	}
	t.Parallel()
	db := openMigrated(t)
	for _, f := range []Filter{
		{Status: StatusPending},
		{Status: StatusProcessing},
		{Status: StatusDeadLettered},
		{Status: StatusDeadLettered, Type: "delivery.post"},
		{Status: StatusPending, Type: "delivery.post", Target: "social.example"},
		{Status: StatusDeadLettered, Type: "delivery.post", Target: "social.example"},
	} {
		where, args := f.where()
		for _, q := range []string{
			`SELECT id FROM event_queue WHERE ` + where + ` ORDER BY id LIMIT 10`,
			`SELECT COUNT(*) FROM (SELECT 1 FROM event_queue WHERE ` + where + ` LIMIT 10)`,
		} {
			plan := queryPlan(t, db.Read, q, args...)
			if !strings.Contains(plan, "event_queue_open") && !strings.Contains(plan, "event_queue_target_open") {
				t.Errorf("%+v: plan %q reads no open-row index", f, plan)
			}
		}
	}
	// ReleaseTarget's update (pause, resume, retry now and reset of a host).
	if plan := queryPlan(t, db.Read, `SELECT id FROM event_queue
		WHERE target = ? AND status = 'pending' AND status <> 'done' AND next_attempt_at > ?`, "h.example", 0); !strings.Contains(plan, "event_queue_target_open") {
		t.Errorf("release target plan %q", plan)
	}
	if plan := queryPlan(t, db.Read, `SELECT status, type, n FROM event_queue_counts WHERE n <> 0`); strings.Contains(plan, "event_queue ") {
		t.Errorf("stats plan %q reads event_queue", plan)
	}
}

// The counts kept on write equal a GROUP BY over the table after every kind
// of change: enqueue, claim, settle (done, failed, dead), retry, discard,
// hand back, release of a host and the retention sweep.
func TestCountsKeptOnWriteMatchTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openMigrated(t)
	now := time.Now().Add(time.Hour)
	q := NewQueue(db.Write, QueueOptions{Read: db.Read, Now: func() time.Time { return now }})
	check := func(step string) {
		t.Helper()
		got, err := q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := Stats{}
		rs, err := db.Read.QueryContext(ctx, `SELECT status, type, COUNT(*) FROM event_queue GROUP BY status, type`)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		for rs.Next() {
			var s, typ string
			var n int64
			if err := rs.Scan(&s, &typ, &n); err != nil {
				t.Fatal(err)
			}
			if want[s] == nil {
				want[s] = map[string]int64{}
			}
			want[s][typ] = n
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after %s: Stats %v, table %v", step, got, want)
		}
	}
	check("nothing")
	var evs []Event
	for i := range 40 {
		typ, target := "delivery.post", fmt.Sprintf("h%d.example", i%3)
		if i%4 == 0 {
			typ, target = "inbox.received", ""
		}
		evs = append(evs, Event{Type: typ, Target: target, Payload: []byte(`{"n":` + fmt.Sprint(i) + `}`)})
	}
	if err := db.Tx(ctx, func(tx *sql.Tx) error { return Enqueue(ctx, tx, evs...) }); err != nil {
		t.Fatal(err)
	}
	// A duplicate id is conflict-ignored and counts nothing.
	dup := evs[0]
	if err := db.Tx(ctx, func(tx *sql.Tx) error { return Enqueue(ctx, tx, dup) }); err != nil {
		t.Fatal(err)
	}
	check("enqueue")
	rows, err := q.Claim(ctx, 30, time.Minute)
	if err != nil || len(rows) != 30 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	check("claim")
	var ss []Settlement
	for i, r := range rows[:24] {
		res := Result{Outcome: Succeeded}
		switch i % 4 {
		case 1:
			res = Result{Outcome: Failed, Next: now.Add(time.Minute), Err: errors.New("503")}
		case 2:
			res = Result{Outcome: Dead, Err: errors.New("410")}
		}
		ss = append(ss, Settlement{Row: r, Result: res})
	}
	if _, err := q.Settle(ctx, ss...); err != nil {
		t.Fatal(err)
	}
	check("settle")
	dead, err := q.List(ctx, Filter{Status: StatusDeadLettered})
	if err != nil || len(dead) < 2 {
		t.Fatalf("dead letters: %d, %v", len(dead), err)
	}
	if err := q.Retry(ctx, dead[0].ID); err != nil {
		t.Fatal(err)
	}
	check("retry")
	if err := q.Discard(ctx, dead[1].ID); err != nil {
		t.Fatal(err)
	}
	check("discard")
	if _, err := q.HandBack(ctx, rows[25].Event.ID, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	check("hand back")
	if _, err := q.ReleaseTarget(ctx, "h1.example"); err != nil {
		t.Fatal(err)
	}
	check("release")
	now = now.Add(30 * 24 * time.Hour)
	if _, err := q.Sweep(ctx, now, now); err != nil {
		t.Fatal(err)
	}
	check("sweep")
	st, _ := q.Stats(ctx)
	if st[StatusDone] != nil {
		t.Fatalf("done rows left after the sweep: %v", st[StatusDone])
	}
}
