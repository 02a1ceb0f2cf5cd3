package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/courier-ap/courier/outbox"
)

// settleAndClaim is SettleAndClaimIDs followed by Load of what it claimed.
func settleAndClaim(q *outbox.Queue, limit int, lease time.Duration, settle ...outbox.Settlement) ([]outbox.Row, int, error) {
	c, n, err := q.SettleAndClaimIDs(context.Background(), limit, lease, settle...)
	if err != nil {
		return nil, n, err
	}
	rows, err := q.Load(context.Background(), c)
	return rows, n, err
}

// SettleAndClaimIDs settles the previous batch and claims the next in one
// transaction: the settled rows take their outcome, the claimed rows (read
// by Load) carry everything a claim needs, and a row deferred in the same
// call is not claimed again before its time.
func TestSettleAndClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	evs := make([]outbox.Event, 5)
	for i := range evs {
		evs[i] = outbox.Event{Type: "note", Target: "remote.example", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	ids := b.enqueue(t, evs...)
	q := b.queue()
	const lease = time.Minute

	first, n, err := settleAndClaim(q, 3, lease)
	if err != nil || n != 0 || len(first) != 3 {
		t.Fatalf("first claim = %d rows, %d settled, %v", len(first), n, err)
	}
	for i, r := range first {
		if r.Event.ID != ids[i] || r.Event.Type != "note" || r.Event.Target != "remote.example" ||
			string(r.Event.Payload) != fmt.Sprintf(`{"n":%d}`, i) || r.Event.OccurredAt.IsZero() ||
			r.Status != outbox.StatusProcessing || r.Attempts != 0 ||
			r.ClaimedAt.IsZero() || !r.ClaimedAt.Equal(first[0].ClaimedAt) {
			t.Fatalf("claimed row %d = %+v", i, r)
		}
		// What the claim returns is what the row holds.
		if got := b.row(t, ids[i]); got.Status != r.Status || !got.ClaimedAt.Equal(r.ClaimedAt) ||
			!got.UpdatedAt.Equal(b.clock.Now()) || !got.NextAttemptAt.Equal(r.NextAttemptAt) || got.ID != r.ID {
			t.Fatalf("row %d holds %+v, claim returned %+v", i, got, r)
		}
	}

	until := b.clock.Now().Add(time.Minute)
	second, n, err := settleAndClaim(q, 10, lease,
		outbox.Settlement{Row: first[0], Result: outbox.Result{Outcome: outbox.Succeeded}},
		outbox.Settlement{Row: first[1], Result: outbox.Result{Outcome: outbox.Succeeded}},
		outbox.Settlement{Row: first[2], Result: outbox.Result{Outcome: outbox.Deferred, Next: until}})
	if err != nil || n != 3 || len(second) != 2 || second[0].Event.ID != ids[3] || second[1].Event.ID != ids[4] {
		t.Fatalf("settle and claim = %+v, %d settled, %v; want the last two rows", second, n, err)
	}
	if second[0].ClaimedAt.Equal(first[0].ClaimedAt) {
		t.Fatal("the second claim reused the first claim's owner token")
	}
	for _, id := range ids[:2] {
		if r := b.row(t, id); r.Status != outbox.StatusDone || !r.ClaimedAt.IsZero() {
			t.Fatalf("completed row = %+v", r)
		}
	}
	if r := b.row(t, ids[2]); r.Status != outbox.StatusPending || r.Attempts != 0 || !r.NextAttemptAt.Equal(until) {
		t.Fatalf("deferred row = %+v", r)
	}

	// Limit 0 only settles.
	none, n, err := settleAndClaim(q, 0, lease, outbox.Settlement{Row: second[0], Result: outbox.Result{Outcome: outbox.Succeeded}})
	if err != nil || n != 1 || len(none) != 0 {
		t.Fatalf("settle only = %d rows, %d settled, %v", len(none), n, err)
	}

	// One bad settlement fails the whole call: nothing settled, nothing claimed.
	b.clock.Advance(time.Minute)
	bad := second[1]
	bad.ClaimedAt = time.Time{}
	if rows, n, err := settleAndClaim(q, 10, lease,
		outbox.Settlement{Row: second[1], Result: outbox.Result{Outcome: outbox.Succeeded}},
		outbox.Settlement{Row: bad, Result: outbox.Result{Outcome: outbox.Succeeded}}); err == nil || len(rows) != 0 || n != 0 {
		t.Fatalf("settle and claim with an unclaimed row = %d rows, %d settled, %v; want an error", len(rows), n, err)
	}
	if r := b.row(t, ids[4]); r.Status != outbox.StatusProcessing {
		t.Fatalf("row of the failed call = %+v, want still processing", r)
	}
	if r := b.row(t, ids[2]); r.Status != outbox.StatusPending {
		t.Fatalf("due row after the failed call = %+v, want still pending", r)
	}
}

// Completing rows of several claims in any order changes each row of a live
// claim once and leaves a row whose claim was taken over alone, also past
// the number of ids one statement lists.
func TestCompleteAcrossClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const total = 1300
	for left := total; left > 0; left -= 500 {
		evs := make([]outbox.Event, min(left, 500))
		for i := range evs {
			evs[i] = outbox.Event{Type: "note"}
		}
		b.enqueue(t, evs...)
	}
	q := b.queue()
	const lease = time.Minute
	// A relay claims one row and outlives its lease; another claims it
	// again, with the next 699 rows.
	old, err := q.Claim(ctx, 1, lease)
	if err != nil || len(old) != 1 {
		t.Fatalf("first claim = %d, %v", len(old), err)
	}
	b.clock.Advance(lease)
	a, err := q.Claim(ctx, 700, lease)
	if err != nil || len(a) != 700 || a[0].ID != old[0].ID {
		t.Fatalf("claim a = %d, %v; want the expired row first", len(a), err)
	}
	c, err := q.Claim(ctx, total, lease)
	if err != nil || len(c) != total-700 {
		t.Fatalf("claim c = %d, %v", len(c), err)
	}

	// The expired claim's outcome comes in with everything else but the
	// new claim of its row: it must change nothing.
	var rows []outbox.Row
	rows = append(rows, a[1:300]...)
	rows = append(rows, old[0])
	rows = append(rows, c...)
	rows = append(rows, a[300:]...)
	rows = append(rows, a[5]) // listed twice: changed once
	n, err := q.Complete(ctx, rows...)
	if err != nil || n != total-1 {
		t.Fatalf("complete = %d, %v; want %d", n, err, total-1)
	}
	st, err := q.Stats(ctx)
	if err != nil || st[outbox.StatusDone]["note"] != total-1 || st[outbox.StatusProcessing]["note"] != 1 {
		t.Fatalf("stats = %v, %v", st, err)
	}
	if n, err := q.Complete(ctx, a[0]); err != nil || n != 1 {
		t.Fatalf("complete of the live claim = %d, %v", n, err)
	}
}

