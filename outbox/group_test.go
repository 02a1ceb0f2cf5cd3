package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// groupItem is one caller's write in the Group tests: a key to insert.
// gate, when set, holds the write (and so its transaction) until closed;
// entered is closed when the write starts.
type groupItem struct {
	key     string
	gate    chan struct{}
	entered chan struct{}
}

type groupBundle struct {
	db      *sqldb.DB
	commits atomic.Int64 // transactions committed, counted by db's OnWrite hook

	mu      sync.Mutex
	batches []int // sizes of the batches write was called with
}

// setupGroup opens a migrated database with a table of keys and counts the
// commits of db.Tx.
func setupGroup(t *testing.T) *groupBundle {
	t.Helper()
	ctx := context.Background()
	db := storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
	if _, err := db.Write.ExecContext(ctx, `CREATE TABLE group_test (k TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	b := &groupBundle{db: db}
	db.OnWrite(func() { b.commits.Add(1) })
	return b
}

func (b *groupBundle) group(t *testing.T, cfg GroupConfig) *Group[*groupItem] {
	t.Helper()
	if cfg.Tx == nil {
		cfg.Tx = b.db.Tx
	}
	g, err := NewGroup(cfg, func(ctx context.Context, tx *sql.Tx, batch []*groupItem) error {
		b.mu.Lock()
		b.batches = append(b.batches, len(batch))
		b.mu.Unlock()
		for _, it := range batch {
			if it.entered != nil {
				close(it.entered)
				it.entered = nil // a re-run must not close it again
			}
			if it.gate != nil {
				<-it.gate
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO group_test (k) VALUES (?)`, it.key); err != nil {
				return fmt.Errorf("insert %s: %w", it.key, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func (b *groupBundle) keys(t *testing.T) []string {
	t.Helper()
	rows, err := b.db.Read.Query(`SELECT k FROM group_test ORDER BY k`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ks []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		ks = append(ks, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ks
}

func (b *groupBundle) batchSizes() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.batches)
}

// lead starts a caller whose write holds its transaction until the
// returned release is called, and waits until that write has begun, so
// callers started afterwards queue behind it. done receives its error.
func lead(t *testing.T, g *Group[*groupItem], ctx context.Context, key string) (release func(), done <-chan error) {
	t.Helper()
	it := &groupItem{key: key, gate: make(chan struct{}), entered: make(chan struct{})}
	entered := it.entered
	ch := make(chan error, 1)
	go func() { ch <- g.Do(ctx, it) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the leading write did not start")
	}
	return sync.OnceFunc(func() { close(it.gate) }), ch
}

// waitQueued waits until n callers wait for a group.
func waitQueued[T any](t *testing.T, g *Group[T], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for g.queued() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued, want %d", g.queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func recvErr(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Do did not return")
		return nil
	}
}

// Callers that queue while a group is being written share the next
// transaction: one commit for all of them.
func TestGroupSharesOneCommit(t *testing.T) {
	t.Parallel()
	b := setupGroup(t)
	g := b.group(t, GroupConfig{MaxSize: 64})
	ctx := context.Background()
	release, leadDone := lead(t, g, ctx, "k00")
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = g.Do(ctx, &groupItem{key: fmt.Sprintf("k%02d", i)}) })
	}
	waitQueued(t, g, n-1)
	release()
	wg.Wait()
	errs[0] = recvErr(t, leadDone)
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if got := len(b.keys(t)); got != n {
		t.Errorf("rows = %d, want %d", got, n)
	}
	if got := b.commits.Load(); got != 2 {
		t.Errorf("commits = %d, want 2 (the leader's, then one for the %d that queued)", got, n-1)
	}
	if got, want := b.batchSizes(), []int{1, n - 1}; !slices.Equal(got, want) {
		t.Errorf("batches = %v, want %v", got, want)
	}
}

// A group holds at most MaxSize items; the rest wait for the next groups,
// oldest first.
func TestGroupBoundsItsSize(t *testing.T) {
	t.Parallel()
	b := setupGroup(t)
	g := b.group(t, GroupConfig{MaxSize: 4})
	ctx := context.Background()
	release, leadDone := lead(t, g, ctx, "lead")
	const n = 10
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = g.Do(ctx, &groupItem{key: fmt.Sprintf("k%02d", i)}) })
	}
	waitQueued(t, g, n)
	release()
	wg.Wait()
	if err := recvErr(t, leadDone); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if got, want := b.batchSizes(), []int{1, 4, 4, 2}; !slices.Equal(got, want) {
		t.Errorf("batches = %v, want %v", got, want)
	}
	if got := b.commits.Load(); got != 4 {
		t.Errorf("commits = %d, want 4", got)
	}
	if got := len(b.keys(t)); got != n+1 {
		t.Errorf("rows = %d, want %d", got, n+1)
	}
}

// When one item of a group fails, the group is rolled back and every item
// is written again alone: only the failing caller gets an error.
func TestGroupIsolatesAFailingItem(t *testing.T) {
	t.Parallel()
	b := setupGroup(t)
	g := b.group(t, GroupConfig{})
	ctx := context.Background()
	if err := g.Do(ctx, &groupItem{key: "taken"}); err != nil {
		t.Fatal(err)
	}
	release, leadDone := lead(t, g, ctx, "lead")
	keys := []string{"a", "b", "taken", "c", "d"}
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() { errs[i] = g.Do(ctx, &groupItem{key: k}) })
	}
	waitQueued(t, g, len(keys))
	release()
	wg.Wait()
	if err := recvErr(t, leadDone); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if (err != nil) != (keys[i] == "taken") {
			t.Errorf("caller %s: err = %v", keys[i], err)
		}
	}
	if got, want := b.keys(t), []string{"a", "b", "c", "d", "lead", "taken"}; !slices.Equal(got, want) {
		t.Errorf("rows = %v, want %v", got, want)
	}
	// One first write, the leader's group, the failed group of five, then
	// each of the five alone.
	if got, want := b.batchSizes(), []int{1, 1, 5, 1, 1, 1, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("batches = %v, want %v", got, want)
	}
	// The first write, the leader's, and four of the five re-runs.
	if got := b.commits.Load(); got != 6 {
		t.Errorf("commits = %d, want 6", got)
	}
}

