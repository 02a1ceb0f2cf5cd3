package postgres

import (
	"context"
	"database/sql/driver"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Channel is the NOTIFY channel on which a transaction that enqueued events
// announces them, and on which idle workers of every process listen.
const Channel = "courier_events"

// notifyEvery is the debounce of announcements: a process sends at most one
// NOTIFY in a transaction per interval; an enqueue inside the interval is
// announced by one NOTIFY sent after the interval, once its transaction has
// committed. PostgreSQL serialises the commits of notifying transactions, so
// a NOTIFY per enqueue would cap the enqueue rate.
const notifyEvery = 20 * time.Millisecond

// connector wraps pgx's connector: every statement's ? placeholders are
// numbered (Rebind), and a transaction that inserted into event_queue sends
// a debounced NOTIFY before it commits.
type connector struct {
	inner driver.Connector
	n     *notifier
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: dc, n: c.n}, nil
}

func (c *connector) Driver() driver.Driver { return c.inner.Driver() }

// notifier debounces announcements for one process's pool.
type notifier struct {
	last    atomic.Int64 // unix nanoseconds of the last NOTIFY sent
	mu      sync.Mutex
	pending bool
	send    func() // sends a NOTIFY outside any transaction
}

// inTx reports whether a committing transaction should carry the NOTIFY
// itself; false means one is due later (after).
func (n *notifier) inTx() bool {
	now := time.Now().UnixNano()
	last := n.last.Load()
	if now-last >= int64(notifyEvery) && n.last.CompareAndSwap(last, now) {
		return true
	}
	return false
}

// after arms the one deferred NOTIFY that covers the commits debounced in
// this interval.
func (n *notifier) after() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending || n.send == nil {
		return
	}
	n.pending = true
	wait := time.Duration(n.last.Load()+int64(notifyEvery)-time.Now().UnixNano()) + time.Millisecond
	time.AfterFunc(max(wait, time.Millisecond), func() {
		n.mu.Lock()
		n.pending = false
		n.mu.Unlock()
		n.last.Store(time.Now().UnixNano())
		n.send()
	})
}

type conn struct {
	driver.Conn
	n        *notifier
	inTx     bool
	enqueued bool
}

func (c *conn) note(query string) {
	if c.inTx && !c.enqueued && strings.Contains(query, "INSERT INTO event_queue") {
		c.enqueued = true
	}
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	c.note(query)
	return c.Conn.Prepare(Rebind(query))
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.note(query)
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, Rebind(query))
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.note(query)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, Rebind(query), args)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.note(query)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, Rebind(query), args)
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.inTx, c.enqueued = true, false
	return &txn{Tx: tx, c: c}, nil
}

func (c *conn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *conn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

// CheckNamedValue passes a Go bool as 1 or 0: courier's flags are 0/1
// integers in both stores (SQLite has no boolean type), and PostgreSQL will
// not put a boolean in an integer column by itself.
func (c *conn) CheckNamedValue(v *driver.NamedValue) error {
	if b, ok := v.Value.(bool); ok {
		v.Value = int64(0)
		if b {
			v.Value = int64(1)
		}
		return nil
	}
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(v)
}

type txn struct {
	driver.Tx
	c *conn
}

func (t *txn) Commit() error {
	c := t.c
	enqueued := c.enqueued
	c.inTx, c.enqueued = false, false
	deferred := false
	if enqueued {
		if c.n.inTx() {
			if _, err := c.Conn.(driver.ExecerContext).ExecContext(context.Background(),
				`SELECT pg_notify('`+Channel+`', '')`, nil); err != nil {
				_ = t.Tx.Rollback()
				return err
			}
		} else {
			deferred = true
		}
	}
	if err := t.Tx.Commit(); err != nil {
		return err
	}
	if deferred {
		c.n.after()
	}
	return nil
}

func (t *txn) Rollback() error {
	t.c.inTx, t.c.enqueued = false, false
	return t.Tx.Rollback()
}
