// Package chaos runs courier under hostile conditions on one machine and
// counts what arrived, so that "nothing lost, nothing twice" is a measured
// figure rather than a claim.
//
// A run starts courier as two processes, the HTTP server (serve
// --worker=false) and the worker, on a fresh SQLite file, with either bus
// (for the nats bus it runs an embedded JetStream server on loopback that it
// stops and restarts on the same store and port). It starts simulated remote
// servers on their own loopback ports (healthy, flapping, slow and one that
// black-holes every request), whose actors have real RSA keys and whose
// inboxes verify courier's signatures and digests and record every POST.
// Every remote actor follows every local actor with a signed Follow and
// waits for courier's Accept. Then, for the write phase, local actors post
// notes through the client-to-server API while remote actors send signed
// Creates of notes and Likes of courier's notes, and the run kills the
// worker with SIGKILL, restarts the server (SIGKILL, sometimes SIGTERM) and
// stops the broker for a while. Afterwards it waits, bounded, until courier
// has settled, reads courier's database read-only and compares it and the
// remote inboxes' records with what it sent: Report.
//
// With Store "postgres" the processes share one PostgreSQL database
// instead: by default on a throwaway cluster the run makes with the
// machine's initdb in the run directory (as the "postgres" user when the run
// is root), two servers behind one address of the run's (front) and two
// workers. Two faults are added: restarts of PostgreSQL (fast or immediate
// shutdown, then a start on the same data and port) and cuts of one worker
// from it. Where the run is root the server lives in a network namespace of
// its own with one veth link for the run and the servers and one per
// worker, and a cut takes the worker's link down: its packets are dropped
// while it still reaches the broker and the remote hosts. Elsewhere each
// worker reaches PostgreSQL through a TCP proxy of the run's that stops
// forwarding for the cut.
//
// With Converge the run checks convergence (converge.go): local actors
// write stories through the client-to-server API (objects created, updated
// and sometimes deleted; Likes and Follows and their Undos) to remote hosts
// among which chaotic ones fail at random and go through outages; each
// host's final view, its accepted activities applied in arrival order as a
// naive receiver without tombstones would, must equal courier's state, and
// the arrivals of each (object, inbox) must be in the order written.
//
// Everything is bounded: the write phase (Config.Duration), the settle
// phase, a hard deadline over the whole run, every request and every wait.
// All child processes are stopped when Run returns, whatever the reason.
package chaos

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/courier-ap/courier/postgres"
)

