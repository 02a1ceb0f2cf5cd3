package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/courier-ap/courier/metrics"
)

func series(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + ","
			}
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return -1
}

// Init makes the series of every known label value exist at 0 before the
// first event, and the scrape-time gauges report 0 for known values the
// database has no row of.
func TestInitCreatesKnownSeriesAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{})
	m.Init(metrics.Known{EventTypes: []string{"delivery.post"}, Handlers: []string{"delivery.post"},
		HostStates: []string{"healthy", "unavailable"}})
	m.WatchQueue(metrics.QueueFuncs{
		Rows: func(context.Context) (map[string]map[string]int64, error) {
			return map[string]map[string]int64{"pending": {"inbox.received": 2}}, nil
		},
		OldestDue: func(context.Context, time.Time) (time.Time, bool, error) { return time.Time{}, false, nil },
	})
	m.WatchHosts(metrics.HostFuncs{
		Hosts:  func(context.Context) (map[string]int64, error) { return map[string]int64{"healthy": 3}, nil },
		Parked: func(context.Context) (int64, error) { return 0, nil },
	})
	rows := series(t, reg, "courier_outbox_rows")
	for _, st := range []string{"pending", "processing", "done", "dead_lettered"} {
		if v, ok := rows["status="+st+",type=delivery.post,"]; !ok || v != 0 {
			t.Errorf("courier_outbox_rows{%s, delivery.post} = %v, %v; want a 0", st, v, ok)
		}
	}
	if rows["status=pending,type=inbox.received,"] != 2 {
		t.Errorf("rows the database has: %v", rows)
	}
	hosts := series(t, reg, "courier_delivery_hosts")
	if hosts["state=healthy,"] != 3 {
		t.Errorf("hosts %v", hosts)
	}
	if v, ok := hosts["state=unavailable,"]; !ok || v != 0 {
		t.Errorf("unavailable hosts %v, %v; want a 0", v, ok)
	}
	for name, key := range map[string]string{
		"courier_outbox_events_handled_total":       "handler=delivery.post,outcome=permanent,",
		"courier_outbox_events_dead_lettered_total": "type=delivery.post,",
		"courier_outbox_events_settled_total":       "outcome=released,type=delivery.post,",
		"courier_outbox_ledger_claims_total":        "handler=delivery.post,result=taken_over,",
		"courier_delivery_attempts_total":           "outcome=retry,status_class=none,",
		"courier_delivery_duration_seconds":         "outcome=delivered,",
		"courier_inbox_requests_total":              "result=duplicate,",
	} {
		if v, ok := series(t, reg, name)[key]; !ok || v != 0 {
			t.Errorf("%s{%s} = %v, %v; want a 0", name, key, v, ok)
		}
	}
}

// A scrape-time query that fails reports courier_stats_up 0 and no gauges:
// the known values are not made up as zeros then.
func TestInitInventsNoZerosWhenTheQueryFails(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{})
	m.Init(metrics.Known{EventTypes: []string{"delivery.post"}, HostStates: []string{"healthy"}})
	m.WatchQueue(metrics.QueueFuncs{
		Rows: func(context.Context) (map[string]map[string]int64, error) {
			return nil, errors.New("database is locked")
		},
		OldestDue: func(context.Context, time.Time) (time.Time, bool, error) { return time.Time{}, false, nil },
	})
	m.WatchHosts(metrics.HostFuncs{
		Hosts:  func(context.Context) (map[string]int64, error) { return nil, errors.New("database is locked") },
		Parked: func(context.Context) (int64, error) { return 0, nil },
	})
	if rows := series(t, reg, "courier_outbox_rows"); len(rows) != 0 {
		t.Errorf("rows after a failed query: %v", rows)
	}
	if hosts := series(t, reg, "courier_delivery_hosts"); len(hosts) != 0 {
		t.Errorf("hosts after a failed query: %v", hosts)
	}
	if up := series(t, reg, "courier_stats_up"); up["source=queue,"] != 0 || up["source=hosts,"] != 0 {
		t.Errorf("stats up %v", up)
	}
}
