package outbox

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// A group of writes shares one transaction; when one write of the group
// fails, the others still commit and only the failing caller gets an error.
func TestCommitterIsolatesAFailingWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := setupGroup(t).db
	c, err := newCommitter(db.Write, 64)
	if err != nil {
		t.Fatal(err)
	}
	insert := func(id string) func(*stmts) error {
		return func(s *stmts) error {
			_, err := s.exec(`INSERT INTO processed_events (event_id, handler, status, started_at)
				VALUES (?, ?, 'in_progress', ?)`, id, "h", 1)
			return err
		}
	}
	if err := c.Do(ctx, insert("dup")); err != nil {
		t.Fatal(err)
	}
	const n = 20
	entered, queued := make(chan struct{}), make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	// The first caller leads and holds its transaction until the others
	// have queued, so they form one group behind it.
	wg.Go(func() {
		errs[0] = c.Do(ctx, func(s *stmts) error {
			close(entered)
			<-queued
			return insert("e0")(s)
		})
	})
	<-entered
	for i := 1; i < n; i++ {
		id := fmt.Sprintf("e%d", i)
		if i == 7 {
			id = "dup" // violates the primary key
		}
		wg.Go(func() { errs[i] = c.Do(ctx, insert(id)) })
	}
	waitQueued(t, c, n-1)
	close(queued)
	wg.Wait()
	for i, err := range errs {
		if (err != nil) != (i == 7) {
			t.Errorf("caller %d: err = %v", i, err)
		}
	}
	var rows int
	if err := db.Read.QueryRow(`SELECT COUNT(*) FROM processed_events`).Scan(&rows); err != nil || rows != n {
		t.Fatalf("ledger rows = %d (%v), want %d", rows, err, n)
	}
}

func TestTokenClockIsStrictlyIncreasing(t *testing.T) {
	t.Parallel()
	var tc tokenClock
	at := time.UnixMilli(1_700_000_000_000)
	prev := int64(0)
	for i := range 1000 {
		now := at
		if i%10 == 0 {
			now = at.Add(-time.Second) // a clock that steps back
		}
		tok := tc.next(now)
		if tok <= prev {
			t.Fatalf("token %d after %d", tok, prev)
		}
		prev = tok
	}
}

func TestConsecutive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ids    []int64
		lo, hi int64
		ok     bool
	}{
		{nil, 0, 0, false},
		{[]int64{7}, 7, 7, true},
		{[]int64{3, 4, 5}, 3, 5, true},
		{[]int64{5, 3, 4}, 3, 5, true},
		{[]int64{3, 5}, 0, 0, false},
		{[]int64{3, 3, 5}, 0, 0, false}, // as many ids as the range, one repeated
		{[]int64{4, 3, 4}, 0, 0, false},
	} {
		lo, hi, ok := consecutive(tc.ids)
		if lo != tc.lo || hi != tc.hi || ok != tc.ok {
			t.Errorf("consecutive(%v) = %d, %d, %v; want %d, %d, %v", tc.ids, lo, hi, ok, tc.lo, tc.hi, tc.ok)
		}
	}
}
