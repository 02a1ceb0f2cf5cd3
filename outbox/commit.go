package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
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

// inTx runs fn in one write transaction on db.
func inTx(ctx context.Context, db *sql.DB, fn func(*stmts) error) error {
	return inCachedTx(ctx, db, nil, fn)
}

// inCachedTx runs fn in one write transaction on db, with the statements
// of cache (prepared on db) at hand.
func inCachedTx(ctx context.Context, db *sql.DB, cache *stmtCache, fn func(*stmts) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	s := newStmts(ctx, tx, cache)
	if err := fn(s); err != nil {
		s.close()
		_ = tx.Rollback()
		return err
	}
	s.close()
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// committer groups writes of concurrent callers into one transaction (group
// commit): a commit costs an fsync, so many small writes share one. The first
// caller becomes the leader and commits what has queued up; when its own write
// is done it hands the lead to a waiting caller, so no caller works for others
// indefinitely and no goroutine outlives its caller.
type committer struct {
	db       *sql.DB
	maxGroup int

	mu      sync.Mutex
	queue   []*commitOp
	leading bool
}

type commitOp struct {
	fn       func(*stmts) error
	err      error
	finished bool
	promoted bool
	wake     chan struct{}
}

func newCommitter(db *sql.DB, maxGroup int) *committer {
	return &committer{db: db, maxGroup: maxGroup}
}

// do runs fn in a write transaction, possibly shared with other callers'
// functions, and returns fn's error or the transaction's. fn may run twice
// (once in a group that failed, once alone), so it must derive everything
// from its own arguments. ctx bounds the database work of the group.
func (c *committer) do(ctx context.Context, fn func(*stmts) error) error {
	op := &commitOp{fn: fn, wake: make(chan struct{}, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, op)
	if c.leading {
		c.mu.Unlock()
		<-op.wake
		if !op.promoted {
			return op.err
		}
	} else {
		c.leading = true
		c.mu.Unlock()
	}
	for {
		c.mu.Lock()
		if op.finished {
			if len(c.queue) == 0 {
				c.leading = false
			} else {
				next := c.queue[0]
				next.promoted = true
				next.wake <- struct{}{}
			}
			c.mu.Unlock()
			return op.err
		}
		n := min(len(c.queue), c.maxGroup)
		group := c.queue[:n:n]
		c.queue = append([]*commitOp(nil), c.queue[n:]...)
		c.mu.Unlock()
		c.run(ctx, group)
		for _, o := range group {
			if o != op {
				o.wake <- struct{}{}
			}
		}
	}
}

// run commits group in one transaction; if that fails, each function runs
// again alone so one bad write does not fail the others.
func (c *committer) run(ctx context.Context, group []*commitOp) {
	err := inTx(ctx, c.db, func(s *stmts) error {
		for _, o := range group {
			if err := o.fn(s); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(group) == 1 {
		for _, o := range group {
			o.err, o.finished = err, true
		}
		return
	}
	for _, o := range group {
		o.err = inTx(ctx, c.db, o.fn)
		o.finished = true
	}
}
