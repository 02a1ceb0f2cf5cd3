// Package storetest opens a real, migrated store for tests: a SQLite file in
// the test's temporary directory, or with COURIER_TEST_STORE=postgres a new
// database on a throwaway PostgreSQL cluster (package pgtest). A package's
// tests that touch SQL open their stores here, so the same tests run once
// per store: `go test ./...` on SQLite, and again with
// COURIER_TEST_STORE=postgres (as .ci/run does).
package storetest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/postgres"
	"github.com/courier-ap/courier/postgres/pgtest"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqlite"
)

// EnvStore selects the store: "sqlite" (default) or "postgres".
const EnvStore = "COURIER_TEST_STORE"

// Dialect is the store the tests of this run use.
func Dialect() sqldb.Dialect {
	if os.Getenv(EnvStore) == "postgres" {
		return sqldb.Postgres
	}
	return sqldb.SQLite
}

// Main runs a package's tests and stops the PostgreSQL cluster they
// started, if any: from TestMain, os.Exit(storetest.Main(m)).
func Main(m *testing.M) int { return pgtest.Main(m) }

// Location returns where a new, empty store for t lives: a file path in
// t's temporary directory, or the URL of a new PostgreSQL database. Open
// it (several times, or from a child process) with Open.
func Location(t testing.TB) string {
	t.Helper()
	if Dialect() == sqldb.Postgres {
		return pgtest.DSN(t)
	}
	return filepath.Join(t.TempDir(), "courier.db")
}

// Options tunes Open; the zero value is the production setting.
type Options struct {
	// Synchronous is SQLite's synchronous mode (default FULL).
	Synchronous string
	// ReadConns is SQLite's read pool (default 4).
	ReadConns int
	// MaxConns is PostgreSQL's pool (default 16).
	MaxConns int
	// Listen makes a PostgreSQL store listen for announced events.
	Listen bool
}

// Open opens the store at loc (a path or a postgres:// URL) and migrates
// it; it is closed when t ends.
func Open(t testing.TB, loc string, opts Options) *sqldb.DB {
	t.Helper()
	db, err := OpenAt(context.Background(), loc, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// OpenAt is Open for code without a testing.TB (a test's child process):
// the caller closes the store.
func OpenAt(ctx context.Context, loc string, opts Options) (*sqldb.DB, error) {
	var (
		db  *sqldb.DB
		err error
	)
	if postgres.IsURL(loc) {
		db, err = postgres.Open(ctx, loc, postgres.Options{MaxConns: opts.MaxConns, Listen: opts.Listen})
	} else {
		db, err = sqlite.Open(ctx, loc, sqlite.Options{Synchronous: opts.Synchronous, ReadConns: opts.ReadConns})
	}
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Apply(ctx, db.Write, migrations.Options{}); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// New opens a new, empty, migrated store for t.
func New(t testing.TB) *sqldb.DB {
	t.Helper()
	return Open(t, Location(t), Options{})
}
