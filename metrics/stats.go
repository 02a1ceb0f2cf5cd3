package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// QueueStats reads the outbox gauges from the database at scrape time. The
// package that owns event_queue implements it; its methods take builtin types
// only, so an implementation needs no import of this package.
type QueueStats interface {
	// CountRows calls fn once for every (status, event type) pair present in
	// the outbox with its number of rows.
	CountRows(ctx context.Context, fn func(status, eventType string, rows int64)) error
	// OldestPendingDue returns the due time (next attempt time) of the
	// pending row that has been due the longest, and false when no pending
	// row is due yet (or none exists).
	OldestPendingDue(ctx context.Context, now time.Time) (due time.Time, ok bool, err error)
}

// HostStats reads remote host health from wherever the delivery package
// keeps it (the database or memory) at scrape time.
type HostStats interface {
	// CountHosts calls fn once per health state (for instance "healthy",
	// "failing", "unavailable") with the number of remote hosts in it.
	CountHosts(ctx context.Context, fn func(state string, hosts int64)) error
	// CountParked returns the number of deliveries parked now because their
	// host is known down.
	CountParked(ctx context.Context) (int64, error)
}

// QueueFuncs adapts plain functions to QueueStats, so a process can wire a
// store whose methods have other shapes without a named adapter type. Both
// fields are required; a nil one makes the scrape-time query fail (and
// courier_stats_up{source="queue"} report 0) rather than report a made-up 0.
type QueueFuncs struct {
	// Rows returns the number of rows by status, then event type.
	Rows func(ctx context.Context) (map[string]map[string]int64, error)
	// OldestDue is QueueStats.OldestPendingDue.
	OldestDue func(ctx context.Context, now time.Time) (due time.Time, ok bool, err error)
}

// ErrNotWired is returned by QueueFuncs and HostFuncs whose function is nil.
var ErrNotWired = errors.New("metrics: stats function not wired")

// CountRows implements QueueStats.
func (f QueueFuncs) CountRows(ctx context.Context, fn func(status, eventType string, rows int64)) error {
	if f.Rows == nil {
		return fmt.Errorf("%w: QueueFuncs.Rows", ErrNotWired)
	}
	byStatus, err := f.Rows(ctx)
	if err != nil {
		return err
	}
	for status, byType := range byStatus {
		for typ, n := range byType {
			fn(status, typ, n)
		}
	}
	return nil
}

// OldestPendingDue implements QueueStats.
func (f QueueFuncs) OldestPendingDue(ctx context.Context, now time.Time) (time.Time, bool, error) {
	if f.OldestDue == nil {
		return time.Time{}, false, fmt.Errorf("%w: QueueFuncs.OldestDue", ErrNotWired)
	}
	return f.OldestDue(ctx, now)
}

// HostFuncs adapts plain functions to HostStats. Both fields are required,
// as for QueueFuncs.
type HostFuncs struct {
	// Hosts returns the number of remote hosts by health state.
	Hosts func(ctx context.Context) (map[string]int64, error)
	// Parked is HostStats.CountParked.
	Parked func(ctx context.Context) (int64, error)
}

// CountHosts implements HostStats.
func (f HostFuncs) CountHosts(ctx context.Context, fn func(state string, hosts int64)) error {
	if f.Hosts == nil {
		return fmt.Errorf("%w: HostFuncs.Hosts", ErrNotWired)
	}
	byState, err := f.Hosts(ctx)
	if err != nil {
		return err
	}
	for state, n := range byState {
		fn(state, n)
	}
	return nil
}

// CountParked implements HostStats.
func (f HostFuncs) CountParked(ctx context.Context) (int64, error) {
	if f.Parked == nil {
		return 0, fmt.Errorf("%w: HostFuncs.Parked", ErrNotWired)
	}
	return f.Parked(ctx)
}

// Sources of scrape-time queries (label source of courier_stats_*).
const (
	sourceQueue = "queue"
	sourceHosts = "hosts"
)

// statsCollector is a prometheus.Collector that runs the QueueStats and
// HostStats queries when scraped, each bounded by the scrape timeout. Its
// sources are attached after New (the stores open later than metrics), and
// until then it reports nothing but its descriptions.
type statsCollector struct {
	cfg Config

	mu    sync.Mutex // guards queue, hosts, knownTypes and knownStates
	queue QueueStats
	hosts HostStats
	// knownTypes and knownStates are reported at 0 when absent (see Init).
	knownTypes, knownStates []string

	rows, oldestAge, hostsDesc, parked, up, took *prometheus.Desc

	types, statuses, states *labelGuard
}