// Config configures a run. Zero values take the documented defaults.
type Config struct {
	// Executable is the courier binary run as server, worker and actor
	// creator (default: os.Executable(), the running binary).
	Executable string
	// Bus is the event bus, "db" or "nats" (default "db").
	Bus string
	// Store is courier's store, "sqlite" (default: a fresh file in the run
	// directory) or "postgres": a fresh database on a throwaway cluster the
	// run makes with the machine's initdb (or on PostgresURL's server),
	// shared by every process.
	Store string
	// PostgresURL names an existing PostgreSQL server (a URL whose user may
	// CREATE DATABASE) for Store "postgres"; the run creates a fresh
	// database on it and cannot restart that server. Default: the run's
	// own cluster.
	PostgresURL string
	// Servers and Workers are how many server and worker processes share
	// the store (default 1 each on SQLite, 2 each on PostgreSQL). Several
	// servers sit behind one address of the run's, as behind a load
	// balancer.
	Servers, Workers int
	// Cut is how a worker is cut off from PostgreSQL: "netns" (the server
	// in a network namespace of its own, one veth link per worker, the
	// worker's link taken down), "proxy" (a TCP proxy per worker that stops
	// forwarding) or "" (netns where the machine allows, else proxy).
	Cut string
	// Duration is the length of the write phase (default 60 s).
	Duration time.Duration
	// SetupTimeout bounds start-up and the follow handshake (default 90 s).
	SetupTimeout time.Duration
	// SettleTimeout bounds the wait for courier to settle after the write
	// phase (default 4 min).
	SettleTimeout time.Duration
	// Deadline is the hard limit of the whole run (default SetupTimeout +
	// Duration + SettleTimeout + 30 s).
	Deadline time.Duration
	// Seed seeds every random choice of the run (default: from the clock).
	// Timing still varies between runs with the same seed.
	Seed uint64
	// WriteRate is how many notes local actors post per second (default 4).
	WriteRate float64
	// InboundRate is how many activities remote actors send per second
	// (default 4).
	InboundRate float64
	// LocalActors is how many local actors are created (default 3).
	LocalActors int
	// ActorsPerHost is how many actors each remote host has (default 2).
	ActorsPerHost int
	// WorkerKillEvery is the mean time between SIGKILLs of the worker
	// (default 6 s).
	WorkerKillEvery time.Duration
	// ServerRestartEvery is the mean time between server restarts
	// (default 12 s).
	ServerRestartEvery time.Duration
	// BrokerOutageEvery is the mean time between broker outages with the
	// nats bus (default 15 s); BrokerOutageMax bounds one outage (default
	// 8 s).
	BrokerOutageEvery time.Duration
	BrokerOutageMax   time.Duration
	// PGRestartEvery is the mean time between restarts of the run's own
	// PostgreSQL (a fast or an immediate shutdown, then a start; default
	// 20 s). DBCutEvery is the mean time between cuts of one worker from
	// PostgreSQL (default 15 s); DBCutMax bounds one cut (default 8 s).
	PGRestartEvery time.Duration
	DBCutEvery     time.Duration
	DBCutMax       time.Duration
	// ParkMax is courier's --park-max for the run: how long deliveries to
	// the unavailable (black-holed) host stay parked before they are
	// dead-lettered (default 20 s).
	ParkMax time.Duration
	// MaxAttempts is courier's --max-attempts (default: courier's own).
	MaxAttempts int
	// ChildEnv is added to the environment of courier's processes, after
	// the run's own settings (DefaultChildEnv), so it can override them.
	ChildEnv []string
	// Dir is the run directory (database, broker store, process logs).
	// Default: a fresh temporary directory, removed after a passing run
	// unless Keep is set.
	Dir string
	// Converge makes the run a convergence run: instead of the stream of
	// new notes, local actors write Objects objects through the
	// client-to-server API (each created, updated several times, some
	// deleted), like and unlike remote notes and follow and unfollow
	// remote actors; ChaoticHosts chaotic remote hosts are added (see
	// Chaotic) and the black-holed host left out. The write phase ends
	// when every object's story is written (Duration bounds it). Then
	// every host's final view, its accepted activities applied in arrival
	// order as a naive receiver would, must equal courier's state, and the
	// arrivals of each (object, inbox) must be in the order written.
	Converge bool
	// Objects is how many objects a convergence run writes (default 100).
	Objects int
	// ChaoticHosts is how many chaotic hosts a convergence run adds
	// (default 6).
	ChaoticHosts int
	// FaultRate is, in a convergence run, the share of POSTs a chaotic
	// host fails (500, 429, a timeout after recording, a hung
	// connection) and the flapping host answers 503 (default 0.06).
	FaultRate float64
	// OutageEvery is the mean time between outages of a chaotic host in a
	// convergence run (default 8 s); OutageMax bounds one (default 14 s;
	// it must be shorter than ParkMax). An outage lasts at least 11 s (or
	// 3/4 of OutageMax): past DefaultChildEnv's 8 s after which a host
	// still failing is found unavailable and its deliveries parked, which
	// happens when the outage also outlasts courier's backoff of the host.
	OutageEvery time.Duration
	OutageMax   time.Duration
	// Keep keeps the run directory even when the run passes.
	Keep bool
	// Logger receives the run's progress (nil discards). Courier's own
	// logs go to files in the run directory.
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultDuration           = 60 * time.Second
	DefaultSetupTimeout       = 90 * time.Second
	DefaultSettleTimeout      = 4 * time.Minute
	DefaultWriteRate          = 4
	DefaultInboundRate        = 4
	DefaultLocalActors        = 3
	DefaultActorsPerHost      = 2
	DefaultWorkerKillEvery    = 6 * time.Second
	DefaultServerRestartEvery = 12 * time.Second
	DefaultBrokerOutageEvery  = 15 * time.Second
	DefaultBrokerOutageMax    = 8 * time.Second
	DefaultParkMax            = 20 * time.Second
	DefaultPGRestartEvery     = 20 * time.Second
	DefaultDBCutEvery         = 15 * time.Second
	DefaultDBCutMax           = 8 * time.Second
	DefaultObjects            = 100
	DefaultFaultRate          = 0.06
	DefaultChaoticHosts       = 6
	DefaultOutageEvery        = 8 * time.Second
	DefaultOutageMax          = 14 * time.Second
)

