// Package migrations holds courier's schema as numbered SQL files embedded in
// the binary, and the runner that applies them.
//
// Every table of every package is created here, because one database needs
// one ordered line of migrations. Files are named NNNN_name.sql; the number is
// the version. The SQLite files sit in this folder, their PostgreSQL twins in
// postgres/, numbered in step: version N means the same schema on both
// stores (TestDialectsInStep holds them to it). The runner is safe against a
// concurrent runner on the same database (the server and the worker both
// migrate at start-up): each version is applied in its own write transaction
// that first re-reads what is already applied, so the loser of a race skips
// what the winner did. On SQLite the transaction's write lock (BEGIN
// IMMEDIATE) makes the re-read and the apply one step; on PostgreSQL a
// transaction-scoped advisory lock does.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/courier-ap/courier/sqldb"
)

//go:embed *.sql postgres/*.sql
var files embed.FS

// Dialect names a store's SQL dialect.
type Dialect string

// The dialects courier's migrations are written in.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// dir is the embedded folder of d's files.
func (d Dialect) dir() string {
	if d == Postgres {
		return "postgres"
	}
	return "."
}

// ErrTooNew is returned when the database carries a schema version this
// binary does not know: it was migrated by a newer courier.
var ErrTooNew = errors.New("migrations: database schema is newer than this binary")

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns the embedded SQLite migrations in version order, a copy the
// caller may change.
func All() ([]Migration, error) { return AllOf(SQLite) }

// AllOf returns the embedded migrations of dialect d in version order, a
// copy the caller may change.
func AllOf(d Dialect) ([]Migration, error) {
	ms, err := embedded(d)
	return slices.Clone(ms), err
}

var (
	embeddedSQLite   = sync.OnceValues(func() ([]Migration, error) { return parse(SQLite) })
	embeddedPostgres = sync.OnceValues(func() ([]Migration, error) { return parse(Postgres) })
)

// embedded reads and parses d's embedded files once; its result is shared
// and must not be changed.
func embedded(d Dialect) ([]Migration, error) {
	if d == Postgres {
		return embeddedPostgres()
	}
	return embeddedSQLite()
}

