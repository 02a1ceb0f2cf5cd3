package metrics_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/courier-ap/courier/metrics"
)

// TestReferencedNamesExist is the guard between code and operator
// artefacts: every courier_ metric the dashboard, the alert rules or their
// tests query is one that New registers (or an ExternalNames entry).
func TestReferencedNamesExist(t *testing.T) {
	t.Parallel()
	referenced, err := metrics.ReferencedNames()
	if err != nil {
		t.Fatal(err)
	}
	// A parser that found nothing would pass vacuously.
	if len(referenced) < 15 {
		t.Fatalf("only %d names referenced: %q", len(referenced), referenced)
	}
	m := metrics.New(nil, metrics.BuildInfo{})
	if unknown := metrics.Unknown(referenced, m.Names()); len(unknown) > 0 {
		t.Fatalf("dashboard or alert rules query metrics courier does not export: %q", unknown)
	}
	// And the other way round: every metric is on the dashboard.
	dash, err := metrics.DashboardExprs(metrics.Dashboard())
	if err != nil {
		t.Fatal(err)
	}
	var onDashboard []string
	for _, e := range dash {
		onDashboard = append(onDashboard, metrics.ExprNames(e)...)
	}
	for _, n := range append(m.Names(), metrics.ExternalNames...) {
		if !slices.ContainsFunc(onDashboard, func(d string) bool {
			return d == n || d == n+"_bucket" || d == n+"_sum" || d == n+"_count"
		}) {
			t.Errorf("%s is on no dashboard panel", n)
		}
	}
}

func TestUnknownCatchesMistakes(t *testing.T) {
	t.Parallel()
	known := []string{"courier_outbox_handler_duration_seconds", "courier_relay_paused"}
	got := metrics.Unknown([]string{
		"courier_outbox_handler_duration_seconds_bucket", // histogram series
		"courier_relay_paused",
		"courier_jetstream_max_deliveries_total", // external
		"courier_relay_paused_total",             // typo
		"courier_relay_paused_bucket",            // not a histogram, but suffix rules are name-based
	}, known)
	if !slices.Equal(got, []string{"courier_relay_paused_total"}) {
		t.Fatalf("Unknown = %q", got)
	}
	names := metrics.ExprNames(`sum by (job) (rate(courier_a_total{job="courier_not_a_metric"}[5m])) / courier_b`)
	if !slices.Equal(names, []string{"courier_a_total", "courier_b"}) {
		t.Fatalf("ExprNames = %q", names)
	}
}

func TestRuleExprs(t *testing.T) {
	t.Parallel()
	in := `groups:
  - name: g
    rules:
      - alert: A
        expr: courier_a > 0
      - alert: B
        expr: |
          courier_b
            / courier_c
        for: 5m
      - alert: C
        expr: 'courier_d{x="y"} == 1'
tests:
  - input_series:
      - series: 'courier_e{job="j"}'
        values: '1x5'
`
	got := metrics.RuleExprs([]byte(in))
	want := []string{"courier_a > 0", "courier_b\n/ courier_c", `courier_d{x="y"} == 1`, `courier_e{job="j"}`}
	if !slices.Equal(got, want) {
		t.Fatalf("RuleExprs = %q, want %q", got, want)
	}
}

// TestDashboardShape checks what Grafana needs to load the dashboard and
// that every panel shows something.
func TestDashboardShape(t *testing.T) {
	t.Parallel()
	var dash struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
			GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(metrics.Dashboard(), &dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" || dash.Title == "" || len(dash.Panels) < 20 {
		t.Fatalf("uid %q title %q panels %d", dash.UID, dash.Title, len(dash.Panels))
	}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d repeated", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: bad gridPos %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
				t.Errorf("panel %q has an empty target", p.Title)
			}
		}
	}
}

// TestEveryAlertIsUnitTested keeps alerts_test.yml in step with alerts.yml.
func TestEveryAlertIsUnitTested(t *testing.T) {
	t.Parallel()
	alert := regexp.MustCompile(`(?m)^\s*-\s*alert:\s*(\S+)`)
	tested := regexp.MustCompile(`(?m)^\s*alertname:\s*(\S+)`)
	rules, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, m := range tested.FindAllStringSubmatch(string(tests), -1) {
		have[m[1]] = true
	}
	alerts := alert.FindAllStringSubmatch(string(rules), -1)
	if len(alerts) < 6 {
		t.Fatalf("only %d alerts found", len(alerts))
	}
	for _, m := range alerts {
		if !have[m[1]] {
			t.Errorf("alert %s has no case in alerts_test.yml", m[1])
		}
	}
}

func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus); alert rules not checked")
	}
	return path
}

// TestAlertRulesPromtool runs Prometheus's own checker and rule unit tests.
func TestAlertRulesPromtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		out, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestDashboardQueriesParse checks the PromQL of every dashboard query with
// promtool, by writing them as recording rules once Grafana's variables are
// replaced by values.
func TestDashboardQueriesParse(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	exprs, err := metrics.DashboardExprs(metrics.Dashboard())
	if err != nil {
		t.Fatal(err)
	}
	labelValues := regexp.MustCompile(`^label_values\(([^,()]+)(?:,\s*\w+)?\)$`)
	vars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$job", ".*", "${job}", ".*")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, e := range exprs {
		if e == "prometheus" { // the datasource variable's plugin id
			continue
		}
		if m := labelValues.FindStringSubmatch(e); m != nil {
			e = m[1] // a Grafana helper around a selector
		}
		e = vars.Replace(e)
		if strings.Contains(e, "$") {
			t.Errorf("query keeps an unknown variable: %s", e)
			continue
		}
		quoted, err := json.Marshal(e) // JSON strings are valid YAML scalars
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "      - record: dashboard:query%d\n        expr: %s\n", n, quoted)
		n++
	}
	if n < 25 {
		t.Fatalf("only %d dashboard queries found", n)
	}
	path := filepath.Join(t.TempDir(), "dashboard_rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), bin, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the dashboard queries: %v\n%s", err, out)
	}
}
