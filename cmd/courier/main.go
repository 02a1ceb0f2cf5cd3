// Command courier is an ActivityPub federation server built around a
// transactional outbox: every local write reaches every remote inbox that
// should see it, and every inbound activity is imported exactly once.
//
// Usage:
//
//	courier serve   [flags]   HTTP server (with an embedded worker unless --worker=false)
//	courier worker  [flags]   the worker alone: claims outbox events and runs their handlers
//	courier migrate [flags]   apply database migrations and exit
//	courier actor create NAME [--display-name ...] [--summary ...] [--json]
//	courier actor delete NAME
//	courier actor followers NAME [--pending] | approve|reject NAME FOLLOWER
//	courier admin ...         operate a running server through its admin API
//	courier chaos [--bus db|nats] [--duration 60s]   fault-injection run on loopback
//	courier store copy --from FILE --to postgres://...   move a stopped instance to PostgreSQL
//	courier version
//
// Every flag has an environment variable; `courier serve -h` lists them.
//
// serve opens and migrates the store --db names (db.go) and wires two
// listeners: the public one (ActivityPub, inboxes, the application's
// routes, /healthz) and the operators' (/metrics, /admin/, /console/,
// /healthz, /readyz).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// exitError carries an exit status with its one-line message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

const usage = `usage: courier <command> [flags]

commands:
  serve     run the HTTP server (and the worker, unless --worker=false)
  worker    run the worker alone
  migrate   apply database migrations and exit
  actor     create NAME: create a local actor and print its id and outbox token
            delete NAME: delete a local actor (its Delete goes to its followers)
            followers NAME [--pending]: list its followers; followers approve|reject NAME FOLLOWER
  admin     operate a running server through its admin API
  chaos     run courier under faults on loopback and count what was lost
  store     copy --from FILE --to postgres://...: move a stopped instance to PostgreSQL
  version   print the version

"courier <command> -h" lists the flags; each has an environment variable.`

// run is main without the process: it returns the exit status, writing one
// line to stderr on failure. Tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if err := dispatch(ctx, args, stdout, stderr, getenv); err != nil {
		var ee *exitError
		code := 1
		if errors.As(err, &ee) {
			code = ee.code
		}
		if errors.Is(err, errHelp) {
			return 0
		}
		if errors.Is(err, errReported) {
			return code
		}
		fmt.Fprintf(stderr, "courier: %s\n", oneLine(err.Error()))
		return code
	}
	return 0
}

var (
	errHelp     = errors.New("help requested")
	errReported = errors.New("error already reported")
)

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return usageError("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve", "worker", "migrate":
		if wantsHelp(rest) {
			printFlags(stdout, cmd)
			return errHelp
		}
		cfg, extra, err := parseConfig(cmd, rest, getenv)
		if err != nil {
			return usageError("%v", err)
		}
		if len(extra) > 0 {
			return usageError("%s: unexpected argument %q", cmd, extra[0])
		}
		logger := newLogger(stderr, cfg.LogLevel)
		switch cmd {
		case "migrate":
			return migrateCommand(ctx, cfg, stdout, logger)
		case "worker":
			cfg.Worker = true
			return runProcess(ctx, cfg, logger, false)
		default:
			return runProcess(ctx, cfg, logger, true)
		}
	case "actor":
		return actorCommand(ctx, rest, stdout, stderr, getenv)
	case "admin":
		return adminCommand(ctx, rest, stdout, stderr, getenv)
	case "chaos":
		return chaosCommand(ctx, rest, stdout, stderr, getenv)
	case "store":
		return storeCommand(ctx, rest, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "courier %s\n", version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	default:
		return usageError("unknown command %q (want serve, worker, migrate, actor, admin, chaos, store or version)", cmd)
	}
}

func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			return true
		}
	}
	return false
}

// serveOnly are the settings only serve reads (the public listener, the
// inbox, the streams, the admin API); the worker accepts and ignores them,
// so that one environment serves both.
var serveOnly = map[string]bool{
	"listen": true, "admin-token": true, "authorized-fetch": true, "worker": true, "date-window": true,
	"inbox-host-requests": true, "inbox-host-bytes": true, "inbox-host-budgets": true,
	"stream-keep-alive": true, "streams-max": true, "streams-per-actor": true,
}

// migrateReads are the settings migrate reads; it accepts and ignores the
// others.
var migrateReads = map[string]bool{"db": true, "synchronous": true, "log-level": true}

// printFlags lists the flags command cmd reads; those it accepts and
// ignores (so that one environment serves every command) are left out.
func printFlags(w io.Writer, cmd string) {
	cfg := defaultConfigFor(cmd)
	fmt.Fprintf(w, "usage: courier %s [flags]\n\nflags (environment variable, default):\n", cmd)
	for _, s := range settingsFor(&cfg, cmd) {
		if cmd == "worker" && serveOnly[s.flag] || cmd == "migrate" && !migrateReads[s.flag] {
			continue
		}
		fmt.Fprintf(w, "  --%s  (%s, default %q)\n      %s\n", s.flag, s.env, s.value.String(), s.usage)
	}
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// oneLine folds a multi-line error into one line for stderr.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
