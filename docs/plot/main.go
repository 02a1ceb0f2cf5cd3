// Command plot draws the charts of docs/benchmarks.md from the benchmarks'
// own output, with the standard library only:
//
//	go run ./docs/plot            # reads docs/bench, writes docs/img
//
// docs/bench holds what the benchmarks wrote:
//
//   - fanout-MODE-hungNN-slowNN-N.csv, written by the fan-out benchmarks
//     with COURIER_BENCH_SERIES=docs/bench (delivery/bench_test.go,
//     BenchmarkFanoutHung): the deliveries the receivers counted over one
//     run's time. fanout-hung.png draws the run with 20% of the hosts hung
//     beside the all-healthy runs of the same mode.
//   - ops-at-scale.txt, the output of BenchmarkOpsAtScale
//     (cmd/courier/scale_test.go) at several history sizes
//     (COURIER_BENCH_DONE_ROWS): scrape-at-scale.png draws the time of a
//     /metrics scrape, of `admin stats` and of /healthz against the
//     outbox's done rows.
package main

import (
	"bufio"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

func main() {
	in := flag.String("in", "docs/bench", "directory of the benchmarks' output")
	out := flag.String("out", "docs/img", "directory the PNGs are written to")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintf(os.Stderr, "plot: %v\n", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	fan, err := fanoutChart(in)
	if err != nil {
		return err
	}
	scrape, err := scrapeChart(filepath.Join(in, "ops-at-scale.txt"))
	if err != nil {
		return err
	}
	for name, c := range map[string]chart{"fanout-hung.png": fan, "scrape-at-scale.png": scrape} {
		if err := writePNG(filepath.Join(out, name), c.render(960, 540)); err != nil {
			return err
		}
		fmt.Println(filepath.Join(out, name))
	}
	return nil
}

var fanoutName = regexp.MustCompile(`^fanout-([a-z0-9-]+?)-hung(\d+)-slow(\d+)-(\d+)\.csv$`)

// fanoutChart draws the fan-out runs of docs/bench of the mode that has a
// run with hung hosts: each as the deliveries its healthy hosts received
// over the run's time.
func fanoutChart(dir string) (chart, error) {
	files, err := filepath.Glob(filepath.Join(dir, "fanout-*.csv"))
	if err != nil {
		return chart{}, err
	}
	type run struct {
		path, mode string
		hung, slow int
		seq        int
	}
	var runs []run
	hungMode := ""
	for _, f := range files {
		m := fanoutName.FindStringSubmatch(filepath.Base(f))
		if m == nil {
			continue
		}
		r := run{path: f, mode: m[1]}
		r.hung, _ = strconv.Atoi(m[2])
		r.slow, _ = strconv.Atoi(m[3])
		r.seq, _ = strconv.Atoi(m[4])
		runs = append(runs, r)
		if r.hung > 0 {
			hungMode = r.mode
		}
	}
	if hungMode == "" {
		return chart{}, fmt.Errorf("no fanout-*-hungNN-*.csv with hung hosts in %s (run BenchmarkFanoutHung with COURIER_BENCH_SERIES=%s)", dir, dir)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].seq < runs[j].seq })
	c := chart{
		title:  "Fan-out of 10 notes to 1,000 hosts (10,000 deliveries), TLS HTTP/1.1",
		xLabel: "seconds since the first note",
		yLabel: "deliveries to healthy hosts",
	}
	healthy := 0
	for _, r := range runs {
		if r.mode != hungMode || r.slow > 0 {
			continue
		}
		pts, err := readSeries(r.path)
		if err != nil {
			return chart{}, err
		}
		s := series{points: pts}
		if r.hung > 0 {
			s.label = fmt.Sprintf("%d%% of the hosts hung (they read each POST, never answer)", r.hung)
			s.color = palette[1]
		} else {
			healthy++
			s.label = fmt.Sprintf("all hosts healthy, run %d", healthy)
			s.color = palette[[]int{0, 2, 3}[min(healthy-1, 2)]]
		}
		c.series = append(c.series, s)
	}
	zero := 0.0
	c.yFloor = &zero
	return c, nil
}

// readSeries reads seconds and healthy deliveries from a series CSV.
func readSeries(path string) ([][2]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) < 2 || len(rows[0]) < 2 || rows[0][0] != "seconds" {
		return nil, fmt.Errorf("%s: want a header seconds,healthy_deliveries,... and rows", path)
	}
	var pts [][2]float64
	for _, r := range rows[1:] {
		t, err1 := strconv.ParseFloat(r[0], 64)
		n, err2 := strconv.ParseFloat(r[1], 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		pts = append(pts, [2]float64{t, n})
	}
	return pts, nil
}

var opsLine = regexp.MustCompile(`^BenchmarkOpsAtScale/done=(\d+)/([a-z-]+)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op`)

// scrapeChart draws BenchmarkOpsAtScale's times against the done rows.
func scrapeChart(path string) (chart, error) {
	f, err := os.Open(path)
	if err != nil {
		return chart{}, err
	}
	defer f.Close()
	byName := map[string][][2]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := opsLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		rows, _ := strconv.ParseFloat(m[1], 64)
		ns, _ := strconv.ParseFloat(m[3], 64)
		byName[m[2]] = append(byName[m[2]], [2]float64{rows / 1e6, ns / 1e6})
		// With -count N, a size has N lines: the chart takes their median.
	}
	if err := sc.Err(); err != nil {
		return chart{}, err
	}
	c := chart{
		title:  "Operators' reads against the outbox's history (SQLite, synchronous=FULL)",
		xLabel: "done delivery rows, millions (with their ledger, targets and attempts)",
		yLabel: "milliseconds per request",
	}
	for i, n := range []struct{ key, label string }{
		{"scrape", "GET /metrics (a Prometheus scrape)"},
		{"admin-stats", "courier admin stats"},
		{"healthz", "GET /healthz (the floor of one request)"},
	} {
		pts := medians(byName[n.key])
		if len(pts) == 0 {
			return chart{}, fmt.Errorf("%s: no BenchmarkOpsAtScale/done=N/%s lines", path, n.key)
		}
		c.series = append(c.series, series{label: n.label, points: pts, color: palette[i], markers: true})
	}
	zero := 0.0
	c.yFloor = &zero
	return c, nil
}

// medians sorts points by x and keeps, for each x, the median of its ys.
func medians(pts [][2]float64) [][2]float64 {
	sort.Slice(pts, func(i, j int) bool { return pts[i][0] < pts[j][0] || pts[i][0] == pts[j][0] && pts[i][1] < pts[j][1] })
	var out [][2]float64
	for i := 0; i < len(pts); {
		j := i
		for j < len(pts) && pts[j][0] == pts[i][0] {
			j++
		}
		group := pts[i:j]
		m := group[len(group)/2][1]
		if len(group)%2 == 0 {
			m = (group[len(group)/2-1][1] + m) / 2
		}
		out = append(out, [2]float64{pts[i][0], m})
		i = j
	}
	return out
}

func writePNG(path string, img image.Image) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
