package main

import (
	"context"
	"io"

	"github.com/courier-ap/courier/server"
	"github.com/courier-ap/courier/store"
)

// actorCommand runs `courier actor create NAME ...` against the database.
func actorCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 || args[0] != "create" {
		return usageError("usage: courier actor create NAME [--display-name TEXT] [--summary TEXT] [--json]")
	}
	// The database and base-URL settings come from the environment or from
	// flags placed before the actor's own (courier actor create --db x NAME).
	cfg, rest, err := parseConfigPrefix("actor create", args[1:], getenv)
	if err != nil {
		return usageError("%v", err)
	}
	db, err := openDB(ctx, cfg, newLogger(io.Discard, "error"))
	if err != nil {
		return err
	}
	defer db.Close()
	if code := server.CreateActorCommand(ctx, store.New(db, cfg.base(), nil), rest, stdout, stderr); code != 0 {
		return &exitError{code: code, err: errReported}
	}
	return nil
}
