package metrics_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-ap/courier/metrics"
)

// wantNames is the contract with the dashboard, the alert rules and the
// operators: renaming one of these is a breaking change.
var wantNames = []string{
	"courier_app_stream_events_total",
	"courier_app_streams",
	"courier_build_info",
	"courier_delivery_attempts_total",
	"courier_delivery_duration_seconds",
	"courier_delivery_hosts",
	"courier_delivery_order_waits_total",
	"courier_delivery_parked",
	"courier_delivery_parked_total",
	"courier_delivery_superseded_total",
	"courier_inbox_deferred_total",
	"courier_inbox_followers_sync_total",
	"courier_inbox_forwards_total",
	"courier_inbox_requests_total",
	"courier_outbox_events_dead_lettered_total",
	"courier_outbox_events_enqueued_total",
	"courier_outbox_events_handled_total",
	"courier_outbox_events_settled_total",
	"courier_outbox_handler_duration_seconds",
	"courier_outbox_ledger_claims_total",
	"courier_outbox_oldest_due_pending_age_seconds",
	"courier_outbox_rows",
	"courier_outbox_rows_claimed_total",
	"courier_relay_lag_seconds",
	"courier_relay_paused",
	"courier_stats_query_duration_seconds",
	"courier_stats_up",
	"courier_webhook_attempts_total",
	"courier_webhook_duration_seconds",
}

func newMetrics(t *testing.T) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := metrics.NewWithConfig(reg, metrics.Config{
		Build: metrics.BuildInfo{Version: "v1.2.3", Revision: "abc123", GoVersion: "go1.26.8"},
	})
	if err != nil {
		t.Fatalf("NewWithConfig: %v", err)
	}
	return m, reg
}

func TestNewRegistersEveryName(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	if got := m.Names(); !slices.Equal(got, wantNames) {
		t.Fatalf("Names() =\n%q\nwant\n%q", got, wantNames)
	}
	for _, n := range m.Names() {
		if !strings.HasPrefix(n, "courier_") {
			t.Errorf("%s lacks the courier_ prefix", n)
		}
	}
	// The pedantic registry checks every collected metric against its
	// description; record one of everything and gather.
	recordOneOfEach(m)
	names, err := metrics.Names(reg)
	if err != nil {
		t.Fatalf("Names(reg): %v", err)
	}
	// Everything New registers is exposed once recorded (the stats gauges
	// need a source, attached in the stats tests), plus Go and process
	// collectors.
	for _, n := range wantNames {
		if strings.HasPrefix(n, "courier_outbox_rows") || n == "courier_outbox_oldest_due_pending_age_seconds" ||
			n == "courier_delivery_hosts" || n == "courier_delivery_parked" || strings.HasPrefix(n, "courier_stats_") {
			continue
		}
		if !slices.Contains(names, n) {
			t.Errorf("gathered families lack %s", n)
		}
	}
	for _, n := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if !slices.Contains(names, n) {
			t.Errorf("gathered families lack the runtime collector's %s", n)
		}
	}
}

func recordOneOfEach(m *metrics.Metrics) {
	m.Outbox().Enqueued("delivery.post", 3)
	m.Outbox().Claimed(2)
	m.Outbox().Handled("delivery.post", "delivery.post", metrics.OutcomeSuccess, 20*time.Millisecond)
	m.Outbox().Settled("delivery.post", "succeeded")
	m.Outbox().DeadLettered("delivery.post")
	m.Outbox().LedgerClaimed("delivery.post", metrics.ClaimClaimed)
	m.Delivery().Attempt(metrics.DeliveryDelivered, 202, 150*time.Millisecond)
	m.Delivery().Parked("unavailable")
	m.Delivery().Superseded()
	m.Delivery().OrderWait()
	m.Webhook().Attempt(metrics.DeliveryDelivered, 204, 20*time.Millisecond)
	m.Inbox().Request(metrics.InboxAccepted)
	m.App().StreamOpened("outbox", 1)
	m.App().StreamEvents("outbox", 2)
	m.Inbox().Deferred(metrics.InboxDeferredKeyHostBusy)
	m.Inbox().FollowersSync("in_sync")
	m.Relay().SetPaused(true)
	m.Relay().SetLag(1500 * time.Millisecond)
}

