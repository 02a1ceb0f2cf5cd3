package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-ap/courier/sqldb"
)

// Channel is the NOTIFY channel on which a transaction that enqueued events
// (or appended to an actor's inbox view, package app) announces them, and on
// which idle workers and open event streams of every process listen.
const Channel = "courier_events"

// notifyEvery is the debounce of announcements: a process sends at most one
// NOTIFY in a transaction per interval; an enqueue inside the interval is
// announced by one NOTIFY sent after the interval, once its transaction has
// committed. PostgreSQL serialises the commits of notifying transactions, so
// a NOTIFY per enqueue would cap the enqueue rate.
const notifyEvery = 20 * time.Millisecond

// connector wraps pgx's connector: every statement's ? placeholders are
// numbered (Rebind), a transaction's sqldb.Deferred statements are held and
// sent with its next round trip, and a transaction that inserted into
// event_queue sends a debounced NOTIFY with its commit.
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
	held     []held // the transaction's deferred statements, in order
}

// held is a deferred statement (sqldb.Deferred) waiting for its
// transaction's next round trip.
type held struct {
	sql  string
	args []any
}

// maxHeld bounds the statements a transaction holds: the next one is sent
// with those held, in one round trip.
const maxHeld = 64

// errHeld is what the Result of a deferred statement answers: it was held,
// not run.
var errHeld = errors.New("postgres: a deferred statement has no result")

type heldResult struct{}

func (heldResult) LastInsertId() (int64, error) { return 0, errHeld }
func (heldResult) RowsAffected() (int64, error) { return 0, errHeld }

func (c *conn) note(query string) {
	if c.inTx && !c.enqueued && (strings.Contains(query, "INSERT INTO event_queue") ||
		strings.Contains(query, "INSERT INTO app_inbox_items") ||
		strings.Contains(query, "INSERT INTO app_outbox_items")) {
		c.enqueued = true
	}
}

func (c *conn) pgx() *pgx.Conn { return c.Conn.(*stdlib.Conn).Conn() }

// send runs the held statements and then extra (each a statement's SQL and
// arguments) in one pipeline, one round trip, and returns the command tag
// of the last of extra. The held statements are gone whatever happens: on
// an error the transaction has failed.
func (c *conn) send(ctx context.Context, extra ...held) (string, int64, error) {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(c.held)+len(extra))}
	for _, h := range c.held {
		b.Queue(h.sql, h.args...)
	}
	for _, h := range extra {
		b.Queue(h.sql, h.args...)
	}
	deferred := len(c.held)
	c.held = nil
	br := c.pgx().SendBatch(ctx, b)
	var (
		tag  string
		rows int64
	)
	for i := range b.QueuedQueries {
		ct, err := br.Exec()
		if err != nil {
			_ = br.Close()
			if i < deferred {
				return "", 0, fmt.Errorf("deferred statement: %w", err)
			}
			return "", 0, err
		}
		tag, rows = ct.String(), ct.RowsAffected()
	}
	if err := br.Close(); err != nil {
		return "", 0, err
	}
	return tag, rows, nil
}

// flush sends the held statements, if any, before a statement that cannot
// go in their pipeline (a query, a prepared statement's execution).
func (c *conn) flush(ctx context.Context) error {
	if len(c.held) == 0 {
		return nil
	}
	_, _, err := c.send(ctx)
	return err
}

func values(args []driver.NamedValue) []any {
	vs := make([]any, len(args))
	for i, a := range args {
		vs[i] = a.Value
	}
	return vs
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext prepares query on the connection (a session's prepared
// statement needs no transaction, so the held statements stay held); its
// executions send them first.
func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.note(query)
	st, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, Rebind(query))
	if err != nil {
		return nil, err
	}
	return &stmt{Stmt: st, c: c}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.note(query)
	if c.inTx && strings.HasPrefix(query, sqldb.Deferred) {
		if len(c.held) >= maxHeld {
			if err := c.flush(ctx); err != nil {
				return nil, err
			}
		}
		c.held = append(c.held, held{Rebind(query), values(args)})
		return heldResult{}, nil
	}
	if len(c.held) > 0 {
		_, n, err := c.send(ctx, held{Rebind(query), values(args)})
		if err != nil {
			return nil, err
		}
		return driver.RowsAffected(n), nil
	}
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, Rebind(query), args)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.note(query)
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, Rebind(query), args)
}

// stmt is a prepared statement of conn: the statements its transaction
// holds go before each execution.
type stmt struct {
	driver.Stmt
	c *conn
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if err := s.c.flush(ctx); err != nil {
		return nil, err
	}
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if err := s.c.flush(ctx); err != nil {
		return nil, err
	}
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.inTx, c.enqueued, c.held = true, false, nil
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

// notifySQL announces new events on Channel.
const notifySQL = `SELECT pg_notify('` + Channel + `', '')`

// Commit commits the transaction. With statements held or a NOTIFY due,
// they and the COMMIT go in one pipeline, one round trip; the pgx
// transaction is then over without its own Commit, which would send a
// second one.
func (t *txn) Commit() error {
	c := t.c
	enqueued := c.enqueued
	c.inTx, c.enqueued = false, false
	notify := enqueued && c.n.inTx()
	if len(c.held) == 0 && !notify {
		if err := t.Tx.Commit(); err != nil {
			return err
		}
	} else {
		var last []held
		if notify {
			last = append(last, held{sql: notifySQL})
		}
		last = append(last, held{sql: "commit"})
		tag, _, err := c.send(context.Background(), last...)
		if err == nil && tag != "COMMIT" {
			err = pgx.ErrTxCommitRollback // the transaction had failed
		}
		if err != nil {
			if c.pgx().PgConn().TxStatus() != 'I' {
				_ = t.Tx.Rollback()
			}
			return err
		}
	}
	if enqueued && !notify {
		c.n.after()
	}
	return nil
}

func (t *txn) Rollback() error {
	t.c.inTx, t.c.enqueued, t.c.held = false, false, nil
	return t.Tx.Rollback()
}