// A caller whose context ends while it waits for its group is withdrawn:
// Do returns the context's error and nothing of it is written, and the
// callers queued with it are not disturbed.
func TestGroupWithdrawsACancelledWaiter(t *testing.T) {
	t.Parallel()
	b := setupGroup(t)
	g := b.group(t, GroupConfig{})
	release, leadDone := lead(t, g, context.Background(), "lead")
	defer release()

	before := make(chan error, 1)
	go func() { before <- g.Do(context.Background(), &groupItem{key: "before"}) }()
	waitQueued(t, g, 1)
	cctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() { cancelled <- g.Do(cctx, &groupItem{key: "cancelled"}) }()
	waitQueued(t, g, 2)
	after := make(chan error, 1)
	go func() { after <- g.Do(context.Background(), &groupItem{key: "after"}) }()
	waitQueued(t, g, 3)

	cancel()
	if err := recvErr(t, cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: err = %v, want context.Canceled", err)
	}
	if got := g.queued(); got != 2 {
		t.Errorf("queued after withdrawal = %d, want 2", got)
	}
	release()
	for name, ch := range map[string]<-chan error{"lead": leadDone, "before": before, "after": after} {
		if err := recvErr(t, ch); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got, want := b.keys(t), []string{"after", "before", "lead"}; !slices.Equal(got, want) {
		t.Errorf("rows = %v, want %v", got, want)
	}
}

// Once a caller's group has begun, its context no longer matters: the
// write commits and Do reports it, so a nil error always means written.
func TestGroupFinishesABegunWriteAfterCancel(t *testing.T) {
	t.Parallel()
	b := setupGroup(t)
	g := b.group(t, GroupConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	release, done := lead(t, g, ctx, "lead")
	cancel()
	release()
	if err := recvErr(t, done); err != nil {
		t.Fatalf("Do = %v, want nil", err)
	}
	if got, want := b.keys(t), []string{"lead"}; !slices.Equal(got, want) {
		t.Errorf("rows = %v, want %v", got, want)
	}
}

// Timeout bounds a group's wait for the writer.
func TestGroupTimesOutWaitingForTheWriter(t *testing.T) {
	if storetest.Dialect() != sqldb.SQLite {
		t.Skip("waits for the one write connection that another transaction holds: SQLite only " +
			"(PostgreSQL's transactions begin side by side)")
	}
	t.Parallel()
	b := setupGroup(t)
	g := b.group(t, GroupConfig{Timeout: 50 * time.Millisecond})
	ctx := context.Background()
	// The writer pool has one connection; this transaction holds it.
	held, err := b.db.Write.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Do(ctx, &groupItem{key: "late"}) }()
	err = recvErr(t, done)
	_ = held.Rollback()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want context.DeadlineExceeded", err)
	}
	// The group is usable again once the writer is free.
	if err := g.Do(ctx, &groupItem{key: "next"}); err != nil {
		t.Fatal(err)
	}
	if got, want := b.keys(t), []string{"next"}; !slices.Equal(got, want) {
		t.Errorf("rows = %v, want %v", got, want)
	}
}

// Many concurrent callers, a few of them failing, all get their own
// outcome, and no batch exceeds MaxSize.
func TestGroupUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setupGroup(t)
	g := b.group(t, GroupConfig{MaxSize: 16})
	ctx := context.Background()
	const n = 400
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		key := fmt.Sprintf("k%03d", i)
		if i%50 == 7 {
			key = "k000" // duplicates of caller 0's key: only they may fail
		}
		wg.Go(func() { errs[i] = g.Do(ctx, &groupItem{key: key}) })
	}
	wg.Wait()
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			if i%50 != 7 && i != 0 {
				t.Errorf("caller %d: %v", i, err)
			}
		}
	}
	// Caller 0 and its eight duplicates: exactly one of the nine wins.
	if failed != 8 {
		t.Errorf("failed callers = %d, want 8", failed)
	}
	if got := len(b.keys(t)); got != n-8 {
		t.Errorf("rows = %d, want %d", got, n-8)
	}
	for _, s := range b.batchSizes() {
		if s > 16 {
			t.Fatalf("batch of %d items, MaxSize 16", s)
		}
	}
}

func TestNewGroupValidates(t *testing.T) {
	t.Parallel()
	write := func(context.Context, *sql.Tx, []int) error { return nil }
	db := &sql.DB{}
	for _, tc := range []struct {
		name  string
		cfg   GroupConfig
		write func(context.Context, *sql.Tx, []int) error
	}{
		{"no database", GroupConfig{}, write},
		{"negative size", GroupConfig{DB: db, MaxSize: -1}, write},
		{"no write", GroupConfig{DB: db}, nil},
	} {
		if _, err := NewGroup(tc.cfg, tc.write); err == nil {
			t.Errorf("%s: NewGroup succeeded", tc.name)
		}
	}
	if _, err := NewGroup(GroupConfig{DB: db}, write); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
