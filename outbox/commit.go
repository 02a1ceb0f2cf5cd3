package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// stmts prepares each statement once per transaction, so a batch of rows
// parses its SQL once instead of once per row; a statement in its cache is
// not parsed at all.
type stmts struct {
	ctx   context.Context
	tx    *sql.Tx
	cache *stmtCache
	m     map[string]*sql.Stmt
}

func newStmts(ctx context.Context, tx *sql.Tx, cache *stmtCache) *stmts {
	return &stmts{ctx: ctx, tx: tx, cache: cache, m: make(map[string]*sql.Stmt, 8)}
}

func (s *stmts) stmt(query string) (*sql.Stmt, error) {
	if st, ok := s.m[query]; ok {
		return st, nil
	}
	var st *sql.Stmt
	if ps := s.cache.get(query); ps != nil {
		// Reuses the statement prepared on the transaction's connection.
		st = s.tx.StmtContext(s.ctx, ps)
	} else {
		var err error
		if st, err = s.tx.PrepareContext(s.ctx, query); err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
	}
	s.m[query] = st
	return st, nil
}

// stmtCache keeps statements prepared on a pool across transactions. A
// transaction uses one through Tx.StmtContext, which reuses what is already
// prepared on its connection (preparing again only on a new connection).
// The nil *stmtCache is an empty cache.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex // guards m; never held across a call to the database
	m  map[string]*sql.Stmt
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: make(map[string]*sql.Stmt)}
}

func (c *stmtCache) get(query string) *sql.Stmt {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
}

// prepare prepares the queries not yet in the cache. It must not be called
// inside a transaction on the same pool: the writer pool has one
// connection, which that transaction holds. A query that fails to prepare
// stays out of the cache; the transaction then prepares it itself and
// reports the error in context. It reports whether every query is in the
// cache.
func (c *stmtCache) prepare(ctx context.Context, queries ...string) bool {
	all := true
	for _, q := range queries {
		if c.get(q) != nil {
			continue
		}
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			all = false
			continue
		}
		c.mu.Lock()
		if _, ok := c.m[q]; ok {
			_ = st.Close() // prepared meanwhile by another caller
		} else {
			c.m[q] = st
		}
		c.mu.Unlock()
	}
	return all
}

func (s *stmts) exec(query string, args ...any) (int64, error) {
	st, err := s.stmt(query)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(s.ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s *stmts) query(query string, args ...any) (*sql.Rows, error) {
	st, err := s.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(s.ctx, args...)
}

func (s *stmts) close() {
	for _, st := range s.m {
		_ = st.Close()
	}
}

// plainTx runs fn in one write transaction on db.
func plainTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// inTx runs fn in one write transaction on db.
func inTx(ctx context.Context, db *sql.DB, fn func(*stmts) error) error {
	return inCachedTx(ctx, db, nil, fn)
}

// inCachedTx runs fn in one write transaction on db, with the statements
// of cache (prepared on db) at hand.
func inCachedTx(ctx context.Context, db *sql.DB, cache *stmtCache, fn func(*stmts) error) error {
	return plainTx(ctx, db, func(tx *sql.Tx) error {
		s := newStmts(ctx, tx, cache)
		defer s.close() // before the commit or rollback
		return fn(s)
	})
}

// GroupConfig configures a Group.
type GroupConfig struct {
	// DB is the writer pool the group's transactions run on. Required
	// unless Tx is set.
	DB *sql.DB
	// Tx runs one write transaction: it begins one, calls fn and commits
	// when fn returns nil, rolling back otherwise. Default: BeginTx on DB
	// and Commit. A store whose transactions do more (such as running
	// after-commit hooks) passes its own transaction function here.
	Tx func(ctx context.Context, fn func(*sql.Tx) error) error
	// MaxSize bounds how many callers' items share one transaction
	// (default 64).
	MaxSize int
	// Timeout bounds the database work of one group: waiting for the
	// writer, the group's transaction and, when it fails, the transactions
	// that re-run its items one by one (default 30 s). A negative Timeout
	// sets no bound, for writes that must not be abandoned and whose
	// waits are bounded otherwise.
	Timeout time.Duration
}

// Group defaults.
const (
	DefaultGroupMaxSize = 64
	DefaultGroupTimeout = 30 * time.Second
)

func (c GroupConfig) withDefaults() GroupConfig {
	if c.MaxSize == 0 {
		c.MaxSize = DefaultGroupMaxSize
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultGroupTimeout
	}
	if c.Tx == nil && c.DB != nil {
		db := c.DB
		c.Tx = func(ctx context.Context, fn func(*sql.Tx) error) error { return plainTx(ctx, db, fn) }
	}
	return c
}

func (c GroupConfig) validate() error {
	switch {
	case c.Tx == nil:
		return errors.New("outbox: group: DB or Tx is required")
	case c.MaxSize < 1:
		return fmt.Errorf("outbox: group: MaxSize must be at least 1, not %d", c.MaxSize)
	}
	return nil
}

// Group commits the items of concurrent callers in one write transaction
// (group commit): a commit costs an fsync, so many small writes share one.
//
// There is no batching window. The first caller becomes the leader and
// writes what has queued up, its own item first, in one transaction; a
// group is therefore what queued up while the previous one was being
// written, so a lone caller is written at once and under load groups grow
// by themselves, up to MaxSize, to what arrives during one commit. When
// the leader's group is done it hands the lead to the first waiting
// caller, so no caller works for others indefinitely and no goroutine
// outlives its caller.
//
// When a group's transaction fails (one item's write failed, or the
// commit did), every item of the group is written again alone, so one bad
// item cannot fail the others: each caller gets the error of its own
// transaction. The write function may therefore see an item twice and
// must derive everything it writes, and any result it records in the
// item, from the item itself.
//
// A Group is safe for concurrent use.
type Group[T any] struct {
	cfg   GroupConfig
	write func(ctx context.Context, tx *sql.Tx, batch []T) error

	mu      sync.Mutex
	queue   []*groupOp[T] // waiting callers, oldest first
	leading bool          // a caller is leading; when false, queue is empty
}

type groupOp[T any] struct {
	item T
	err  error
	// promoted is set, under the group's lock, when the op is handed the
	// lead; its caller then leads instead of reading err.
	promoted bool
	wake     chan struct{} // one send: the op is done or promoted
}

// NewGroup returns a Group that writes a batch of items with write, in a
// transaction of cfg.Tx. write gets a context without deadline or
// cancellation (the statements of an IMMEDIATE transaction cannot wait for
// another writer, and a statement under a context that can end costs the
// driver a watcher goroutine), carrying the values of the leading caller's
// context.
func NewGroup[T any](cfg GroupConfig, write func(ctx context.Context, tx *sql.Tx, batch []T) error) (*Group[T], error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if write == nil {
		return nil, errors.New("outbox: group: nil write function")
	}
	return &Group[T]{cfg: cfg, write: write}, nil
}

// Do writes item in a write transaction, possibly shared with other
// callers' items, and returns the error of the transaction that wrote it
// (nil: committed).
//
// If ctx ends while item is still waiting for its group, item is withdrawn
// and Do returns ctx's error: nothing of it was written. Once its group has
// begun, the write runs to its end under the group's Timeout whatever
// becomes of ctx, so Do never returns while item may still be in use.
func (g *Group[T]) Do(ctx context.Context, item T) error {
	op := &groupOp[T]{item: item, wake: make(chan struct{}, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, op)
	if g.leading {
		g.mu.Unlock()
		if err := g.wait(ctx, op); err != nil {
			return err
		}
		if !op.promoted {
			return op.err
		}
	} else {
		g.leading = true
		g.mu.Unlock()
	}
	// Leading. The op is first in the queue (the queue was empty, or it
	// was promoted as the oldest waiting caller), so the first group holds
	// it.
	g.mu.Lock()
	n := min(len(g.queue), g.cfg.MaxSize)
	group := g.queue[:n:n]
	g.queue = append([]*groupOp[T](nil), g.queue[n:]...)
	g.mu.Unlock()

	gctx := context.WithoutCancel(ctx)
	if g.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		gctx, cancel = context.WithTimeout(gctx, g.cfg.Timeout)
		defer cancel()
	}
	g.commit(gctx, group)

	for _, o := range group {
		if o != op {
			o.wake <- struct{}{}
		}
	}
	// Hand the lead over last: what the woken callers queue meanwhile
	// joins the next group.
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.leading = false
	} else {
		next := g.queue[0]
		next.promoted = true
		next.wake <- struct{}{}
	}
	g.mu.Unlock()
	return op.err
}

