package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/postgres"
	"github.com/courier-ap/courier/sqlite"
)

// errPostgresSchemaOnly refuses a postgres:// --db for the commands that do
// not run on PostgreSQL yet: only its schema (courier migrate) does.
var errPostgresSchemaOnly = errors.New("--db is a PostgreSQL URL: this build migrates a PostgreSQL schema (courier migrate) but serves, works and manages actors on a SQLite file only")

// openDB opens the database and migrates it; server and worker both do this
// at start-up, and the migration runner is safe against the other doing it
// at the same moment.
func openDB(ctx context.Context, cfg Config, logger *slog.Logger) (*sqlite.DB, error) {
	if postgres.IsURL(cfg.DB) {
		return nil, errPostgresSchemaOnly
	}
	db, err := sqlite.Open(ctx, cfg.DB, sqlite.Options{Synchronous: cfg.Synchronous, Logger: logger})
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Apply(ctx, db.Write, migrations.Options{Logger: logger}); err != nil {
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
	applied, err := migrations.Apply(ctx, db, migrations.Options{Logger: logger, Dialect: migrations.Postgres})
	if err != nil {
		return err
	}
	v, err := migrations.Current(ctx, db, migrations.Latest())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database %s at schema version %d (%d applied now)\n", postgres.Redact(cfg.DB), v, len(applied))
	return nil
}
