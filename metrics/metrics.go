// Package metrics holds courier's Prometheus metrics, the collectors that read
// queue and host gauges from the database at scrape time, the /healthz and
// /readyz handlers, and the operator artefacts that query them: the Grafana
// dashboard (grafana/courier.json) and the Prometheus alert rules
// (alerts.yml).
//
// Nothing here is global. New registers every metric on the Registerer it is
// given, so each test gets a fresh registry. Every recording method is
// nil-safe: a nil *Metrics, or a nil subsystem such as a nil *Outbox, records
// nothing, so packages take metrics as an optional dependency.
//
// metrics imports no other package of courier. Producers report through plain
// methods with string and time.Duration arguments, and the database-backed
// gauges come through the QueueStats and HostStats interfaces declared here,
// which the packages that own the tables implement.
//
// Wiring in a process:
//
//	reg := prometheus.NewRegistry()
//	m := metrics.New(reg, metrics.ReadBuildInfo(version))
//	o := m.Outbox()
//	obs := &outbox.Observer{
//		Handled:       o.Handled,
//		LedgerClaimed: o.LedgerClaimed,
//		DeadLettered:  o.DeadLettered,
//		Claimed:       o.Claimed,
//		Settled:       func(typ string, out outbox.Outcome) { o.Settled(typ, out.String()) },
//	}
//	m.WatchQueue(queueStats) // implemented by the owner of event_queue
//	m.WatchHosts(hostStats)  // implemented by the delivery package
//	mux.Handle("/metrics", metrics.Handler(reg))
//	mux.Handle("/healthz", metrics.Health(map[string]metrics.Check{"worker": beat.Check(2 * time.Minute)}))
//	mux.Handle("/readyz", metrics.Health(map[string]metrics.Check{"db": dbReady, "nats": natsConnected}))
package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace prefixes every metric courier defines.
const Namespace = "courier"

// ExternalNames are metrics that courier exports but that New does not
// register, because the package that owns the thing being counted registers
// them itself on the same registry. Tests that check the dashboard and the
// alert rules against New's names accept these too.
var ExternalNames = []string{
	// Registered by the JetStream bus (outbox/natsbus): max-deliveries
	// advisories seen on
	// $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>.
	"courier_jetstream_max_deliveries_total",
	// Registered by the JetStream bus: terminated advisories (a permanent
	// failure ended the message).
	"courier_jetstream_terminated_total",
	// Registered by the JetStream bus: rows the relay published and marked
	// done, and rows it deferred because NATS did not acknowledge them.
	"courier_nats_relay_published_total",
	"courier_nats_relay_deferred_total",
	// Registered by the JetStream bus: messages the consumer ran through the
	// handlers, by outcome.
	"courier_nats_deliveries_total",
}

// BuildInfo describes the running binary; it is exported as the constant
// labels of courier_build_info.
type BuildInfo struct {
	// Version is the release version ("v1.2.0"); empty means "unknown".
	Version string
	// Revision is the VCS revision the binary was built from; empty means
	// "unknown".
	Revision string
	// GoVersion is the toolchain version; empty means runtime.Version().
	GoVersion string
}

// ReadBuildInfo returns the BuildInfo of the running binary: version as given
// (falling back to the main module's version), the VCS revision embedded by
// the Go toolchain (with a "-dirty" suffix for a modified tree), and the Go
// version.
func ReadBuildInfo(version string) BuildInfo {
	b := BuildInfo{Version: version, GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if b.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		b.Version = info.Main.Version
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "" {
		b.Revision += "-dirty"
	}
	return b
}

func (b BuildInfo) withDefaults() BuildInfo {
	if b.Version == "" {
		b.Version = "unknown"
	}
	if b.Revision == "" {
		b.Revision = "unknown"
	}
	if b.GoVersion == "" {
		b.GoVersion = runtime.Version()
	}
	return b
}

// Config tunes NewWithConfig. The zero value (plus a BuildInfo) is the
// production setting.
type Config struct {
	// Build is exported as courier_build_info.
	Build BuildInfo
	// ScrapeTimeout bounds each database query run at scrape time by the
	// QueueStats and HostStats collectors (default 5 s). A query that runs
	// out of time reports courier_stats_up{source}=0 and no gauges, rather
	// than holding up the scrape.
	ScrapeTimeout time.Duration
	// MaxLabelValues caps the distinct values each caller-supplied label
	// (event type, handler, outcome, rejection reason, host state) may take
	// in one process (default 64); further values are reported as "other",
	// so a bug or a hostile input cannot explode the series count.
	MaxLabelValues int
	// Now is the clock used for ages (default time.Now).
	Now func() time.Time
	// Logger receives scrape-time query failures at warn level (nil means
	// discard).
	Logger *slog.Logger
	// NoRuntimeCollectors leaves out the Go and process collectors (default
	// false: they are registered). Set it when the registry already has them.
	NoRuntimeCollectors bool
}

func (c Config) withDefaults() Config {
	c.Build = c.Build.withDefaults()
	if c.ScrapeTimeout == 0 {
		c.ScrapeTimeout = 5 * time.Second
	}
	if c.MaxLabelValues == 0 {
		c.MaxLabelValues = 64
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.ScrapeTimeout < 0 {
		return fmt.Errorf("metrics: scrape timeout %s is negative", c.ScrapeTimeout)
	}
	if c.MaxLabelValues < 1 {
		return fmt.Errorf("metrics: max label values %d is below 1", c.MaxLabelValues)
	}
	return nil
}

// Metrics is the set of courier's metrics registered on one registry.
// A nil *Metrics records nothing.
type Metrics struct {
	outbox   *Outbox
	delivery *Delivery
	inbox    *Inbox
	relay    *Relay
	webhook  *Webhook
	app      *App
	stats    *statsCollector
	names    []string
}

// New registers courier's metrics on reg (Go and process collectors
// included) and returns them. A nil reg registers nothing, which is handy for
// code that wants working but unexported metrics.
//
// Registering on a registry that already holds the same metrics (New called
// twice on one registry) reuses the registered ones. Any other registration
// conflict is a wiring bug and panics, as prometheus.MustRegister does; use
// NewWithConfig to get it as an error instead.
func New(reg prometheus.Registerer, build BuildInfo) *Metrics {
	m, err := NewWithConfig(reg, Config{Build: build})
	if err != nil {
		panic(err)
	}
	return m
}

// NewWithConfig is New with every setting exposed.
func NewWithConfig(reg prometheus.Registerer, cfg Config) (*Metrics, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &registrar{reg: reg, max: cfg.MaxLabelValues}

	b := cfg.Build
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; the labels describe the running courier binary.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "go_version": b.GoVersion},
	})
	buildInfo.Set(1)
	register(r, buildInfo, "courier_build_info")
	if !cfg.NoRuntimeCollectors {
		r.registerForeign(collectors.NewGoCollector())
		r.registerForeign(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}

	m := &Metrics{
		outbox:   newOutbox(r),
		delivery: newDelivery(r),
		inbox:    newInbox(r),
		relay:    newRelay(r),
		webhook:  newWebhook(r),
		app:      newApp(r),
	}
	stats := newStatsCollector(cfg, r.guard)
	m.stats = register(r, stats, stats.names()...) // after an earlier New, share its sources
	if r.err != nil {
		return nil, r.err
	}
	m.names = r.names
	sort.Strings(m.names)
	return m, nil
}

