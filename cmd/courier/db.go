package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/postgres"
	"github.com/courier-ap/courier/sqlite"
)

// openDB opens the store --db names (a SQLite file, or a postgres:// URL)
// and migrates it; server and worker both do this at start-up, and the
// migration runner is safe against the other doing it at the same moment.
// listen makes a PostgreSQL process listen for other processes'
// announcements of new events (serve and worker; not one-shot commands).
func openDB(ctx context.Context, cfg Config, logger *slog.Logger, listen bool) (*sqldb.DB, error) {
	var (
		db      *sqldb.DB
		err     error
		dialect = migrations.SQLite
	)
	if postgres.IsURL(cfg.DB) {
		dialect = migrations.Postgres
		db, err = postgres.Open(ctx, cfg.DB, postgres.Options{MaxConns: cfg.PostgresConns, Listen: listen, Logger: logger})
	} else {
		db, err = sqlite.Open(ctx, cfg.DB, sqlite.Options{Synchronous: cfg.Synchronous, Logger: logger})
	}
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Apply(ctx, db.Write, migrations.Options{Logger: logger, Dialect: dialect}); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func migrateCommand(ctx context.Context, cfg Config, stdout io.Writer, logger *slog.Logger) error {
	if postgres.IsURL(cfg.DB) {
		return migratePostgres(ctx, cfg, stdout, logger)
	}
	db, err := sqlite.Open(ctx, cfg.DB, sqlite.Options{Synchronous: cfg.Synchronous, Logger: logger})
	if err != nil {
		return err
	}
	defer db.Close()
	applied, err := migrations.Apply(ctx, db.Write, migrations.Options{Logger: logger})
	if err != nil {
		return err
	}
	v, err := migrations.Current(ctx, db.Write, migrations.Latest())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database %s at schema version %d (%d applied now)\n", cfg.DB, v, len(applied))
	return nil
}

// migratePostgres applies the PostgreSQL twins of the migrations, under the
// runner's advisory lock.
func migratePostgres(ctx context.Context, cfg Config, stdout io.Writer, logger *slog.Logger) error {
	db, err := postgres.Open(ctx, cfg.DB, postgres.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	defer db.Close()
	applied, err := migrations.Apply(ctx, db.Write, migrations.Options{Logger: logger, Dialect: migrations.Postgres})
	if err != nil {
		return err
	}
	v, err := migrations.Current(ctx, db.Write, migrations.Latest())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database %s at schema version %d (%d applied now)\n", postgres.Redact(cfg.DB), v, len(applied))
	return nil
}