func TestBuildInfo(t *testing.T) {
	t.Parallel()
	_, reg := newMetrics(t)
	want := `
# HELP courier_build_info Always 1; the labels describe the running courier binary.
# TYPE courier_build_info gauge
courier_build_info{go_version="go1.26.8",revision="abc123",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "courier_build_info"); err != nil {
		t.Fatal(err)
	}
	b := metrics.ReadBuildInfo("v9")
	if b.Version != "v9" || b.GoVersion == "" {
		t.Fatalf("ReadBuildInfo(v9) = %+v", b)
	}
}

func TestRecordedValues(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	o := m.Outbox()
	o.Enqueued("note.create", 2)
	o.Enqueued("note.create", 1)
	o.Enqueued("note.create", 0) // no-op
	o.Handled("note.create", "delivery.post", metrics.OutcomeSuccess, 30*time.Millisecond)
	o.Handled("note.create", "delivery.post", metrics.OutcomeFailure, 2*time.Second)
	o.Handled("note.create", "delivery.post", metrics.OutcomeSkippedDone, 0) // no duration for a skipped run
	o.LedgerClaimed("delivery.post", metrics.ClaimHeldElsewhere)
	o.LedgerClaimed("delivery.post", metrics.ClaimHeldElsewhere)
	o.Settled("note.create", "failed")
	d := m.Delivery()
	d.Attempt(metrics.DeliveryDelivered, 202, 100*time.Millisecond)
	d.Attempt(metrics.DeliveryRetry, 503, 3*time.Second)
	d.Attempt(metrics.DeliveryRetry, 0, 10*time.Second) // timeout: no response
	d.Attempt(metrics.DeliveryPermanent, 410, 50*time.Millisecond)
	m.Inbox().Request("bad_signature")
	m.Inbox().Request("bad_signature")
	m.Relay().SetPaused(true)
	m.Relay().SetPaused(false)
	m.Relay().SetLag(-time.Second)

	want := `
# HELP courier_outbox_events_enqueued_total Events inserted into the outbox, by event type (counted at insert: conflict-ignored duplicates are not counted, a rolled-back transaction's are).
# TYPE courier_outbox_events_enqueued_total counter
courier_outbox_events_enqueued_total{type="note.create"} 3
# HELP courier_outbox_events_handled_total Handler runs by handler and outcome (success, failure, permanent, deferred, skipped_done, held_elsewhere, ledger_error, interrupted).
# TYPE courier_outbox_events_handled_total counter
courier_outbox_events_handled_total{handler="delivery.post",outcome="failure"} 1
courier_outbox_events_handled_total{handler="delivery.post",outcome="skipped_done"} 1
courier_outbox_events_handled_total{handler="delivery.post",outcome="success"} 1
# HELP courier_outbox_events_settled_total Deliveries of an event to all its handlers, by event type and outcome (succeeded, failed, deferred, dead, released).
# TYPE courier_outbox_events_settled_total counter
courier_outbox_events_settled_total{outcome="failed",type="note.create"} 1
# HELP courier_outbox_ledger_claims_total Processed-events ledger claims by handler and result (claimed, taken_over, held_elsewhere, already_done).
# TYPE courier_outbox_ledger_claims_total counter
courier_outbox_ledger_claims_total{handler="delivery.post",result="held_elsewhere"} 2
# HELP courier_delivery_attempts_total Delivery POSTs to remote inboxes by outcome (delivered, retry, permanent, refused) and HTTP status class (2xx..5xx, none when no response arrived).
# TYPE courier_delivery_attempts_total counter
courier_delivery_attempts_total{outcome="delivered",status_class="2xx"} 1
courier_delivery_attempts_total{outcome="permanent",status_class="4xx"} 1
courier_delivery_attempts_total{outcome="retry",status_class="5xx"} 1
courier_delivery_attempts_total{outcome="retry",status_class="none"} 1
# HELP courier_inbox_requests_total Inbound inbox POSTs by result: accepted, duplicate, or the rejection reason.
# TYPE courier_inbox_requests_total counter
courier_inbox_requests_total{result="bad_signature"} 2
# HELP courier_relay_paused 1 while the relay is paused because the broker is unreachable, else 0.
# TYPE courier_relay_paused gauge
courier_relay_paused 0
# HELP courier_relay_lag_seconds How long the oldest row of the relay's latest batch had been due when it was published (0 when idle).
# TYPE courier_relay_lag_seconds gauge
courier_relay_lag_seconds 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"courier_outbox_events_enqueued_total", "courier_outbox_events_handled_total", "courier_outbox_events_settled_total",
		"courier_outbox_ledger_claims_total", "courier_delivery_attempts_total",
		"courier_inbox_requests_total", "courier_relay_paused", "courier_relay_lag_seconds"); err != nil {
		t.Fatal(err)
	}
	// Durations: two handler runs observed (the skip is not), one in the
	// 2.5 s bucket; four delivery latencies.
	if n := testutil.CollectAndCount(reg, "courier_outbox_handler_duration_seconds"); n != 1 {
		t.Fatalf("handler duration series = %d, want 1", n)
	}
	assertHistogram(t, reg, "courier_outbox_handler_duration_seconds", map[string]string{"handler": "delivery.post"}, 2, 2.03)
	assertHistogram(t, reg, "courier_delivery_duration_seconds", map[string]string{"outcome": "retry"}, 2, 13)
}