// DefaultChildEnv shortens courier's timers for a run of a minute or two:
// a killed worker's claims (outbox lease, ledger lease, JetStream ack wait)
// are taken back within seconds instead of minutes, the black-holed host
// is found unavailable, probed and its parked deliveries dead-lettered
// within the run. Production defaults are minutes to days; the logic is
// the same.
var DefaultChildEnv = []string{
	"COURIER_LOG_LEVEL=info",
	"EVENT_QUEUE_LEASE=15s",
	"EVENT_QUEUE_LEDGER_LEASE=15s",
	"NATS_ACK_WAIT=15s",
	"COURIER_DELIVERY_TIMEOUT=5s",
	"COURIER_DELIVERY_UNAVAILABLE_AFTER=8s",
	"COURIER_DELIVERY_PROBE_INTERVAL=2s",
	"COURIER_DELIVERY_PARK_RECHECK=2s",
}

func (c Config) withDefaults() (Config, error) {
	if c.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return c, fmt.Errorf("chaos: find the courier binary: %w", err)
		}
		c.Executable = exe
	}
	if c.Bus == "" {
		c.Bus = "db"
	}
	if c.Store == "" {
		c.Store = "sqlite"
	}
	procs := 1
	if c.Store == "postgres" {
		procs = 2
	}
	if c.Servers == 0 {
		c.Servers = procs
	}
	if c.Workers == 0 {
		c.Workers = procs
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Duration, DefaultDuration)
	def(&c.SetupTimeout, DefaultSetupTimeout)
	def(&c.SettleTimeout, DefaultSettleTimeout)
	def(&c.Deadline, c.SetupTimeout+c.Duration+c.SettleTimeout+30*time.Second)
	def(&c.WorkerKillEvery, DefaultWorkerKillEvery)
	def(&c.ServerRestartEvery, DefaultServerRestartEvery)
	def(&c.BrokerOutageEvery, DefaultBrokerOutageEvery)
	def(&c.BrokerOutageMax, DefaultBrokerOutageMax)
	def(&c.ParkMax, DefaultParkMax)
	def(&c.PGRestartEvery, DefaultPGRestartEvery)
	def(&c.DBCutEvery, DefaultDBCutEvery)
	def(&c.DBCutMax, DefaultDBCutMax)
	def(&c.OutageEvery, DefaultOutageEvery)
	def(&c.OutageMax, DefaultOutageMax)
	if c.FaultRate == 0 {
		c.FaultRate = DefaultFaultRate
	}
	if c.Objects == 0 {
		c.Objects = DefaultObjects
	}
	if c.ChaoticHosts == 0 {
		c.ChaoticHosts = DefaultChaoticHosts
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.WriteRate == 0 {
		c.WriteRate = DefaultWriteRate
	}
	if c.InboundRate == 0 {
		c.InboundRate = DefaultInboundRate
	}
	if c.LocalActors == 0 {
		c.LocalActors = DefaultLocalActors
	}
	if c.ActorsPerHost == 0 {
		c.ActorsPerHost = DefaultActorsPerHost
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

func (c Config) validate() error {
	switch {
	case c.Bus != "db" && c.Bus != "nats":
		return fmt.Errorf("chaos: bus %q: want db or nats", c.Bus)
	case c.Store != "sqlite" && c.Store != "postgres":
		return fmt.Errorf("chaos: store %q: want sqlite or postgres", c.Store)
	case c.PostgresURL != "" && c.Store != "postgres":
		return errors.New("chaos: a PostgreSQL URL needs store postgres")
	case c.PostgresURL != "" && !postgres.IsURL(c.PostgresURL):
		return errors.New("chaos: the PostgreSQL URL must start with postgres:// or postgresql://")
	case c.Cut != "" && c.Cut != "netns" && c.Cut != "proxy":
		return fmt.Errorf("chaos: cut %q: want netns or proxy", c.Cut)
	case c.Cut == "netns" && c.PostgresURL != "":
		return errors.New("chaos: cut netns needs the run's own PostgreSQL, not a URL")
	case c.Servers < 1 || c.Servers > 8 || c.Workers < 1 || c.Workers > 8:
		return errors.New("chaos: want 1 to 8 servers and 1 to 8 workers")
	case c.Duration < time.Second || c.Duration > 24*time.Hour:
		return fmt.Errorf("chaos: duration %s: want 1s to 24h", c.Duration)
	case c.Deadline < c.Duration:
		return fmt.Errorf("chaos: deadline %s is shorter than the write phase %s", c.Deadline, c.Duration)
	case c.SetupTimeout < 5*time.Second || c.SettleTimeout < 5*time.Second:
		return errors.New("chaos: set-up and settle timeouts must be at least 5s")
	case c.WriteRate <= 0 || c.WriteRate > 200 || c.InboundRate <= 0 || c.InboundRate > 200:
		return errors.New("chaos: rates must be above 0 and at most 200 per second")
	case c.LocalActors < 1 || c.LocalActors > 50 || c.ActorsPerHost < 1 || c.ActorsPerHost > 20:
		return errors.New("chaos: want 1 to 50 local actors and 1 to 20 actors per host")
	case c.WorkerKillEvery < time.Second || c.ServerRestartEvery < time.Second || c.BrokerOutageEvery < time.Second:
		return errors.New("chaos: chaos intervals must be at least 1s")
	case c.BrokerOutageMax < time.Second:
		return errors.New("chaos: a broker outage must be allowed at least 1s")
	case c.PGRestartEvery < time.Second || c.DBCutEvery < time.Second || c.DBCutMax < time.Second:
		return errors.New("chaos: PostgreSQL restart and cut intervals must be at least 1s")
	case c.ParkMax <= 0:
		return errors.New("chaos: park-max must be positive")
	case c.Objects < 1 || c.Objects > 100000:
		return errors.New("chaos: want 1 to 100000 objects")
	case c.FaultRate < 0 || c.FaultRate > 0.8:
		return errors.New("chaos: the fault rate must be between 0 and 0.8")
	case c.ChaoticHosts < 0 || c.ChaoticHosts > 64:
		return errors.New("chaos: want 0 to 64 chaotic hosts")
	case c.OutageEvery < time.Second || c.OutageMax < time.Second:
		return errors.New("chaos: outage intervals must be at least 1s")
	case c.Converge && c.OutageMax >= c.ParkMax:
		return fmt.Errorf("chaos: an outage (up to %s) must be shorter than park-max %s, or it loses deliveries by design", c.OutageMax, c.ParkMax)
	case c.MaxAttempts < 0:
		return errors.New("chaos: max-attempts must not be negative")
	}
	return nil
}
