package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/courier-ap/courier/sqldb"

	"github.com/courier-ap/courier/server"
	"github.com/courier-ap/courier/store"
)

const actorUsage = "usage: courier actor create NAME [--display-name TEXT] [--summary TEXT] [--json] | courier actor delete NAME" +
	" | courier actor followers NAME [--pending] | courier actor followers approve|reject NAME FOLLOWER"

const actorHelp = `usage: courier actor create NAME [--display-name TEXT] [--summary TEXT] [--manually-approves-followers] [--json]
       courier actor delete NAME
       courier actor followers NAME [--pending]
       courier actor followers approve|reject NAME FOLLOWER

create     a local actor with its key pair and outbox token; prints its id
           and the token (once: only its hash is stored)
delete     a local actor: its Delete goes to its followers
followers  lists a local actor's followers (with --pending, the requests
           awaiting approval); approve accepts a pending Follow, reject
           refuses it or ends an accepted follower's follow

Each takes the database and base-URL settings of serve, before NAME or after
it: --db (COURIER_DB) and --base-url (COURIER_BASE_URL). Ids are built from
the base URL, so give the server's: a base URL other than the one this
database's ids were made with is refused.`

// sameBase refuses a base URL other than the one the database's local ids
// were made with: the server builds every id from its --base-url, so an id
// printed from another would not be the one it serves. The base URL is read
// from the newest local activity (its actor is BASE/users/NAME); a database
// without one has nothing to compare with.
func sameBase(ctx context.Context, db *sqldb.DB, cfg Config) error {
	recorded, err := idsBase(ctx, db)
	if err != nil || recorded == "" || recorded == cfg.base() {
		return err
	}
	return usageError("--base-url (COURIER_BASE_URL) %s is not the base URL this database's ids were made with, %s: give the server's", cfg.base(), recorded)
}

// idsBase returns the base URL of the database's newest local activity
// ("" without one).
func idsBase(ctx context.Context, db *sqldb.DB) (string, error) {
	var uri, name string
	err := db.Read.QueryRowContext(ctx, `SELECT a.actor_uri, ac.name FROM activities a JOIN actors ac ON ac.id = a.actor_id
		ORDER BY a.id DESC LIMIT 1`).Scan(&uri, &name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the database's base URL: %w", err)
	}
	recorded, _ := strings.CutSuffix(uri, "/users/"+name)
	return recorded, nil
}

// baseGiven reports whether a command was given a base URL: --base-url
// among its arguments, or COURIER_BASE_URL.
func baseGiven(args []string, getenv func(string) string) bool {
	if getenv("COURIER_BASE_URL") != "" {
		return true
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "base-url" {
			return true
		}
	}
	return false
}

// recordedBase sets cfg's base URL, when the command was given none, to the
// one the database is served under: recorded by the server at its start
// (store.RecordBaseURL), else that of its ids; the default stays for a
// database with neither.
func recordedBase(ctx context.Context, db *sqldb.DB, cfg *Config, given bool) error {
	if given {
		return nil
	}
	base, err := store.RecordedBaseURL(ctx, db)
	if err != nil {
		return err
	}
	if base == "" {
		if base, err = idsBase(ctx, db); err != nil {
			return err
		}
	}
	if base != "" {
		cfg.BaseURL = base
	}
	return nil
}

// actorCommand runs `courier actor create NAME ...` or `courier actor
// delete NAME` against the database.
func actorCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) > 1 && args[0] == "create" && wantsHelp(args[1:]) {
		server.CreateActorHelp(stdout)
		return errHelp
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help") ||
		len(args) > 1 && (args[0] == "delete" || args[0] == "followers") && wantsHelp(args[1:]) {
		fmt.Fprintln(stdout, actorHelp)
		return errHelp
	}
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
	// Bad arguments are refused before the database is opened (or made).
	if code := server.CreateActorCommand(ctx, nil, rest, stdout, stderr); code != 0 {
		return &exitError{code: code, err: errReported}
	}
	db, err := openDB(ctx, cfg, newLogger(io.Discard, "error"), false)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := recordedBase(ctx, db, &cfg, baseGiven(args[1:], getenv)); err != nil {
		return err
	}
	if err := sameBase(ctx, db, cfg); err != nil {
		return err
	}
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
	if err := recordedBase(ctx, db, &cfg, baseGiven(args, getenv)); err != nil {
		return err
	}
	if err := sameBase(ctx, db, cfg); err != nil {
		return err
	}
	act, err := store.New(db, cfg.base(), nil).DeleteActor(ctx, rest[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %s; its Delete is %s, and its key stays until every delivery of it has finished\n", rest[0], act.URI)
	return nil
}
