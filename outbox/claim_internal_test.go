package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqldb"
)

// On PostgreSQL the claim is one statement whose three selections must each
// read the index made for them (migration 0017): the bulk lane's when no
// bulk row is due (once, it walked every pending row to return none), the
// interactive lane's without sorting a due time's rows, and the claimed
// rows' for expired claims (once, the planner walked every row being
// processed through event_queue_open). The table holds a backlog, rows
// being processed and done rows, and its statistics are fresh, as a
// planner sees a busy outbox.
func TestPostgresClaimReadsItsIndexes(t *testing.T) {
	db := postgresBacklog(t)
	ctx := context.Background()
	now := time.Now().Add(time.Minute) // every row due
	q := NewQueue(db.Write, QueueOptions{Read: db.Read, Now: func() time.Time { return now }})
	claimed, err := q.Claim(ctx, 1000, time.Minute)
	if err != nil || len(claimed) != 1000 {
		t.Fatalf("claim = %d rows, %v", len(claimed), err)
	}
	if n, err := q.Complete(ctx, claimed[:500]...); err != nil || n != 500 {
		t.Fatalf("complete = %d, %v", n, err)
	}
	if _, err := db.Write.ExecContext(ctx, `ANALYZE event_queue`); err != nil {
		t.Fatal(err)
	}
	args := claimArgs(now.UnixMilli(), now.UnixMilli(), 100, time.Minute)
	rs, err := db.Read.QueryContext(ctx, `EXPLAIN (COSTS OFF) `+postgresSQL.claimIDs, args...)
	if err != nil {
		t.Fatal(err)
	}
	text := planText(t, rs)
	for _, index := range []string{"event_queue_claimed", "event_queue_due_interactive", "event_queue_due_bulk"} {
		if !strings.Contains(text, "Index Scan using "+index+" ") {
			t.Errorf("the claim reads no index scan of %s:\n%s", index, text)
		}
	}
	for _, bad := range []string{"event_queue_open", "Seq Scan on event_queue", "Incremental Sort"} {
		if strings.Contains(text, bad) {
			t.Errorf("the claim's plan has %s:\n%s", bad, text)
		}
	}
}

// On PostgreSQL the lists and counts of pending rows and dead letters read
// the partial index of their status (migration 0017), generic plans too
// (Filter.whereOf writes the status into the statement), so their cost
// does not grow with the done rows before them.
func TestPostgresOpenRowQueriesUseTheirIndexes(t *testing.T) {
	db := postgresBacklog(t)
	ctx := context.Background()
	// Most rows are history, as in an outbox that has run for a while; a
	// few are dead letters.
	for _, q := range []string{
		`UPDATE event_queue SET status = 'done' WHERE id <= 2900`,
		`UPDATE event_queue SET status = 'dead_lettered' WHERE id > 2900 AND id <= 2910`,
		`ANALYZE event_queue`,
	} {
		if _, err := db.Write.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// Generic plans, as a statement prepared and run many times gets.
	conn, err := db.Write.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		f     Filter
		index string
	}{
		{Filter{Status: StatusPending}, "event_queue_pending"},
		{Filter{Status: StatusPending, Type: "note"}, "event_queue_pending"},
		{Filter{Status: StatusDeadLettered}, "event_queue_dead"},
	} {
		where, args := c.f.whereOf(postgresSQL)
		for i, q := range []string{
			`SELECT id FROM event_queue WHERE ` + where + ` ORDER BY id LIMIT 10`,
			`SELECT COUNT(*) FROM (SELECT 1 FROM event_queue WHERE ` + where + ` LIMIT 10) AS matched`,
		} {
			plan := genericPlan(t, conn, fmt.Sprintf("q%d_%d", len(where), i), q, args...)
			if !strings.Contains(plan, c.index) || strings.Contains(plan, "Seq Scan") {
				t.Errorf("%+v: plan of %s reads no %s:\n%s", c.f, q, c.index, plan)
			}
		}
	}
}

// postgresBacklog opens a migrated store with 3,000 pending notes for a
// test of PostgreSQL's query plans, which it skips on SQLite.
func postgresBacklog(t *testing.T) *sqldb.DB {
	t.Helper()
	db := openMigrated(t)
	if db.Dialect != sqldb.Postgres {
		t.Skip("reads PostgreSQL's query plans: PostgreSQL only")
	}
	t.Parallel()
	enqueueNotes(t, db, 3000)
	return db
}

// genericPlan prepares query as name on conn and returns the plan of its
// execution with args (numbers, or strings without quotes).
func genericPlan(t *testing.T, conn *sql.Conn, name, query string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, `PREPARE `+name+` AS `+query); err != nil {
		t.Fatalf("prepare %s: %v", query, err)
	}
	vals := make([]string, len(args))
	for i, a := range args {
		if str, ok := a.(string); ok {
			vals[i] = "'" + str + "'"
		} else {
			vals[i] = fmt.Sprint(a)
		}
	}
	rs, err := conn.QueryContext(ctx, `EXPLAIN (COSTS OFF) EXECUTE `+name+`(`+strings.Join(vals, ", ")+`)`)
	if err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	return planText(t, rs)
}

// planText reads an EXPLAIN's lines, trimmed, one per line, and closes rs.
func planText(t *testing.T, rs *sql.Rows) string {
	t.Helper()
	defer rs.Close()
	var lines []string
	for rs.Next() {
		var line string
		if err := rs.Scan(&line); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.TrimSpace(line))
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// enqueueNotes enqueues n events of type note in one transaction.
func enqueueNotes(t *testing.T, db *sqldb.DB, n int) {
	t.Helper()
	ctx := context.Background()
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		evs := make([]Event, n)
		for i := range evs {
			evs[i] = Event{Type: "note"}
		}
		return Enqueue(ctx, tx, evs...)
	})
	if err != nil {
		t.Fatal(err)
	}
}
