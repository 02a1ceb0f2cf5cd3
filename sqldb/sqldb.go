// Package sqldb is the database handle every package of courier shares,
// whichever store is behind it: the embedded SQLite file (package sqlite) or
// a PostgreSQL server (package postgres). Both open a *DB; the packages that
// own tables take it, run their writes through DB.Tx, and ask Dialect only
// for the few statements whose dialects must differ.
//
// The SQL courier writes uses ? placeholders; SQLite binds them natively and
// package postgres numbers them ($1, $2, ...) in its driver, outside quoted
// text, so one statement text serves both stores where the dialects agree.
package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// Dialect names the store behind a DB.
type Dialect int

const (
	// SQLite is the embedded default: one file, one writer connection.
	SQLite Dialect = iota
	// Postgres is PostgreSQL: one pool shared by reads and writes, rows
	// claimed with FOR UPDATE SKIP LOCKED, idle workers woken by NOTIFY.
	Postgres
)

func (d Dialect) String() string {
	if d == Postgres {
		return "postgres"
	}
	return "sqlite"
}

// Deferred begins a statement whose result its caller never reads: on
// PostgreSQL, inside a transaction, the driver holds it and sends it with
// the transaction's next round trip (the next statement, or the COMMIT), in
// order, so it costs no round trip of its own. Its failure is returned by
// that later statement or by the commit, and fails the transaction as it
// would have. Outside a transaction, and on SQLite (where it is a comment),
// the statement runs at once. The Result of such an Exec holds nothing.
const Deferred = "/* deferred */ "

// DB is one opened store.
type DB struct {
	// Write runs writes. On SQLite it is the single writer connection whose
	// transactions begin IMMEDIATE; on PostgreSQL it is the pool.
	Write *sql.DB
	// Read runs reads beside the writer. On SQLite a query-only pool; on
	// PostgreSQL the same pool as Write.
	Read *sql.DB
	// Dialect says which store this is.
	Dialect Dialect
	// Name is the file path, or the URL without its password, for messages.
	Name string

	closeFn func() error
	mu      sync.Mutex
	onWrite []func()
}

// New wraps opened pools; package sqlite and package postgres call it.
// closeFn closes everything New's caller opened.
func New(write, read *sql.DB, d Dialect, name string, closeFn func() error) *DB {
	dialects.Store(write, d)
	dialects.Store(read, d)
	return &DB{Write: write, Read: read, Dialect: d, Name: name, closeFn: closeFn}
}

// dialects maps every pool New wrapped to its store's dialect.
var dialects sync.Map // *sql.DB -> Dialect

// DialectOf returns the dialect of a pool a DB holds (Write or Read), for
// code handed a bare *sql.DB; SQLite for a pool opened elsewhere.
func DialectOf(pool *sql.DB) Dialect {
	if d, ok := dialects.Load(pool); ok {
		return d.(Dialect)
	}
	return SQLite
}

// Postgres reports whether the store is PostgreSQL.
func (db *DB) Postgres() bool { return db.Dialect == Postgres }

// Close closes the pools.
func (db *DB) Close() error {
	dialects.Delete(db.Write)
	dialects.Delete(db.Read)
	if db.closeFn == nil {
		return errors.Join(db.Read.Close(), db.Write.Close())
	}
	return db.closeFn()
}

// OnWrite registers fn to run after every transaction committed through Tx
// in this process, and (on PostgreSQL) whenever another process announces
// new events. The outbox worker uses it to wake on enqueue instead of
// polling. fn must not block.
func (db *DB) OnWrite(fn func()) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.onWrite = append(db.onWrite, fn)
}

// Wake runs the OnWrite hooks, as a commit does.
func (db *DB) Wake() {
	db.mu.Lock()
	hooks := db.onWrite
	db.mu.Unlock()
	for _, h := range hooks {
		h()
	}
}

// Tx runs fn in one write transaction and commits it when fn returns nil;
// any error rolls everything back. After a commit the OnWrite hooks run.
// This is the one way use cases get a transaction: they never open one
// themselves. On SQLite the transaction holds the file's write lock from its
// first statement (IMMEDIATE), so transactions run one after another; on
// PostgreSQL it runs at READ COMMITTED beside others, and the statements
// that must not interleave take row locks or are single conditional updates.
func (db *DB) Tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := db.Write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: begin: %w", db.Dialect, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: commit: %w", db.Dialect, err)
	}
	db.Wake()
	return nil
}
