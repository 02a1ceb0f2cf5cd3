package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/courier-ap/courier/chaos"
	"github.com/courier-ap/courier/postgres"
)

const chaosUsage = `usage: courier chaos [--bus db|nats] [--store sqlite|postgres] [--duration 60s] [flags]

Runs courier (server and worker as separate processes of this binary) on a
fresh database on loopback, with simulated remote servers, a steady stream of
local writes and inbound activities, and kills and restarts along the way;
then prints one line of figures and exits 0 only when nothing was lost,
nothing arrived under two ids, nothing was imported twice and every dead
letter belongs to the black-holed host.

With --store postgres the run makes a throwaway PostgreSQL cluster with the
machine's initdb (or a fresh database on --postgres-url's server), runs two
servers behind one address and two workers on it, and adds two faults:
restarts of PostgreSQL and cuts of one worker from it (in a network
namespace of the server's where the run is root, else through a TCP proxy).

With --converge the run checks convergence instead of a stream of new notes:
local actors write --objects objects (each created, updated several times,
some deleted), like and unlike remote notes and follow and unfollow remote
actors, to remote hosts that fail at random (500, 429, timeouts, hung
connections, outages long enough to be parked). Each host's final view, its
accepted activities applied in arrival order as a naive receiver would, must
equal courier's state, and the arrivals of each (object, inbox) must be in the
order written; the run exits 1 on any divergence and prints the first few.`

