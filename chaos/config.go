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
)

// Config configures a run. Zero values take the documented defaults.
type Config struct {
	// Executable is the courier binary run as server, worker and actor
	// creator (default: os.Executable(), the running binary).
	Executable string
	// Bus is the event bus, "db" or "nats" (default "db").
	Bus string
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
	case c.ParkMax <= 0:
		return errors.New("chaos: park-max must be positive")
	case c.MaxAttempts < 0:
		return errors.New("chaos: max-attempts must not be negative")
	}
	return nil
}
