// Package migrations holds courier's schema as numbered SQL files embedded in
// the binary, and the runner that applies them.
//
// Every table of every package is created here, because one SQLite file needs
// one ordered line of migrations. Files are named NNNN_name.sql; the number is
// the version. The runner is safe against a concurrent runner on the same
// database (the server and the worker both migrate at start-up): each version
// is applied in its own write transaction that first re-reads what is already
// applied, so the loser of a race skips what the winner did.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed *.sql
var files embed.FS

// ErrTooNew is returned when the database carries a schema version this
// binary does not know: it was migrated by a newer courier.
var ErrTooNew = errors.New("migrations: database schema is newer than this binary")

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns the embedded migrations in version order, a copy the caller
// may change.
func All() ([]Migration, error) {
	ms, err := embedded()
	return slices.Clone(ms), err
}

// embedded reads and parses the embedded files once; its result is shared
// and must not be changed.
var embedded = sync.OnceValues(parse)

// parse reads the embedded files into migrations in version order.
func parse() ([]Migration, error) {
	entries, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: list: %w", err)
	}
	var ms []Migration
	seen := map[int]string{}
	for _, name := range entries {
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
		body, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", name, err)
		}
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(rest, ".sql"), SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// Latest is the highest version this binary knows.
func Latest() int {
	ms, err := embedded()
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
	return o
}

// Apply brings db up to the latest version. db must begin its transactions
// with a write lock (BEGIN IMMEDIATE), as sqlite.Open's writer does, so that
// the re-read of applied versions and the apply are one atomic step.
//
// A lost race with another runner is retried with a bounded backoff (100 ms
// doubling to 1 s, 5 tries); only an error that persists is returned.
// ErrTooNew is returned at once.
func Apply(ctx context.Context, db *sql.DB, opts Options) (applied []int, err error) {
	opts = opts.withDefaults()
	ms, err := embedded()
	if err != nil {
		return nil, err
	}
	delay := opts.MinDelay
	for try := 0; ; try++ {
		applied, err = apply(ctx, db, ms, opts.Logger)
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

const createTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
)`

func apply(ctx context.Context, db *sql.DB, ms []Migration, log *slog.Logger) ([]int, error) {
	if _, err := db.ExecContext(ctx, createTable); err != nil {
		return nil, fmt.Errorf("migrations: create schema_migrations: %w", err)
	}
	var done []int
	latest := 0
	if len(ms) > 0 {
		latest = ms[len(ms)-1].Version
	}
	for _, m := range ms {
		ok, err := applyOne(ctx, db, m, latest)
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
func applyOne(ctx context.Context, db *sql.DB, m Migration, latest int) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
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
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil {
		return false, fmt.Errorf("migrations: read applied: %w", err)
	}
	if n > 0 {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return false, fmt.Errorf("migrations: apply %04d_%s: %w", m.Version, m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.Version, m.Name, time.Now().UnixMilli()); err != nil {
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
