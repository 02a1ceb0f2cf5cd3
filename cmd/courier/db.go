package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/postgres"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqlite"
)

// openDB opens the store --db names (a SQLite file, or a postgres:// URL)
// and migrates it; server and worker both do this at start-up, and the
// migration runner is safe against the other doing it at the same moment
// (SQLite's write lock, PostgreSQL's advisory lock). listen makes a
// PostgreSQL process listen for other processes' announcements of new
// events (serve and worker; not one-shot commands).
//
// The store is logged and named in errors by sqldb.DB.Name: the file path,
// or the URL with its password replaced.
func openDB(ctx context.Context, cfg Config, logger *slog.Logger, listen bool) (*sqldb.DB, error) {
	db, _, err := openMigrated(ctx, cfg, logger, listen)
	return db, err
}

// openMigrated is openDB that also returns the migrations it applied now.
func openMigrated(ctx context.Context, cfg Config, logger *slog.Logger, listen bool) (*sqldb.DB, []int, error) {
	var (
		db  *sqldb.DB
		err error
	)
	if postgres.IsURL(cfg.DB) {
		db, err = postgres.Open(ctx, cfg.DB, postgres.Options{MaxConns: cfg.PostgresConns, Listen: listen, Logger: logger})
	} else {
		db, err = sqlite.Open(ctx, cfg.DB, sqlite.Options{Synchronous: cfg.Synchronous, Logger: logger})
	}
	if err != nil {
		return nil, nil, err
	}
	applied, err := migrations.Apply(ctx, db.Write, migrations.Options{Logger: logger})
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("%s %s: %w", db.Dialect, db.Name, err)
	}
	logger.Info("store opened", "store", db.Dialect.String(), "db", db.Name, "applied_migrations", len(applied))
	// Warned once the store is open, so that a bad setting or an
	// unreachable store still ends with one line.
	cfg.warnSecretFlags(logger)
	return db, applied, nil
}

// checkPostgresURL refuses, as a bad setting, a postgres:// URL the driver
// cannot parse (a bad port, an unknown sslmode); the driver's message
// carries the URL with its password replaced.
func checkPostgresURL(dsn string) error {
	if !postgres.IsURL(dsn) {
		return nil
	}
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return fmt.Errorf("invalid --db (COURIER_DB): %v", err)
	}
	return nil
}

// keywordDSN reports whether a --db value that is not a URL is a libpq
// keyword/value string ("host=db user=courier password=..."), which would
// otherwise be taken for a SQLite file name, created, and logged.
func keywordDSN(db string) bool {
	if postgres.IsURL(db) {
		return false
	}
	for _, f := range strings.Fields(strings.ToLower(db)) {
		k, _, ok := strings.Cut(f, "=")
		switch {
		case !ok:
		case k == "host" || k == "hostaddr" || k == "dbname" || k == "user" || k == "password" || k == "port" || k == "sslmode":
			return true
		}
	}
	return false
}

func migrateCommand(ctx context.Context, cfg Config, stdout io.Writer, logger *slog.Logger) error {
	if postgres.IsURL(cfg.DB) {
		// A one-shot command needs no more than the runner's connection
		// and its advisory lock's.
		cfg.PostgresConns = 2
	}
	db, applied, err := openMigrated(ctx, cfg, logger, false)
	if err != nil {
		return err
	}
	defer db.Close()
	v, err := migrations.Current(ctx, db.Write, migrations.Latest())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database %s at schema version %d (%d applied now)\n", db.Name, v, len(applied))
	return nil
}