// chaosCommand runs `courier chaos`: see chaosUsage and chaos.Run.
func chaosCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	cfg := chaos.Config{Bus: getenv("EVENT_BUS_BACKEND")}
	if cfg.Bus == "" {
		cfg.Bus = "db"
	}
	fs := flag.NewFlagSet("courier chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// Help asked for goes to stdout; after a bad flag, to stderr.
	usageTo := stderr
	if wantsHelp(args) {
		usageTo = stdout
	}
	fs.Usage = func() {
		fs.SetOutput(usageTo)
		fmt.Fprintln(usageTo, chaosUsage)
		fmt.Fprintln(usageTo, "\nflags:")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Bus, "bus", cfg.Bus, "event bus: db or nats (env EVENT_BUS_BACKEND)")
	fs.StringVar(&cfg.Store, "store", "sqlite", "courier's store: sqlite or postgres")
	fs.StringVar(&cfg.PostgresURL, "postgres-url", "", "with --store postgres: an existing server (a postgres:// URL whose user may CREATE DATABASE) instead of the run's own cluster")
	fs.IntVar(&cfg.Servers, "servers", 0, "server processes (default 1 on sqlite, 2 on postgres)")
	fs.IntVar(&cfg.Workers, "workers", 0, "worker processes (default 1 on sqlite, 2 on postgres)")
	fs.StringVar(&cfg.Cut, "cut", "", "how a worker is cut off from PostgreSQL: netns or proxy (default netns where the machine allows)")
	fs.DurationVar(&cfg.PGRestartEvery, "pg-restart-every", chaos.DefaultPGRestartEvery, "mean time between restarts of the run's PostgreSQL")
	fs.DurationVar(&cfg.DBCutEvery, "db-cut-every", chaos.DefaultDBCutEvery, "mean time between cuts of a worker from PostgreSQL")
	fs.DurationVar(&cfg.DBCutMax, "db-cut-max", chaos.DefaultDBCutMax, "longest cut of a worker from PostgreSQL")
	fs.DurationVar(&cfg.Duration, "duration", chaos.DefaultDuration, "length of the write phase")
	fs.DurationVar(&cfg.SetupTimeout, "setup-timeout", chaos.DefaultSetupTimeout, "bound of start-up and the follow handshake")
	fs.DurationVar(&cfg.SettleTimeout, "settle-timeout", chaos.DefaultSettleTimeout, "bound of the wait for courier to settle after the write phase")
	fs.DurationVar(&cfg.Deadline, "deadline", 0, "hard limit of the whole run (default setup-timeout + duration + settle-timeout + 30s)")
	seed := fs.String("seed", "", "seed of the run's random choices (default: from the clock; printed in the result)")
	fs.Float64Var(&cfg.WriteRate, "rate", chaos.DefaultWriteRate, "notes local actors post per second")
	fs.Float64Var(&cfg.InboundRate, "inbound-rate", chaos.DefaultInboundRate, "activities remote actors send per second")
	fs.IntVar(&cfg.LocalActors, "local-actors", chaos.DefaultLocalActors, "local actors created")
	fs.IntVar(&cfg.ActorsPerHost, "actors-per-host", chaos.DefaultActorsPerHost, "actors of each simulated remote host")
	fs.DurationVar(&cfg.WorkerKillEvery, "worker-kill-every", chaos.DefaultWorkerKillEvery, "mean time between SIGKILLs of the worker")
	fs.DurationVar(&cfg.ServerRestartEvery, "server-restart-every", chaos.DefaultServerRestartEvery, "mean time between server restarts (SIGKILL, sometimes SIGTERM)")
	fs.DurationVar(&cfg.BrokerOutageEvery, "broker-outage-every", chaos.DefaultBrokerOutageEvery, "mean time between broker outages (bus nats)")
	fs.DurationVar(&cfg.BrokerOutageMax, "broker-outage-max", chaos.DefaultBrokerOutageMax, "longest broker outage")
	fs.DurationVar(&cfg.ParkMax, "park-max", chaos.DefaultParkMax, "courier's --park-max during the run")
	fs.IntVar(&cfg.MaxAttempts, "max-attempts", 0, "courier's --max-attempts during the run (default: courier's own)")
	fs.BoolVar(&cfg.Converge, "converge", false, "a convergence run: stories of objects, likes and follows; every remote host's final view and order of arrivals checked")
	fs.IntVar(&cfg.Objects, "objects", chaos.DefaultObjects, "with --converge: objects written (with a like story for every second one and a follow story for every fourth)")
	fs.IntVar(&cfg.ChaoticHosts, "chaotic-hosts", chaos.DefaultChaoticHosts, "with --converge: chaotic remote hosts added")
	fs.Float64Var(&cfg.FaultRate, "fault-rate", chaos.DefaultFaultRate, "with --converge: share of POSTs a chaotic host fails (500, 429, timeouts, hung connections)")
	fs.DurationVar(&cfg.OutageEvery, "outage-every", chaos.DefaultOutageEvery, "with --converge: mean time between outages of a chaotic host")
	fs.DurationVar(&cfg.OutageMax, "outage-max", chaos.DefaultOutageMax, "with --converge: longest outage of a chaotic host (below --park-max)")
	fs.StringVar(&cfg.Dir, "dir", "", "run directory (default: a temporary one, removed after a passing run)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the run directory after a passing run")
	quiet := fs.Bool("quiet", false, "print only the result, not the run's progress")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return &exitError{code: 2, err: errReported}
	}
	if fs.NArg() > 0 {
		return usageError("chaos: unexpected argument %q", fs.Arg(0))
	}
	if cfg.Bus != "db" && cfg.Bus != "nats" {
		return usageError("chaos: invalid --bus %q: want db or nats", cfg.Bus)
	}
	if cfg.Store != "sqlite" && cfg.Store != "postgres" {
		return usageError("chaos: invalid --store %q: want sqlite or postgres", cfg.Store)
	}
	if cfg.PostgresURL != "" && (cfg.Store != "postgres" || !postgres.IsURL(cfg.PostgresURL)) {
		return usageError("chaos: --postgres-url needs --store postgres and a postgres:// URL")
	}
	if cfg.Cut != "" && cfg.Cut != "netns" && cfg.Cut != "proxy" {
		return usageError("chaos: invalid --cut %q: want netns or proxy", cfg.Cut)
	}
	if cfg.Servers < 0 || cfg.Servers > 8 || cfg.Workers < 0 || cfg.Workers > 8 {
		return usageError("chaos: --servers and --workers: want 1 to 8")
	}
	if cfg.Objects < 1 || cfg.Objects > 100000 {
		return usageError("chaos: invalid --objects %d: want 1 to 100000", cfg.Objects)
	}
	if cfg.ChaoticHosts < 1 || cfg.ChaoticHosts > 64 {
		return usageError("chaos: invalid --chaotic-hosts %d: want 1 to 64", cfg.ChaoticHosts)
	}
	if cfg.FaultRate <= 0 || cfg.FaultRate > 0.8 {
		return usageError("chaos: invalid --fault-rate %g: want above 0 and at most 0.8", cfg.FaultRate)
	}
	if cfg.Converge && cfg.OutageMax >= cfg.ParkMax {
		return usageError("chaos: --outage-max %s must be shorter than --park-max %s (a longer outage loses deliveries by design)", cfg.OutageMax, cfg.ParkMax)
	}
	if *seed != "" {
		n, err := strconv.ParseUint(*seed, 10, 64)
		if err != nil || n == 0 {
			return usageError("chaos: invalid --seed %q: want a positive whole number", *seed)
		}
		cfg.Seed = n
	}
	level := slog.LevelInfo
	if *quiet {
		level = slog.LevelError
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	rep, err := chaos.Run(ctx, cfg)
	if rep != nil {
		fmt.Fprintln(stdout, rep.Line())
	}
	if err != nil {
		return &exitError{code: 1, err: err} // chaos errors name their phase
	}
	if err := rep.Failure(); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("chaos: %w", err)}
	}
	return nil
}