// parse reads d's embedded files into migrations in version order.
func parse(d Dialect) ([]Migration, error) {
	entries, err := fs.Glob(files, path.Join(d.dir(), "*.sql"))
	if err != nil {
		return nil, fmt.Errorf("migrations: list: %w", err)
	}
	var ms []Migration
	seen := map[int]string{}
	for _, file := range entries {
		name := path.Base(file)
		num, rest, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migrations: %s: want NNNN_name.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migrations: %s: bad version %q", name, num)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations: version %d used by %s and %s", v, prev, name)
		}
		seen[v] = name
		body, err := files.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", name, err)
		}
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(rest, ".sql"), SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// Latest is the highest version this binary knows (the same for both
// dialects).
func Latest() int {
	ms, err := embedded(SQLite)
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Options tunes Apply. The zero value is the production setting.
type Options struct {
	// Logger receives one line per applied migration. Nil discards.
	Logger *slog.Logger
	// Retries is how many times a failed attempt is retried (default 5).
	Retries int
	// MinDelay and MaxDelay bound the retry backoff (defaults 100 ms and 1 s).
	MinDelay, MaxDelay time.Duration
	// Dialect is the store's dialect (default: the dialect of the pool
	// Apply is given, sqldb.DialectOf; SQLite for a pool opened elsewhere).
	Dialect Dialect
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Retries <= 0 {
		o.Retries = 5
	}
	if o.MinDelay <= 0 {
		o.MinDelay = 100 * time.Millisecond
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = time.Second
	}
	if o.Dialect == "" {
		o.Dialect = SQLite
	}
	return o
}

// Apply brings db up to the latest version. On SQLite db must begin its
// transactions with a write lock (BEGIN IMMEDIATE), as sqlite.Open's writer
// does, so that the re-read of applied versions and the apply are one atomic
// step; on PostgreSQL (opts.Dialect) each transaction first takes an
// advisory lock that every runner takes.
//
// A lost race with another runner is retried with a bounded backoff (100 ms
// doubling to 1 s, 5 tries); only an error that persists is returned.
// ErrTooNew is returned at once.
func Apply(ctx context.Context, db *sql.DB, opts Options) (applied []int, err error) {
	if opts.Dialect == "" && sqldb.DialectOf(db) == sqldb.Postgres {
		opts.Dialect = Postgres
	}
	opts = opts.withDefaults()
	ms, err := embedded(opts.Dialect)
	if err != nil {
		return nil, err
	}
	q := queriesOf(opts.Dialect)
	delay := opts.MinDelay
	for try := 0; ; try++ {
		applied, err = apply(ctx, db, q, ms, opts.Logger)
		if err == nil || errors.Is(err, ErrTooNew) || try >= opts.Retries || ctx.Err() != nil {
			return applied, err
		}
		opts.Logger.WarnContext(ctx, "migration attempt failed; retrying", "err", err, "delay", delay)
		select {
		case <-ctx.Done():
			return applied, err
		case <-time.After(delay):
		}
		delay = min(delay*2, opts.MaxDelay)
	}
}

// queries are the runner's own statements in one dialect.
type queries struct {
	// lock, when set, runs first in every transaction of the runner.
	lock        string
	createTable string
	isApplied   string
	record      string
}

// advisoryKey is the PostgreSQL advisory lock every migration runner takes
// (an arbitrary constant: "courier" in ASCII).
const advisoryKey = 0x636f7572696572

func queriesOf(d Dialect) queries {
	if d == Postgres {
		return queries{
			lock: fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d)`, advisoryKey),
			createTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at BIGINT  NOT NULL
)`,
			isApplied: `SELECT COUNT(*) FROM schema_migrations WHERE version = $1`,
			record:    `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
		}
	}
	return queries{
		createTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
)`,
		isApplied: `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`,
		record:    `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
	}
}

// begin starts one runner transaction, under the dialect's lock.
func (q queries) begin(ctx context.Context, db *sql.DB) (*sql.Tx, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if q.lock != "" {
		if _, err := tx.ExecContext(ctx, q.lock); err != nil {
			tx.Rollback() //nolint:errcheck // the lock failed
			return nil, err
		}
	}
	return tx, nil
}

func apply(ctx context.Context, db *sql.DB, q queries, ms []Migration, log *slog.Logger) ([]int, error) {
	tx, err := q.begin(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("migrations: begin: %w", err)
	}
	if _, err := tx.ExecContext(ctx, q.createTable); err != nil {
		tx.Rollback() //nolint:errcheck // reported below
		return nil, fmt.Errorf("migrations: create schema_migrations: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("migrations: create schema_migrations: %w", err)
	}
	var done []int
	latest := 0
	if len(ms) > 0 {
		latest = ms[len(ms)-1].Version
	}
	for _, m := range ms {
		ok, err := applyOne(ctx, db, q, m, latest)
		if err != nil {
			return done, err
		}
		if ok {
			done = append(done, m.Version)
			log.InfoContext(ctx, "migration applied", "version", m.Version, "name", m.Name)
		}
	}
	return done, nil
}

// applyOne applies m unless it is already recorded; the check and the apply
// share one write transaction. It first refuses a database newer than
// latest (ErrTooNew), whether or not m is pending, so apply checks every
// database, one with nothing pending too (ms is never empty: the embed
// pattern must match a file).
func applyOne(ctx context.Context, db *sql.DB, q queries, m Migration, latest int) (bool, error) {
	tx, err := q.begin(ctx, db)
	if err != nil {
		return false, fmt.Errorf("migrations: begin %d: %w", m.Version, err)
	}
	defer tx.Rollback() //nolint:errcheck // rollback after commit is a no-op
	var max sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&max); err != nil {
		return false, fmt.Errorf("migrations: read applied: %w", err)
	}
	if int(max.Int64) > latest {
		return false, tooNew(int(max.Int64), latest)
	}
	var n int
	if err := tx.QueryRowContext(ctx, q.isApplied, m.Version).Scan(&n); err != nil {
		return false, fmt.Errorf("migrations: read applied: %w", err)
	}
	if n > 0 {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return false, fmt.Errorf("migrations: apply %04d_%s: %w", m.Version, m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, q.record, m.Version, m.Name, time.Now().UnixMilli()); err != nil {
		return false, fmt.Errorf("migrations: record %d: %w", m.Version, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migrations: commit %d: %w", m.Version, err)
	}
	return true, nil
}

// Current returns the highest applied version, or ErrTooNew (wrapped with
// both versions) when it exceeds latest.
func Current(ctx context.Context, db *sql.DB, latest int) (int, error) {
	var max sql.NullInt64
	err := db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&max)
	if err != nil {
		return 0, fmt.Errorf("migrations: read applied: %w", err)
	}
	if int(max.Int64) > latest {
		return int(max.Int64), tooNew(int(max.Int64), latest)
	}
	return int(max.Int64), nil
}

func tooNew(have, know int) error {
	return fmt.Errorf("%w: database is at version %d, this courier knows up to %d; run a newer courier", ErrTooNew, have, know)
}