func assertHistogram(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string, count uint64, sum float64) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, mm := range mf.GetMetric() {
			for _, lp := range mm.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			h := mm.GetHistogram()
			if h.GetSampleCount() != count || h.GetSampleSum() < sum-1e-9 || h.GetSampleSum() > sum+1e-9 {
				t.Fatalf("%s%v: count %d sum %g, want %d and %g", name, labels, h.GetSampleCount(), h.GetSampleSum(), count, sum)
			}
			return
		}
	}
	t.Fatalf("%s%v not gathered", name, labels)
}

func TestNilSafe(t *testing.T) {
	t.Parallel()
	for _, m := range []*metrics.Metrics{nil, {}} {
		recordOneOfEach(m)
		m.Outbox().Handled("t", "h", metrics.OutcomeDeferred, time.Second)
		m.WatchQueue(nil)
		m.WatchHosts(nil)
		if m.Names() != nil {
			t.Fatalf("Names of an empty Metrics = %v", m.Names())
		}
	}
	var hb *metrics.Heartbeat
	hb.Beat()
	if err := hb.Check(time.Second)(t.Context()); !errors.Is(err, metrics.ErrStale) {
		t.Fatalf("nil heartbeat check = %v, want ErrStale", err)
	}
}

func TestNewWithoutRegistry(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil, metrics.BuildInfo{})
	m.Outbox().Enqueued("x", 1) // records into unregistered collectors
	if len(m.Names()) != len(wantNames) {
		t.Fatalf("Names() = %v", m.Names())
	}
}

