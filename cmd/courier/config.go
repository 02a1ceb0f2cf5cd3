package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/outbox/natsbus"
	"github.com/courier-ap/courier/postgres"
)

// Config is every setting courier reads. Each has a flag and an environment
// variable; a flag given on the command line wins over the environment, which
// wins over the default.
type Config struct {
	DB                    string
	Synchronous           string
	PostgresConns         int
	Listen                string
	OpsListen             string
	OpsHosts              string
	BaseURL               string
	AdminToken            string
	Bus                   string
	MaxAttempts           int
	NATSURL               string
	NATSMode              string
	AllowPrivateAddresses bool
	AuthorizedFetch       bool
	Worker                bool
	Concurrency           int
	LogLevel              string
	ParkMax               time.Duration
	DateWindow            time.Duration
	Lease                 time.Duration
	LedgerLease           time.Duration
	NATSAckWait           time.Duration
	DeliveryTimeout       time.Duration
	UnavailableAfter      time.Duration
	ProbeInterval         time.Duration
	ParkRecheck           time.Duration
	InboxHostRequests     int
	InboxHostBytes        int
	InboxHostBudgets      string
	WebhookAllowAddresses string

	// secretFlags names the flags given on the command line that carry a
	// secret (a --db URL with a password, --admin-token): every user of the
	// machine reads them in /proc/PID/cmdline. Start-up warns about each.
	secretFlags     []string
	StreamKeepAlive time.Duration
	StreamsMax      int
	StreamsPerActor int

	// listeners are listeners already open, by the address they are
	// bound to: a Listen or OpsListen found here is served on it. Tests
	// set it to hold their ports from first to last.
	listeners map[string]net.Listener
}

// setting is one flag with its environment variable.
type setting struct {
	flag, env, usage string
	value            flag.Value
}