func newStatsCollector(cfg Config, guard func() *labelGuard) *statsCollector {
	fq := func(sub, name string) string { return prometheus.BuildFQName(Namespace, sub, name) }
	return &statsCollector{
		cfg: cfg,
		rows: prometheus.NewDesc(fq("outbox", "rows"),
			"Outbox rows by status (pending, processing, done, dead_lettered) and event type, read at scrape time.",
			[]string{"status", "type"}, nil),
		oldestAge: prometheus.NewDesc(fq("outbox", "oldest_due_pending_age_seconds"),
			"How long the pending row that has been due the longest has waited since it became due (0 when none is due), read at scrape time.",
			nil, nil),
		hostsDesc: prometheus.NewDesc(fq("delivery", "hosts"),
			"Remote hosts by delivery health state, read at scrape time.", []string{"state"}, nil),
		parked: prometheus.NewDesc(fq("delivery", "parked"),
			"Deliveries parked now because their host is known down, read at scrape time.", nil, nil),
		up: prometheus.NewDesc(fq("stats", "up"),
			"1 when the latest scrape-time query of source (queue, hosts) succeeded, 0 when it failed or timed out.",
			[]string{"source"}, nil),
		took: prometheus.NewDesc(fq("stats", "query_duration_seconds"),
			"Time the latest scrape-time query of source took.", []string{"source"}, nil),
		types:    guard(),
		statuses: guard(),
		states:   guard(),
	}
}

func (c *statsCollector) names() []string {
	return []string{
		"courier_outbox_rows", "courier_outbox_oldest_due_pending_age_seconds",
		"courier_delivery_hosts", "courier_delivery_parked",
		"courier_stats_up", "courier_stats_query_duration_seconds",
	}
}

// Describe implements prometheus.Collector.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rows, c.oldestAge, c.hostsDesc, c.parked, c.up, c.took} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A failed or timed-out query
// reports courier_stats_up{source}=0 and none of that source's gauges, so a
// slow database never fails the whole scrape and a missing gauge is never
// mistaken for a zero.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	queue, hosts := c.queue, c.hosts
	types, states := c.knownTypes, c.knownStates
	c.mu.Unlock()

	// A scrape has no context of its own; the timeout bounds each source.
	if queue != nil {
		c.collectSource(ch, sourceQueue, func(ctx context.Context, out *[]prometheus.Metric) error {
			return c.collectQueue(ctx, queue, types, out)
		})
	}
	if hosts != nil {
		c.collectSource(ch, sourceHosts, func(ctx context.Context, out *[]prometheus.Metric) error {
			return c.collectHosts(ctx, hosts, states, out)
		})
	}
}

func (c *statsCollector) collectSource(ch chan<- prometheus.Metric, source string,
	query func(context.Context, *[]prometheus.Metric) error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ScrapeTimeout)
	defer cancel()
	start := time.Now()
	var out []prometheus.Metric
	err := query(ctx, &out)
	took := time.Since(start)
	up := 1.0
	if err != nil {
		up = 0
		out = nil
		c.cfg.Logger.Warn("metrics: scrape-time query failed", "source", source, "took", took, "err", err)
	}
	for _, m := range out {
		ch <- m
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, source)
	ch <- prometheus.MustNewConstMetric(c.took, prometheus.GaugeValue, took.Seconds(), source)
}

func (c *statsCollector) collectQueue(ctx context.Context, q QueueStats, known []string, out *[]prometheus.Metric) error {
	// Values are summed per label pair: two raw values may map to one label
	// value ("other", or after sanitising), and a const metric may appear
	// only once per label set.
	type key struct{ status, typ string }
	sums := map[key]float64{}
	c.zeroRows(known, func(status, typ string) { sums[key{status, typ}] += 0 })
	err := q.CountRows(ctx, func(status, eventType string, rows int64) {
		sums[key{c.statuses.value(status), c.types.value(eventType)}] += float64(rows)
	})
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := c.cfg.Now()
	due, ok, err := q.OldestPendingDue(ctx, now)
	if err != nil {
		return err
	}
	age := 0.0
	if ok && due.Before(now) {
		age = now.Sub(due).Seconds()
	}
	for k, n := range sums {
		*out = append(*out, prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, n, k.status, k.typ))
	}
	*out = append(*out, prometheus.MustNewConstMetric(c.oldestAge, prometheus.GaugeValue, age))
	return nil
}

func (c *statsCollector) collectHosts(ctx context.Context, h HostStats, known []string, out *[]prometheus.Metric) error {
	sums := map[string]float64{}
	for _, s := range known {
		sums[s] += 0
	}
	err := h.CountHosts(ctx, func(state string, hosts int64) {
		sums[c.states.value(state)] += float64(hosts)
	})
	if err != nil {
		return err
	}
	parked, err := h.CountParked(ctx)
	if err != nil {
		return err
	}
	for s, n := range sums {
		*out = append(*out, prometheus.MustNewConstMetric(c.hostsDesc, prometheus.GaugeValue, n, s))
	}
	*out = append(*out, prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(parked)))
	return nil
}

// WatchQueue makes the scrape-time collector read the outbox gauges
// (courier_outbox_rows, courier_outbox_oldest_due_pending_age_seconds) from
// q. A later call replaces the source; nil stops reading. It is a no-op on a
// nil m.
func (m *Metrics) WatchQueue(q QueueStats) {
	if m == nil || m.stats == nil {
		return
	}
	m.stats.mu.Lock()
	defer m.stats.mu.Unlock()
	m.stats.queue = q
}

// WatchHosts makes the scrape-time collector read the host gauges
// (courier_delivery_hosts, courier_delivery_parked) from h. A later call
// replaces the source; nil stops reading. It is a no-op on a nil m.
func (m *Metrics) WatchHosts(h HostStats) {
	if m == nil || m.stats == nil {
		return
	}
	m.stats.mu.Lock()
	defer m.stats.mu.Unlock()
	m.stats.hosts = h
}
