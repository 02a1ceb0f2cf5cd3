package outbox

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestScratchOrFail(t *testing.T) {
	const n = 20000
	ctx := context.Background()
	for _, mode := range []string{"std", "fail", "std", "fail", "std", "fail"} {
		db := scratchDB(t, n, "FULL")
		q := NewQueue(db.Write, QueueOptions{})
		stale, due := sqlClaimStale, sqlClaimDue
		if mode == "fail" {
			stale = strings.Replace(stale, "UPDATE event_queue", "UPDATE OR FAIL event_queue", 1)
			due = strings.Replace(due, "UPDATE event_queue", "UPDATE OR FAIL event_queue", 1)
		}
		start, cpu := time.Now(), cpuNow()
		var claimCPU time.Duration
		var prev []Row
		for done := 0; done < n; {
			var rows []Row
			err := inTx(ctx, db.Write, func(st *stmts) error {
				if _, err := settleRows(st, time.Now(), settleAll(prev, Result{Outcome: Succeeded})); err != nil {
					return err
				}
				c := cpuNow()
				now := time.Now()
				tok := q.tok.next(now)
				var err error
				rows, err = scanClaim(st, nil, stale, tok, now.UnixMilli(), now.UnixMilli()-60000, 256)
				if err == nil {
					rows, err = scanClaim(st, rows, due, tok, now.UnixMilli(), now.UnixMilli(), 256-len(rows))
				}
				claimCPU += cpuNow() - c
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			done += len(rows)
			prev = rows
		}
		inTx(ctx, db.Write, func(st *stmts) error { _, err := settleRows(st, time.Now(), settleAll(prev, Result{Outcome: Succeeded})); return err })
		wall, c := time.Since(start), cpuNow()-cpu
		t.Logf("%s: %.1f us/row wall, %.1f us/row cpu, claim %.1f us/row cpu", mode,
			float64(wall.Microseconds())/n, float64(c.Microseconds())/n, float64(claimCPU.Microseconds())/n)
	}
}