// The queue keeps its hot statements prepared across transactions; when the
// writer's connection is replaced they are prepared again on the new one.
func TestQueueSurvivesNewWriterConnections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	evs := make([]outbox.Event, 6*8)
	for i := range evs {
		evs[i] = outbox.Event{Type: "note"}
	}
	ids := b.enqueue(t, evs...)
	q := b.queue()
	var prev []outbox.Row
	for round := range 6 {
		if round == 3 {
			// From now on every use closes the writer's connection.
			b.db.Write.SetMaxIdleConns(0)
		}
		settle := make([]outbox.Settlement, len(prev))
		for i, r := range prev {
			settle[i] = outbox.Settlement{Row: r, Result: outbox.Result{Outcome: outbox.Succeeded}}
		}
		rows, n, err := settleAndClaim(q, 8, time.Minute, settle...)
		if err != nil || n != len(prev) || len(rows) != 8 {
			t.Fatalf("round %d: %d rows, %d settled, %v", round, len(rows), n, err)
		}
		prev = rows
	}
	if n, err := q.Complete(ctx, prev...); err != nil || n != len(prev) {
		t.Fatalf("complete = %d, %v", n, err)
	}
	b.db.Write.SetMaxIdleConns(1)
	for _, id := range ids {
		if r := b.row(t, id); r.Status != outbox.StatusDone {
			t.Fatalf("row = %+v", r)
		}
	}
}