// settings binds every flag of cfg; cfg must hold the defaults already.
func settings(cfg *Config) []setting {
	return []setting{
		{"db", "COURIER_DB", "the store: a SQLite database file, or a postgres:// URL shared by several servers and workers", (*stringValue)(&cfg.DB)},
		{"synchronous", "COURIER_SQLITE_SYNCHRONOUS", "SQLite synchronous mode: FULL (durable across power loss) or NORMAL (faster; the last commits may be lost on power loss)", (*stringValue)(&cfg.Synchronous)},
		{"postgres-conns", "COURIER_POSTGRES_CONNS", "PostgreSQL: connections of this process's pool; the sum over every process must stay under max_connections (or PgBouncer's pool)", (*intValue)(&cfg.PostgresConns)},
		{"listen", "COURIER_LISTEN", "serve: public HTTP listen address (host:port): ActivityPub, the inboxes and /healthz", (*stringValue)(&cfg.Listen)},
		{"ops-listen", "COURIER_OPS_LISTEN", "operators' listen address (host:port): /metrics, /healthz, /readyz and, with serve, /admin/ and the console; keep it off the public network", (*stringValue)(&cfg.OpsListen)},
		{"ops-hosts", "COURIER_OPS_HOSTS", "host names, comma-separated, by which the operators' listener may be reached besides its --ops-listen address, localhost and loopback (a compose service's name a scraper uses); other Hosts are answered 421", (*stringValue)(&cfg.OpsHosts)},
		{"base-url", "COURIER_BASE_URL", "public base URL of this server; ids are built from it", (*stringValue)(&cfg.BaseURL)},
		{"admin-token", "COURIER_ADMIN_TOKEN", "bearer token of the admin API (empty: admin API off)", (*stringValue)(&cfg.AdminToken)},
		{"bus", "EVENT_BUS_BACKEND", "event bus: db or nats", (*stringValue)(&cfg.Bus)},
		{"max-attempts", "EVENT_QUEUE_MAX_ATTEMPTS", "attempts before an event is dead-lettered (JetStream max_deliver)", (*intValue)(&cfg.MaxAttempts)},
		{"nats-url", "NATS_URL", "NATS server URL (bus nats)", (*stringValue)(&cfg.NATSURL)},
		{"nats-mode", "NATS_MODE", "jetstream (at-least-once, deduplicated) or core (fire-and-forget)", (*stringValue)(&cfg.NATSMode)},
		{"allow-private-addresses", "COURIER_ALLOW_PRIVATE_ADDRESSES", "allow fetching from and delivering to loopback/private addresses", (*boolValue)(&cfg.AllowPrivateAddresses)},
		{"authorized-fetch", "COURIER_AUTHORIZED_FETCH", "require signed GETs for every ActivityPub document but the instance actor", (*boolValue)(&cfg.AuthorizedFetch)},
		{"worker", "COURIER_WORKER", "serve: run the worker in the same process", (*boolValue)(&cfg.Worker)},
		{"concurrency", "COURIER_WORKER_CONCURRENCY", "handlers run at once by the worker", (*intValue)(&cfg.Concurrency)},
		{"log-level", "COURIER_LOG_LEVEL", "debug, info, warn or error", (*stringValue)(&cfg.LogLevel)},
		{"park-max", "COURIER_PARK_MAX", "how long deliveries to an unavailable host are kept parked before they are dead-lettered", (*durationValue)(&cfg.ParkMax)},
		{"date-window", "COURIER_SIGNATURE_DATE_WINDOW", "accepted skew of an inbound request's Date header, either way", (*durationValue)(&cfg.DateWindow)},
		{"lease", "EVENT_QUEUE_LEASE", "how long a claimed outbox row stays claimed before another worker reclaims it", (*durationValue)(&cfg.Lease)},
		{"ledger-lease", "EVENT_QUEUE_LEDGER_LEASE", "how long a processed-events ledger claim protects a running handler", (*durationValue)(&cfg.LedgerLease)},
		{"nats-ack-wait", "NATS_ACK_WAIT", "JetStream ack_wait: how long a message may go without an ack or progress before redelivery", (*durationValue)(&cfg.NATSAckWait)},
		{"delivery-timeout", "COURIER_DELIVERY_TIMEOUT", "bound on one delivery POST, response included", (*durationValue)(&cfg.DeliveryTimeout)},
		{"unavailable-after", "COURIER_DELIVERY_UNAVAILABLE_AFTER", "how long a host must keep failing before it is marked unavailable and its deliveries are parked", (*durationValue)(&cfg.UnavailableAfter)},
		{"probe-interval", "COURIER_DELIVERY_PROBE_INTERVAL", "first wait between probes of an unavailable host (doubles up to 1h)", (*durationValue)(&cfg.ProbeInterval)},
		{"inbox-host-requests", "COURIER_INBOX_HOST_REQUESTS", "inbound requests a minute each remote host may send; beyond it courier answers 429 with Retry-After", (*intValue)(&cfg.InboxHostRequests)},
		{"inbox-host-bytes", "COURIER_INBOX_HOST_BYTES", "inbound body bytes a minute each remote host may send; beyond it courier answers 429 with Retry-After", (*intValue)(&cfg.InboxHostBytes)},
		{"webhook-allow-addresses", "COURIER_WEBHOOK_ALLOW_ADDRESSES", "link-local or cloud metadata addresses (IPs or CIDR prefixes, comma-separated) webhook endpoints may be at; others are refused unless --allow-private-addresses", (*stringValue)(&cfg.WebhookAllowAddresses)},
		{"inbox-host-budgets", "COURIER_INBOX_HOST_BUDGETS", "remote hosts with a multiple of the inbound budgets, as host=factor,host=factor (host as its key ids name it, with a port if any)", (*stringValue)(&cfg.InboxHostBudgets)},
		{"stream-keep-alive", "COURIER_STREAM_KEEP_ALIVE", "interval of the keep-alive comments of an idle inbox event stream", (*durationValue)(&cfg.StreamKeepAlive)},
		{"streams-max", "COURIER_STREAMS_MAX", "inbox event streams this server keeps open at once; beyond it courier answers 503 with Retry-After", (*intValue)(&cfg.StreamsMax)},
		{"streams-per-actor", "COURIER_STREAMS_PER_ACTOR", "inbox event streams one actor may keep open at once on this server", (*intValue)(&cfg.StreamsPerActor)},
		{"park-recheck", "COURIER_DELIVERY_PARK_RECHECK", "how long a parked delivery sleeps before it looks at its host again (a recovering host releases it at once)", (*durationValue)(&cfg.ParkRecheck)},
	}
}

// Default operators' addresses. The worker has its own, and its own
// variable, so that one environment file serves a server and a worker on one
// machine without a port clash.
const (
	DefaultOpsListen       = "127.0.0.1:9464"
	DefaultWorkerOpsListen = "127.0.0.1:9465"
	// workerOpsEnv is the worker's variable for --ops-listen.
	workerOpsEnv = "COURIER_WORKER_OPS_LISTEN"
)

