package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
)

// Bounds of the run's own PostgreSQL.
const (
	pgReadyTimeout = 60 * time.Second // the server accepting connections after a start
	pgStopTimeout  = 30 * time.Second // a fast or immediate shutdown
	pgDatabase     = "courier"        // the database courier's processes share
	pgUser         = "courier"        // the cluster's superuser
)

// pgCreateDatabase creates database name on the server of dsn.
func pgCreateDatabase(ctx context.Context, dsn, name string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return fmt.Errorf("chaos: postgres: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		return fmt.Errorf("chaos: postgres: create database %s: %w", name, err)
	}
	return nil
}

func pgPing(dsn string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// lastLines returns the end of a command's output, for an error message.
func lastLines(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 1500 {
		s = s[len(s)-1500:]
	}
	return s
}