// Outbox returns the outbox metrics, nil for a nil m.
func (m *Metrics) Outbox() *Outbox {
	if m == nil {
		return nil
	}
	return m.outbox
}

// Delivery returns the delivery metrics, nil for a nil m.
func (m *Metrics) Delivery() *Delivery {
	if m == nil {
		return nil
	}
	return m.delivery
}

// Webhook returns the webhook metrics, nil for a nil m.
func (m *Metrics) Webhook() *Webhook {
	if m == nil {
		return nil
	}
	return m.webhook
}

// App returns the application streams' metrics, nil for a nil m.
func (m *Metrics) App() *App {
	if m == nil {
		return nil
	}
	return m.app
}

// Inbox returns the inbound-request metrics, nil for a nil m.
func (m *Metrics) Inbox() *Inbox {
	if m == nil {
		return nil
	}
	return m.inbox
}

// Relay returns the JetStream relay metrics, nil for a nil m.
func (m *Metrics) Relay() *Relay {
	if m == nil {
		return nil
	}
	return m.relay
}

// Names returns the sorted names of every courier_ metric that New
// registered (histograms by their base name, without _bucket, _sum and
// _count). The Go and process collectors' names are not included.
func (m *Metrics) Names() []string {
	if m == nil {
		return nil
	}
	return append([]string(nil), m.names...)
}

// registrar registers collectors and remembers their names and the first
// error, so constructors stay linear.
type registrar struct {
	reg   prometheus.Registerer
	max   int
	names []string
	err   error
}

func (r *registrar) guard() *labelGuard { return newLabelGuard(r.max) }

// register registers c, which exports the metrics names, and returns the
// collector to use: c itself, or the one of the same type already
// registered when New runs twice on a registry.
func register[C prometheus.Collector](r *registrar, c C, names ...string) C {
	r.names = append(r.names, names...)
	if got, ok := r.registerForeign(c).(C); ok {
		return got
	}
	return c
}

// registerForeign registers c without naming its metrics, and returns c or
// the collector already registered in its place.
func (r *registrar) registerForeign(c prometheus.Collector) prometheus.Collector {
	if r.reg == nil || r.err != nil {
		return c
	}
	if err := r.reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return are.ExistingCollector
		}
		r.err = fmt.Errorf("metrics: register: %w", err)
	}
	return c
}

func counterVec(r *registrar, subsystem, name, help string, labels ...string) *prometheus.CounterVec {
	return register(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: subsystem, Name: name, Help: help,
	}, labels), prometheus.BuildFQName(Namespace, subsystem, name))
}

func counter(r *registrar, subsystem, name, help string) prometheus.Counter {
	return register(r, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: subsystem, Name: name, Help: help,
	}), prometheus.BuildFQName(Namespace, subsystem, name))
}

func gaugeVec(r *registrar, subsystem, name, help string, labels ...string) *prometheus.GaugeVec {
	return register(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: subsystem, Name: name, Help: help,
	}, labels), prometheus.BuildFQName(Namespace, subsystem, name))
}

func gauge(r *registrar, subsystem, name, help string) prometheus.Gauge {
	return register(r, prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: subsystem, Name: name, Help: help,
	}), prometheus.BuildFQName(Namespace, subsystem, name))
}

func histogramVec(r *registrar, subsystem, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: subsystem, Name: name, Help: help, Buckets: buckets,
	}, labels), prometheus.BuildFQName(Namespace, subsystem, name))
}

// durationBuckets covers handler and HTTP delivery times, from a ledger hit
// (milliseconds) to a slow remote inbox near the client timeout.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
