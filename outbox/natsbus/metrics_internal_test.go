package natsbus

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The bus's metrics exist from the start, every outcome of
// courier_nats_deliveries_total at 0, so a fresh worker's /metrics has
// every family the dashboard and the alert rules query.
func TestMetricsExistFromTheStart(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
	}
	for name, want := range map[string]int{
		"courier_jetstream_max_deliveries_total": 1,
		"courier_jetstream_terminated_total":     1,
		"courier_nats_relay_published_total":     1,
		"courier_nats_relay_deferred_total":      1,
		"courier_nats_deliveries_total":          5,
	} {
		if got[name] != want {
			t.Errorf("%s: %d series, want %d", name, got[name], want)
		}
	}
}
