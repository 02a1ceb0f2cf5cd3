package main

import (
	"context"
	"fmt"
	"io"

	"github.com/courier-ap/courier/server"
	"github.com/courier-ap/courier/store"
)

const actorUsage = "usage: courier actor create NAME [--display-name TEXT] [--summary TEXT] [--json] | courier actor delete NAME" +
	" | courier actor followers NAME [--pending] | courier actor followers approve|reject NAME FOLLOWER"

// actorCommand runs `courier actor create NAME ...` or `courier actor
// delete NAME` against the database.
func actorCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) > 0 && args[0] == "delete" {
		return deleteActorCommand(ctx, args[1:], stdout, getenv)
	}
	if len(args) > 0 && args[0] == "followers" {
		return followersCommand(ctx, args[1:], stdout, getenv)
	}
	if len(args) == 0 || args[0] != "create" {
		return usageError(actorUsage)
	}
	// The database and base-URL settings come from the environment or from
	// flags placed before the actor's own (courier actor create --db x NAME).
	cfg, rest, err := parseConfigPrefix("actor create", args[1:], getenv)
	if err != nil {
		return usageError("%v", err)
	}
	db, err := openDB(ctx, cfg, newLogger(io.Discard, "error"), false)
	if err != nil {
		return err
	}
	defer db.Close()
	if code := server.CreateActorCommand(ctx, store.New(db, cfg.base(), nil), rest, stdout, stderr); code != 0 {
		return &exitError{code: code, err: errReported}
	}
	return nil
}

// deleteActorCommand deletes a local actor: its Delete goes to its
// followers, and its key stays until every delivery of it has finished or
// died (then a running courier removes the actor).
func deleteActorCommand(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	cfg, rest, err := parseConfigPrefix("actor delete", args, getenv)
	if err != nil {
		return usageError("%v", err)
	}
	if len(rest) != 1 {
		return usageError(actorUsage)
	}
	db, err := openDB(ctx, cfg, newLogger(io.Discard, "error"), false)
	if err != nil {
		return err
	}
	defer db.Close()
	act, err := store.New(db, cfg.base(), nil).DeleteActor(ctx, rest[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %s; its Delete is %s, and its key stays until every delivery of it has finished\n", rest[0], act.URI)
	return nil
}