// wait waits until op is done or promoted. When ctx ends first and op is
// still queued, it withdraws op and returns ctx's error.
func (g *Group[T]) wait(ctx context.Context, op *groupOp[T]) error {
	select {
	case <-op.wake:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	if !op.promoted {
		for i, o := range g.queue {
			if o == op {
				g.queue = append(g.queue[:i], g.queue[i+1:]...)
				g.mu.Unlock()
				return fmt.Errorf("outbox: group: %w", ctx.Err())
			}
		}
	}
	g.mu.Unlock()
	// Taken into a group, or promoted: the outcome or the lead is on its
	// way.
	<-op.wake
	return nil
}

// commit writes group in one transaction; when that fails, each item is
// written again alone.
func (g *Group[T]) commit(ctx context.Context, group []*groupOp[T]) {
	wctx := context.WithoutCancel(ctx)
	batch := make([]T, len(group))
	for i, o := range group {
		batch[i] = o.item
	}
	err := g.cfg.Tx(ctx, func(tx *sql.Tx) error { return g.write(wctx, tx, batch) })
	if err == nil || len(group) == 1 {
		for _, o := range group {
			o.err = err
		}
		return
	}
	for i, o := range group {
		o.err = g.cfg.Tx(ctx, func(tx *sql.Tx) error { return g.write(wctx, tx, batch[i:i+1:i+1]) })
	}
}

// queued reports how many callers wait for a group.
func (g *Group[T]) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// committer is the Runner's group of ledger writes: each item is a
// function of the group's statements.
type committer = Group[func(*stmts) error]

// newCommitter returns the Runner's group on the writer pool db. Its
// groups have no timeout: a ledger write, a settle above all, is not
// abandoned (the callers pass contexts without cancellation for the same
// reason), and the writer's busy timeout bounds a wait for another
// process.
func newCommitter(db *sql.DB, maxGroup int) (*committer, error) {
	return NewGroup(GroupConfig{DB: db, MaxSize: maxGroup, Timeout: -1}, writeStmts)
}

// writeStmts runs fns with one set of statements, prepared once per
// transaction for all of them.
func writeStmts(ctx context.Context, tx *sql.Tx, fns []func(*stmts) error) error {
	s := newStmts(ctx, tx, nil)
	defer s.close()
	for _, fn := range fns {
		if err := fn(s); err != nil {
			return err
		}
	}
	return nil
}