// defaultConfigFor is defaultConfig for command cmd: the worker's
// operators' address is its own.
func defaultConfigFor(cmd string) Config {
	cfg := defaultConfig()
	if cmd == "worker" {
		cfg.OpsListen = DefaultWorkerOpsListen
	}
	return cfg
}

// settingsFor is settings for command cmd: the worker reads --ops-listen
// from COURIER_WORKER_OPS_LISTEN, not from the server's COURIER_OPS_LISTEN.
func settingsFor(cfg *Config, cmd string) []setting {
	ss := settings(cfg)
	if cmd == "worker" {
		for i := range ss {
			if ss[i].flag == "ops-listen" {
				ss[i].env = workerOpsEnv
			}
		}
	}
	return ss
}

func defaultConfig() Config {
	return Config{
		DB:            "courier.db",
		Synchronous:   "FULL",
		PostgresConns: 16,
		Listen:        "127.0.0.1:8080",
		OpsListen:     DefaultOpsListen,
		BaseURL:       "http://localhost:8080",
		Bus:           "db",
		MaxAttempts:   outbox.DefaultMaxAttempts,
		NATSURL:       natsbus.DefaultURL,
		NATSMode:      "jetstream",
		Worker:        true,
		Concurrency:   128,
		LogLevel:      "info",
		ParkMax:       delivery.DefaultParkMax,
		DateWindow:    inbox.DefaultDateWindow,
		// The outbox's, the bus's and delivery's own defaults, set here so that -h shows them.
		Lease:            outbox.DefaultLease,
		LedgerLease:      outbox.DefaultLedgerLease,
		NATSAckWait:      natsbus.DefaultAckWait,
		DeliveryTimeout:  delivery.DefaultTimeout,
		UnavailableAfter: delivery.DefaultUnavailableAfter,
		ProbeInterval:    delivery.DefaultProbeInterval,
		ParkRecheck:      delivery.DefaultParkRecheck,
		// The inbox's own defaults.
		InboxHostRequests: inbox.DefaultHostRequests,
		InboxHostBytes:    inbox.DefaultHostBytes,
		// The application's event streams.
		StreamKeepAlive: 15 * time.Second,
		StreamsMax:      1000,
		StreamsPerActor: 8,
	}
}

