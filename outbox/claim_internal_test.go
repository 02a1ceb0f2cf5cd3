package outbox

import (
	"context"
	"database/sql"
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
	db := openMigrated(t)
	if db.Dialect != sqldb.Postgres {
		t.Skip("reads PostgreSQL's query plans: PostgreSQL only")
	}
	t.Parallel()
	ctx := context.Background()
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		evs := make([]Event, 3000)
		for i := range evs {
			evs[i] = Event{Type: "note"}
		}
		return Enqueue(ctx, tx, evs...)
	})
	if err != nil {
		t.Fatal(err)
	}
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
	defer rs.Close()
	var plan []string
	for rs.Next() {
		var line string
		if err := rs.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, strings.TrimSpace(line))
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
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