// Count counts the rows List would return, without its page limit, and
// stops at its bound.
func TestCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var evs []outbox.Event
	for i := range 7 {
		target := "a.example"
		if i%2 == 1 {
			target = "b.example"
		}
		evs = append(evs, outbox.Event{Type: "note", Target: target})
	}
	evs = append(evs, outbox.Event{Type: "other", Target: "a.example"})
	b.enqueue(t, evs...)
	q := b.queue()
	ctx := context.Background()
	for _, c := range []struct {
		f    outbox.Filter
		most int64
		want int64
	}{
		{outbox.Filter{}, 100, 8},
		{outbox.Filter{Type: "note"}, 100, 7},
		{outbox.Filter{Type: "note", Target: "a.example"}, 100, 4},
		{outbox.Filter{Type: "note", Target: "a.example", Limit: 1}, 100, 4},
		{outbox.Filter{Type: "note", Status: outbox.StatusPending}, 5, 5},
		{outbox.Filter{Status: outbox.StatusDone}, 100, 0},
	} {
		got, err := q.Count(ctx, c.f, c.most)
		if err != nil || got != c.want {
			t.Errorf("Count(%+v, %d) = %d, %v; want %d", c.f, c.most, got, err, c.want)
		}
		rows, err := q.List(ctx, outbox.Filter{Status: c.f.Status, Type: c.f.Type, Target: c.f.Target, Limit: 1000})
		if err != nil || min(int64(len(rows)), c.most) != got {
			t.Errorf("List(%+v) = %d rows, %v; Count gave %d", c.f, len(rows), err, got)
		}
	}
}

// ReleaseEvents makes due the pending rows waiting for a later time, over
// more ids than one statement lists, and reports exactly those: not a row
// due already, one being processed, or an id without a row. Attempts are
// kept.
func TestReleaseEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	later := b.clock.Now().Add(time.Hour)
	var waiting []outbox.Event
	for i := range 450 {
		waiting = append(waiting, outbox.Event{Type: "note", NotBefore: later, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
	}
	waitingIDs := b.enqueue(t, waiting...)
	claimed := b.enqueue(t, outbox.Event{Type: "note"}, outbox.Event{Type: "note"})
	q := b.queue()
	if rows, _, err := settleAndClaim(q, 2, time.Minute); err != nil || len(rows) != 2 {
		t.Fatalf("claim = %d rows, %v", len(rows), err)
	}
	due := b.enqueue(t, outbox.Event{Type: "note"})
	ids := append(append(append(append([]string{}, waitingIDs...), claimed...), due...), "00000000-0000-4000-8000-000000000000")

	b.clock.Advance(time.Minute)
	released, err := q.ReleaseEvents(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(released) != len(waitingIDs) {
		t.Fatalf("released %d rows, want the %d waiting", len(released), len(waitingIDs))
	}
	for _, id := range waitingIDs {
		r := b.row(t, id)
		if !released[id] || r.Status != outbox.StatusPending || !r.NextAttemptAt.Equal(b.clock.Now()) || r.Attempts != 0 {
			t.Fatalf("waiting row %s: released %v, row %+v", id, released[id], r)
		}
	}
	for _, id := range append(claimed, due...) {
		if released[id] {
			t.Fatalf("row %s was not waiting, but was released", id)
		}
	}
	if r := b.row(t, claimed[0]); r.Status != outbox.StatusProcessing {
		t.Fatalf("claimed row after the release = %+v", r)
	}
	again, err := q.ReleaseEvents(context.Background(), waitingIDs)
	if err != nil || len(again) != 0 {
		t.Fatalf("second release = %d rows, %v; want none (all due)", len(again), err)
	}
	if none, err := q.ReleaseEvents(context.Background(), nil); err != nil || len(none) != 0 {
		t.Fatalf("release of no ids = %v, %v", none, err)
	}
}
