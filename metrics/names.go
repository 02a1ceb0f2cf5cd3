package metrics

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// The operator artefacts ship in the binary, so tests (and an admin
// endpoint, if one wants) can check them against the running metrics.
var (
	//go:embed grafana/courier.json
	dashboard []byte
	//go:embed alerts.yml
	alertRules []byte
	//go:embed alerts_test.yml
	alertTests []byte
)

// Dashboard returns the Grafana dashboard JSON (grafana/courier.json).
func Dashboard() []byte { return slices.Clone(dashboard) }

// Names returns the sorted names of the metric families g exposes now.
// Vectors that have no series yet (a counter by outcome before the first
// event) are absent: compare against (*Metrics).Names for the full set.
func Names(g prometheus.Gatherer) ([]string, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("metrics: gather: %w", err)
	}
	names := make([]string, 0, len(mfs))
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	sort.Strings(names)
	return names, nil
}

// ScrapedNames returns the sorted, distinct sample names in a scrape body in
// the Prometheus text or OpenMetrics format (histograms appear as their
// _bucket, _sum and _count series). It is for end-to-end tests that scrape
// /metrics over HTTP.
func ScrapedNames(r io.Reader) ([]string, error) {
	seen := map[string]struct{}{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ \t")
		if end <= 0 {
			return nil, fmt.Errorf("metrics: scraped names: malformed sample line %q", line)
		}
		seen[line[:end]] = struct{}{}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics: scraped names: %w", err)
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// Unknown returns the names in referenced that are neither in known, nor the
// _bucket, _sum or _count series of a name in known, nor in ExternalNames.
// An empty result means every referenced metric exists.
func Unknown(referenced, known []string) []string {
	set := make(map[string]struct{}, len(known)+len(ExternalNames))
	for _, n := range known {
		set[n] = struct{}{}
	}
	for _, n := range ExternalNames {
		set[n] = struct{}{}
	}
	var missing []string
	for _, n := range referenced {
		if _, ok := set[n]; ok {
			continue
		}
		found := false
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok {
				if _, ok := set[base]; ok {
					found = true
					break
				}
			}
		}
		if !found {
			missing = append(missing, n)
		}
	}
	return missing
}

// ReferencedNames returns the sorted courier_ metric names used by the
// dashboard's queries and template variables and by the alert rules'
// expressions and their tests' input series.
func ReferencedNames() ([]string, error) {
	dash, err := DashboardExprs(dashboard)
	if err != nil {
		return nil, err
	}
	exprs := append(dash, RuleExprs(alertRules)...)
	exprs = append(exprs, RuleExprs(alertTests)...)
	seen := map[string]struct{}{}
	for _, e := range exprs {
		for _, n := range ExprNames(e) {
			seen[n] = struct{}{}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// DashboardExprs returns every PromQL query in a Grafana dashboard: the
// "expr" of each panel target (rows and nested panels included) and the
// "query"/"definition" of each query template variable.
func DashboardExprs(dashboardJSON []byte) ([]string, error) {
	var doc any
	if err := json.Unmarshal(dashboardJSON, &doc); err != nil {
		return nil, fmt.Errorf("metrics: dashboard: %w", err)
	}
	var exprs []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				walk(c, k)
			}
		case []any:
			for _, c := range v {
				walk(c, key)
			}
		case string:
			switch key {
			case "expr", "query", "definition":
				exprs = append(exprs, v)
			}
		}
	}
	walk(doc, "")
	return exprs, nil
}

var (
	ruleExprLine = regexp.MustCompile(`^(\s*)(?:-\s+)?(expr|series):\s*(.*)$`)
	courierName  = regexp.MustCompile(`(?:^|[^A-Za-z0-9_:])(courier_[A-Za-z0-9_:]*)`)
	quoted       = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
)

// RuleExprs returns the PromQL text of a Prometheus rule file or rule test
// file: every expr value (plain, quoted, or a | / > block) and every input
// series selector. It reads the subset of YAML those files use, without a
// YAML dependency.
func RuleExprs(ruleFile []byte) []string {
	var exprs []string
	lines := strings.Split(string(bytes.ReplaceAll(ruleFile, []byte("\r\n"), []byte("\n"))), "\n")
	for i := 0; i < len(lines); i++ {
		m := ruleExprLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, value := len(m[1]), strings.TrimSpace(m[3])
		if strings.HasPrefix(value, "|") || strings.HasPrefix(value, ">") {
			var block []string
			for i+1 < len(lines) {
				next := lines[i+1]
				if strings.TrimSpace(next) != "" && leadingSpaces(next) <= indent {
					break
				}
				block = append(block, strings.TrimSpace(next))
				i++
			}
			exprs = append(exprs, strings.Join(block, "\n"))
			continue
		}
		if n := len(value); n >= 2 && (value[0] == '\'' && value[n-1] == '\'' || value[0] == '"' && value[n-1] == '"') {
			value = value[1 : n-1]
		}
		exprs = append(exprs, value)
	}
	return exprs
}

func leadingSpaces(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

// ExprNames returns the courier_ metric names a PromQL expression uses,
// ignoring string literals (label values).
func ExprNames(expr string) []string {
	expr = quoted.ReplaceAllString(expr, `""`)
	var names []string
	for _, m := range courierName.FindAllStringSubmatch(expr, -1) {
		names = append(names, m[1])
	}
	return names
}
