package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/sqlite"
)

// openDB opens the database and migrates it; server and worker both do this
// at start-up, and the migration runner is safe against the other doing it
// at the same moment.
func openDB(ctx context.Context, cfg Config, logger *slog.Logger) (*sqlite.DB, error) {
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