// parseConfig reads the environment, then the flags in args, and validates
// the result. The error names the flag or variable and the bad value.
func parseConfig(name string, args []string, getenv func(string) string) (Config, []string, error) {
	cfg := defaultConfigFor(name)
	fs := flag.NewFlagSet("courier "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ss := settingsFor(&cfg, name)
	for _, s := range ss {
		if v := getenv(s.env); v != "" {
			if err := s.value.Set(v); err != nil {
				return cfg, nil, fmt.Errorf("invalid %s=%q: %v", s.env, v, err)
			}
		}
		fs.Var(s.value, s.flag, s.usage+" (env "+s.env+")")
	}
	if err := fs.Parse(args); err != nil {
		return cfg, nil, err
	}
	fs.Visit(func(f *flag.Flag) {
		if (f.Name == "db" && postgres.HasPassword(cfg.DB)) || (f.Name == "admin-token" && cfg.AdminToken != "") {
			cfg.secretFlags = append(cfg.secretFlags, f.Name)
		}
	})
	if err := cfg.validate(); err != nil {
		return cfg, nil, err
	}
	return cfg, fs.Args(), nil
}

// warnSecretFlags logs one warning for each secret given on the command line,
// naming the flag and where the secret belongs, never the secret.
func (c Config) warnSecretFlags(logger *slog.Logger) {
	for _, f := range c.secretFlags {
		env := map[string]string{"db": "COURIER_DB", "admin-token": "COURIER_ADMIN_TOKEN"}[f]
		where := "set " + env + " in an environment file only its owner reads (mode 0600; deploy/OPERATING.md)"
		if f == "db" {
			where += ", or keep the password in PGPASSFILE"
		}
		logger.Warn("--"+f+" carries a secret on the command line, where every user of this machine can read it; "+where, "flag", f)
	}
}

func (c Config) validate() error {
	switch {
	case c.DB == "":
		return errors.New("invalid --db: empty path")
	case c.MaxAttempts < 1:
		return fmt.Errorf("invalid --max-attempts (EVENT_QUEUE_MAX_ATTEMPTS) %d: must be at least 1", c.MaxAttempts)
	case c.Concurrency < 1 || c.Concurrency > 1024:
		return fmt.Errorf("invalid --concurrency %d: must be between 1 and 1024", c.Concurrency)
	case c.Bus != "db" && c.Bus != "nats":
		return fmt.Errorf("invalid --bus (EVENT_BUS_BACKEND) %q: want db or nats", c.Bus)
	case c.NATSMode != "jetstream" && c.NATSMode != "core":
		return fmt.Errorf("invalid --nats-mode (NATS_MODE) %q: want jetstream or core", c.NATSMode)
	case c.PostgresConns < 2 || c.PostgresConns > 1000:
		return fmt.Errorf("invalid --postgres-conns (COURIER_POSTGRES_CONNS) %d: must be between 2 and 1000", c.PostgresConns)
	case c.Synchronous != "FULL" && c.Synchronous != "NORMAL":
		return fmt.Errorf("invalid --synchronous %q: want FULL or NORMAL", c.Synchronous)
	case c.ParkMax <= 0:
		return fmt.Errorf("invalid --park-max %s: must be positive", c.ParkMax)
	case c.DateWindow <= 0:
		return fmt.Errorf("invalid --date-window %s: must be positive", c.DateWindow)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"lease", c.Lease}, {"ledger-lease", c.LedgerLease}, {"nats-ack-wait", c.NATSAckWait},
		{"delivery-timeout", c.DeliveryTimeout}, {"unavailable-after", c.UnavailableAfter},
		{"probe-interval", c.ProbeInterval}, {"park-recheck", c.ParkRecheck},
		{"stream-keep-alive", c.StreamKeepAlive},
	} {
		if d.v < time.Second {
			return fmt.Errorf("invalid --%s %s: must be at least 1s", d.flag, d.v)
		}
	}
	if err := checkPostgresURL(c.DB); err != nil {
		return err
	}
	if keywordDSN(c.DB) {
		// Not repeated: it may carry a password.
		return errors.New("invalid --db (COURIER_DB): a PostgreSQL keyword/value string (host=... dbname=...) is not read; write it as a postgres:// URL, or give a SQLite file path")
	}
	if c.StreamsMax < 1 || c.StreamsPerActor < 1 {
		return fmt.Errorf("invalid --streams-max %d or --streams-per-actor %d: each must be at least 1", c.StreamsMax, c.StreamsPerActor)
	}
	if c.InboxHostRequests < 1 {
		return fmt.Errorf("invalid --inbox-host-requests (COURIER_INBOX_HOST_REQUESTS) %d: must be at least 1", c.InboxHostRequests)
	}
	if c.InboxHostBytes < inbox.DefaultMaxBody {
		return fmt.Errorf("invalid --inbox-host-bytes (COURIER_INBOX_HOST_BYTES) %d: must be at least %d, the largest body", c.InboxHostBytes, inbox.DefaultMaxBody)
	}
	if _, err := c.hostBudgets(); err != nil {
		return err
	}
	if _, err := c.webhookAllowAddrs(); err != nil {
		return err
	}
	if c.AdminToken != "" && len(c.AdminToken) < admin.MinTokenLen {
		return fmt.Errorf("invalid --admin-token (COURIER_ADMIN_TOKEN): %d characters, at least %d needed; %s",
			len(c.AdminToken), admin.MinTokenLen, admin.TokenAdvice)
	}
	if c.AdminToken != "" {
		if err := checkTokenStrength(c.AdminToken); err != nil {
			return fmt.Errorf("invalid --admin-token (COURIER_ADMIN_TOKEN): %v; %s", err, admin.TokenAdvice)
		}
	}
	if err := checkListen(c.Listen); err != nil {
		return fmt.Errorf("invalid --listen (COURIER_LISTEN) %q: %v", c.Listen, err)
	}
	if err := checkListen(c.OpsListen); err != nil {
		return fmt.Errorf("invalid --ops-listen %q: %v", c.OpsListen, err)
	}
	for _, n := range strings.Split(c.OpsHosts, ",") {
		if n = strings.TrimSpace(n); n != "" && !validHost(n) {
			return fmt.Errorf("invalid --ops-hosts (COURIER_OPS_HOSTS) entry %q: want a host name, like courier-1.internal", n)
		}
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return fmt.Errorf("invalid --base-url %q: want an absolute http(s) URL with no path, like https://social.example", c.BaseURL)
	}
	if c.Bus == "nats" {
		// natsbus's own check: it accepts what the bus connects to (a
		// comma-separated list, a bare host:port) and never repeats a
		// password the URL carries.
		if err := natsbus.ValidateURL(c.NATSURL); err != nil {
			return fmt.Errorf("invalid --nats-url (NATS_URL): %v; want nats://host:port", err)
		}
		if err := checkNATSHosts(c.NATSURL); err != nil {
			return fmt.Errorf("invalid --nats-url (NATS_URL): %v; want nats://host:port", err)
		}
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("invalid --log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	return nil
}

// hostBudgets parses --inbox-host-budgets: host=factor pairs separated by
// commas, nil when empty.
func (c Config) hostBudgets() (map[string]float64, error) {
	if strings.TrimSpace(c.InboxHostBudgets) == "" {
		return nil, nil
	}
	out := map[string]float64{}
	for _, part := range strings.Split(c.InboxHostBudgets, ",") {
		host, f, ok := strings.Cut(strings.TrimSpace(part), "=")
		host = strings.ToLower(strings.TrimSpace(host))
		factor, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if !ok || host == "" || strings.ContainsAny(host, "/ ") || err != nil || factor <= 0 || factor > 1000 {
			return nil, fmt.Errorf("invalid --inbox-host-budgets (COURIER_INBOX_HOST_BUDGETS) entry %q: want host=factor, like mastodon.social=4 (a factor above 0, at most 1000)", part)
		}
		out[host] = factor
	}
	return out, nil
}

// webhookAllowAddrs parses --webhook-allow-addresses: IP addresses or CIDR
// prefixes separated by commas, nil when empty.
func (c Config) webhookAllowAddrs() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(c.WebhookAllowAddresses, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			ip, err2 := netip.ParseAddr(part)
			if err2 != nil || ip.Zone() != "" {
				return nil, fmt.Errorf("invalid --webhook-allow-addresses (COURIER_WEBHOOK_ALLOW_ADDRESSES) entry %q: want an IP address or a CIDR prefix, like 169.254.10.20 or fd00:ec2::/64", part)
			}
			p = netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// BaseURL without a trailing slash.
func (c Config) base() string { return strings.TrimSuffix(c.BaseURL, "/") }

type stringValue string

func (s *stringValue) Set(v string) error { *s = stringValue(v); return nil }
func (s *stringValue) String() string     { return string(*s) }

type intValue int

func (i *intValue) Set(v string) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("%q is not a whole number", v)
	}
	*i = intValue(n)
	return nil
}
func (i *intValue) String() string { return strconv.Itoa(int(*i)) }

type boolValue bool

func (b *boolValue) Set(v string) error {
	p, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("%q is not true or false", v)
	}
	*b = boolValue(p)
	return nil
}
func (b *boolValue) String() string   { return strconv.FormatBool(bool(*b)) }
func (b *boolValue) IsBoolFlag() bool { return true }

