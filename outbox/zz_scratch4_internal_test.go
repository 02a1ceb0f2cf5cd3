package outbox

import (
	"context"
	"testing"
	"time"
)

func TestScratchIndex(t *testing.T) {
	const n = 20000
	ctx := context.Background()
	for _, mode := range []string{"std", "alt", "std", "alt", "std", "alt"} {
		db := scratchDB(t, n, "FULL")
		if mode == "alt" {
			if _, err := db.Write.Exec(`DROP INDEX event_queue_target; CREATE INDEX event_queue_target ON event_queue (target) WHERE target IS NOT NULL AND status = 'pending'`); err != nil {
				t.Fatal(err)
			}
		}
		q := NewQueue(db.Write, QueueOptions{})
		start, cpu := time.Now(), cpuNow()
		var prev []Row
		for done := 0; done < n; {
			rows, _, err := q.SettleAndClaim(ctx, 256, time.Minute, settleAll(prev, Result{Outcome: Succeeded})...)
			if err != nil {
				t.Fatal(err)
			}
			done += len(rows)
			prev = rows
		}
		q.Complete(ctx, prev...)
		wall, c := time.Since(start), cpuNow()-cpu
		t.Logf("%s: %.1f us/row wall, %.1f us/row cpu", mode, float64(wall.Microseconds())/n, float64(c.Microseconds())/n)
	}
}
