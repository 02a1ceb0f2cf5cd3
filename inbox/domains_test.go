package inbox

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
)

// domainBundle is a domain cache in front of the real store's checker on a
// real migrated SQLite file, with the checker's queries counted and the
// clock set by the test.
type domainBundle struct {
	ctx     context.Context
	db      *sqldb.DB
	loc     string
	st      *store.Store
	cache   *domainCache
	queries atomic.Int64

	mu  sync.Mutex
	now time.Time
}

func setupDomains(t *testing.T, ttl time.Duration) *domainBundle {
	t.Helper()
	ctx := context.Background()
	loc := storetest.Location(t)
	db := storetest.Open(t, loc, storetest.Options{Synchronous: "NORMAL"})
	b := &domainBundle{ctx: ctx, db: db, loc: loc, st: store.New(db, "http://127.0.0.1:1", nil), now: time.Unix(1_800_000_000, 0)}
	checker, err := b.st.NewDomainBlockChecker(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(ctx context.Context, host string) (bool, error) {
		b.queries.Add(1)
		return checker.IsDomainBlocked(ctx, host)
	}
	b.cache = newDomainCache(check, ttl, b.clock)
	b.st.OnDomainBlocksChange(b.cache.invalidate)
	return b
}

func (b *domainBundle) clock() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.now
}

func (b *domainBundle) advance(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.now = b.now.Add(d)
}

// expect checks the decision for host and how many queries were made in
// all so far.
func (b *domainBundle) expect(t *testing.T, host string, blocked bool, queries int64) {
	t.Helper()
	got, err := b.cache.blocked(b.ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	if got != blocked {
		t.Fatalf("blocked(%s) = %v, want %v", host, got, blocked)
	}
	if n := b.queries.Load(); n != queries {
		t.Fatalf("after blocked(%s): %d queries, want %d", host, n, queries)
	}
}

func TestDomainCacheReusesDecisions(t *testing.T) {
	t.Parallel()
	b := setupDomains(t, time.Minute)
	b.expect(t, "a.example", false, 1)
	b.expect(t, "a.example", false, 1)
	b.expect(t, "b.example", false, 2)
	b.expect(t, "a.example", false, 2)
	b.expect(t, "b.example", false, 2)
}

// TestDomainCacheSeesBlocksAtOnce changes domain blocks through the store
// and requires the next decision to follow, whatever was remembered.
func TestDomainCacheSeesBlocksAtOnce(t *testing.T) {
	t.Parallel()
	b := setupDomains(t, time.Hour)
	b.expect(t, "sub.spam.example", false, 1)
	if err := b.st.AddDomainBlock(b.ctx, "spam.example", "test"); err != nil {
		t.Fatal(err)
	}
	b.expect(t, "sub.spam.example", true, 2)
	b.expect(t, "sub.spam.example", true, 2)
	if err := b.st.RemoveDomainBlock(b.ctx, "spam.example"); err != nil {
		t.Fatal(err)
	}
	b.expect(t, "sub.spam.example", false, 3)
	b.expect(t, "sub.spam.example", false, 3)
}

// TestDomainCacheTTL changes domain blocks the way another process would,
// through a store of its own, unseen by this store's change hook: the
// remembered decision holds until the TTL ends, not after.
func TestDomainCacheTTL(t *testing.T) {
	t.Parallel()
	b := setupDomains(t, time.Minute)
	other := storetest.Open(t, b.loc, storetest.Options{Synchronous: "NORMAL"})
	b.expect(t, "spam.example", false, 1)
	if err := store.New(other, "http://127.0.0.1:1", nil).AddDomainBlock(b.ctx, "spam.example", "elsewhere"); err != nil {
		t.Fatal(err)
	}
	b.advance(time.Minute - time.Millisecond)
	b.expect(t, "spam.example", false, 1)
	b.advance(time.Millisecond)
	b.expect(t, "spam.example", true, 2)
	// A clock that steps back does not stretch a decision's life.
	b.advance(-time.Hour)
	b.expect(t, "spam.example", true, 3)
}

// TestDomainCacheWriteDuringQuery changes domain blocks while a decision is
// being made: the decision answers that request but is not reused, since the
// change may have changed what it was made from.
func TestDomainCacheWriteDuringQuery(t *testing.T) {
	t.Parallel()
	b := setupDomains(t, time.Hour)
	var queries atomic.Int64
	c := newDomainCache(func(ctx context.Context, host string) (bool, error) {
		queries.Add(1)
		if err := b.st.AddDomainBlock(ctx, fmt.Sprintf("d%d.example", queries.Load()), ""); err != nil {
			return false, err
		}
		return false, nil
	}, time.Hour, b.clock)
	b.st.OnDomainBlocksChange(c.invalidate)
	for want := int64(1); want <= 3; want++ {
		if _, err := c.blocked(b.ctx, "a.example"); err != nil {
			t.Fatal(err)
		}
		if queries.Load() != want {
			t.Fatalf("%d queries, want %d", queries.Load(), want)
		}
	}
}

func TestDomainCacheOff(t *testing.T) {
	t.Parallel()
	b := setupDomains(t, -1)
	b.expect(t, "a.example", false, 1)
	b.expect(t, "a.example", false, 2)
}

// TestDomainCacheErrorsAreNotKept closes the database under the cache: the
// failure is returned, and nothing is remembered from it.
func TestDomainCacheErrorsAreNotKept(t *testing.T) {
	t.Parallel()
	b := setupDomains(t, time.Hour)
	b.expect(t, "a.example", false, 1)
	b.cache.invalidate()
	b.db.Close()
	for want := int64(2); want <= 3; want++ {
		if _, err := b.cache.blocked(b.ctx, "a.example"); err == nil {
			t.Fatal("no error from a closed database")
		}
		if n := b.queries.Load(); n != want {
			t.Fatalf("%d queries, want %d", n, want)
		}
	}
}

func TestDomainCacheIsBounded(t *testing.T) {
	t.Parallel()
	b := setupDomains(t, time.Hour)
	b.cache.limit = 16
	for i := range 40 {
		if _, err := b.cache.blocked(b.ctx, fmt.Sprintf("h%d.example", i)); err != nil {
			t.Fatal(err)
		}
	}
	b.cache.mu.Lock()
	n := len(b.cache.m)
	b.cache.mu.Unlock()
	if n > 16 {
		t.Fatalf("%d decisions kept, at most 16 allowed", n)
	}
}