type durationValue time.Duration

func (d *durationValue) Set(v string) error {
	p, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("%q is not a duration like 90s or 168h", v)
	}
	*d = durationValue(p)
	return nil
}
func (d *durationValue) String() string { return time.Duration(*d).String() }

// parseConfigPrefix reads the settings for a command that has flags of its
// own: the settings' flags are taken wherever they stand in args, and every
// other argument is returned in order for the command to parse.
func parseConfigPrefix(name string, args []string, getenv func(string) string) (Config, []string, error) {
	probe := defaultConfig()
	known := map[string]bool{}
	boolean := map[string]bool{}
	for _, s := range settings(&probe) {
		known[s.flag] = true
		if bf, ok := s.value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			boolean[s.flag] = true
		}
	}
	var ours, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		nameVal := strings.TrimLeft(a, "-")
		flagName, _, hasValue := strings.Cut(nameVal, "=")
		if !strings.HasPrefix(a, "-") || !known[flagName] {
			rest = append(rest, a)
			continue
		}
		ours = append(ours, a)
		if !hasValue && !boolean[flagName] && i+1 < len(args) {
			ours = append(ours, args[i+1])
			i++
		}
	}
	cfg, extra, err := parseConfig(name, ours, getenv)
	if err != nil {
		return cfg, nil, err
	}
	return cfg, append(extra, rest...), nil
}