func TestNewTwiceSharesCollectors(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	a := metrics.New(reg, metrics.BuildInfo{Version: "v1"})
	b := metrics.New(reg, metrics.BuildInfo{Version: "v1"})
	a.Outbox().Claimed(2)
	b.Outbox().Claimed(3)
	want := `
# HELP courier_outbox_rows_claimed_total Outbox rows claimed by the db worker (reclaimed rows whose lease expired included).
# TYPE courier_outbox_rows_claimed_total counter
courier_outbox_rows_claimed_total 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "courier_outbox_rows_claimed_total"); err != nil {
		t.Fatal(err)
	}
}

func TestNewReportsConflicts(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	// Someone else registered courier_relay_paused with another shape.
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "courier_relay_paused", Help: "x"}, []string{"a"}))
	if _, err := metrics.NewWithConfig(reg, metrics.Config{}); err == nil {
		t.Fatal("NewWithConfig on a conflicting registry succeeded")
	}
	if _, err := metrics.NewWithConfig(nil, metrics.Config{MaxLabelValues: -1}); err == nil {
		t.Fatal("NewWithConfig accepted MaxLabelValues -1")
	}
	if _, err := metrics.NewWithConfig(nil, metrics.Config{ScrapeTimeout: -time.Second}); err == nil {
		t.Fatal("NewWithConfig accepted a negative scrape timeout")
	}
}

func TestLabelValuesAreBounded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.NewWithConfig(reg, metrics.Config{MaxLabelValues: 3, NoRuntimeCollectors: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"accepted", "duplicate", "bad_signature", "too_large", "bad_digest", "accepted", "", "\xff\xfe", strings.Repeat("x", 500)} {
		m.Inbox().Request(r)
	}
	want := `
# HELP courier_inbox_requests_total Inbound inbox POSTs by result: accepted, duplicate, or the rejection reason.
# TYPE courier_inbox_requests_total counter
courier_inbox_requests_total{result="accepted"} 2
courier_inbox_requests_total{result="bad_signature"} 1
courier_inbox_requests_total{result="duplicate"} 1
courier_inbox_requests_total{result="other"} 4
courier_inbox_requests_total{result="unknown"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "courier_inbox_requests_total"); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidLabelValuesDoNotPanic(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.NewWithConfig(reg, metrics.Config{NoRuntimeCollectors: true})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 100) // multi-byte runes across the cut
	m.Outbox().Enqueued("\xff"+"bad", 1)
	m.Outbox().Enqueued(long, 1)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, mf := range mfs {
		if mf.GetName() != "courier_outbox_events_enqueued_total" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			for _, lp := range mm.GetLabel() {
				values = append(values, lp.GetValue())
			}
		}
	}
	if len(values) != 2 {
		t.Fatalf("label values = %q, want 2", values)
	}
	for _, v := range values {
		if len(v) > 64 || !strings.ContainsRune(v, '\uFFFD') && !strings.HasPrefix(v, "é") {
			t.Errorf("label value %q not sanitised", v)
		}
	}
}

func TestStatusClass(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]string{0: "none", -1: "none", 99: "none", 100: "1xx", 200: "2xx", 202: "2xx",
		301: "3xx", 404: "4xx", 410: "4xx", 429: "4xx", 500: "5xx", 599: "5xx", 600: "none"} {
		if got := metrics.StatusClass(code); got != want {
			t.Errorf("StatusClass(%d) = %q, want %q", code, got, want)
		}
	}
}

func TestHandlerServesScrape(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	recordOneOfEach(m)
	srv := httptest.NewServer(metrics.Handler(reg))
	t.Cleanup(srv.Close)

	for _, accept := range []string{"", "application/openmetrics-text; version=1.0.0"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics (%q): %d %v", accept, resp.StatusCode, err)
		}
		scraped, err := metrics.ScrapedNames(strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"courier_outbox_rows_claimed_total", "courier_outbox_handler_duration_seconds_bucket",
			"courier_build_info", "go_goroutines"} {
			if !slices.Contains(scraped, n) {
				t.Errorf("scrape (%q) lacks %s", accept, n)
			}
		}
		var courier []string
		for _, n := range scraped {
			if strings.HasPrefix(n, "courier_") {
				courier = append(courier, n)
			}
		}
		if unknown := metrics.Unknown(courier, m.Names()); len(unknown) > 0 {
			t.Errorf("scrape (%q) has courier_ series New does not register: %q", accept, unknown)
		}
	}
}

func TestScrapedNamesRejectsGarbage(t *testing.T) {
	t.Parallel()
	if _, err := metrics.ScrapedNames(strings.NewReader("{bad} 1\n")); err == nil {
		t.Fatal("ScrapedNames accepted a sample line without a name")
	}
}
