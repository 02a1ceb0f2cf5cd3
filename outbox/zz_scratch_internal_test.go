package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/sqlite"
)

func scratchDB(t *testing.T, n int, sync string) *sqlite.DB {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "c.db"), sqlite.Options{Synchronous: sync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := migrations.Apply(ctx, db.Write, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	payload := json.RawMessage(`{"activity":"` + strings.Repeat("x", 480) + `"}`)
	for j := 0; j < n; j += 1000 {
		evs := make([]Event, 1000)
		for k := range evs {
			evs[k] = Event{Type: "delivery.post", Target: "remote.example", Payload: payload}
		}
		if err := db.Tx(ctx, func(tx *sql.Tx) error { return Enqueue(ctx, tx, evs...) }); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func completeIn(st *stmts, rows []Row) error {
	ph := strings.Repeat(",?", len(rows))[1:]
	args := []any{time.Now().UnixMilli()}
	for _, r := range rows {
		args = append(args, r.ID)
	}
	args = append(args, rows[0].ClaimedAt.UnixMilli())
	_, err := st.exec(`UPDATE event_queue SET status = 'done', claimed_at = NULL, updated_at = ? WHERE id IN (`+ph+`) AND status = 'processing' AND claimed_at = ?`, args...)
	return err
}

func TestScratchCosts(t *testing.T) {
	const n = 20000
	bs := 256
	ctx := context.Background()
	for _, mode := range []string{"cur", "merged","cur","merged"} {
		db := scratchDB(t, n, "FULL")
		q := NewQueue(db.Write, QueueOptions{})
		bs = 256
		if mode == "merged1024" {
			bs = 1024
		}
		start, cpu := time.Now(), cpuNow()
		switch mode {
		case "cur", "in":
			for done := 0; done < n; {
				rows, err := q.Claim(ctx, bs, time.Minute)
				if err != nil || len(rows) == 0 {
					t.Fatal(err)
				}
				if mode == "cur" {
					_, err = q.Complete(ctx, rows...)
				} else {
					err = inTx(ctx, db.Write, func(st *stmts) error { return completeIn(st, rows) })
				}
				if err != nil {
					t.Fatal(err)
				}
				done += len(rows)
			}
		default:
			var prev []Row
			for done := 0; done < n; {
				var rows []Row
				err := inTx(ctx, db.Write, func(st *stmts) error {
					if len(prev) > 0 {
						if err := completeIn(st, prev); err != nil {
							return err
						}
					}
					var err error
					rows, err = claimRows(st, q.tok.next(time.Now()), time.Now(), bs, time.Minute)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				done += len(rows)
				prev = rows
			}
			inTx(ctx, db.Write, func(st *stmts) error { return completeIn(st, prev) })
		}
		wall, c := time.Since(start), cpuNow()-cpu
		t.Logf("%s: %.1f us/row wall, %.1f us/row cpu, %.0f rows/s", mode,
			float64(wall.Microseconds())/n, float64(c.Microseconds())/n, n/wall.Seconds())
	}
}
