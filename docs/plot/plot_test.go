package main

import (
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 10_000, []float64{0, 2000, 4000, 6000, 8000, 10000}},
		{0, 2.06, []float64{0, 0.5, 1, 1.5, 2, 2.5}},
		{0.07, 3.3, []float64{0, 1, 2, 3, 4}},
	} {
		got, _ := ticks(c.lo, c.hi)
		if !slices.Equal(got, c.want) {
			t.Errorf("ticks(%g, %g) = %v, want %v", c.lo, c.hi, got, c.want)
		}
	}
	if l := label(10000, 2000); l != "10,000" {
		t.Errorf("label = %q", l)
	}
	if l := label(1.5, 0.5); l != "1.5" {
		t.Errorf("label = %q", l)
	}
}

// The charts read what the benchmarks write and draw every series in its
// colour.
func TestChartsFromBenchmarkOutput(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(in, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("fanout-tls-http1-hung00-slow00-1.csv", "seconds,healthy_deliveries,slow_deliveries\n0,0,0\n5,5000,0\n10,10000,0\n")
	write("fanout-tls-http1-hung20-slow00-2.csv", "seconds,healthy_deliveries,slow_deliveries\n0,0,0\n6,4000,0\n12,8000,0\n")
	write("ops-at-scale.txt", "goos: linux\n"+
		"BenchmarkOpsAtScale/done=0/healthz-2 \t 20\t 73168 ns/op\n"+
		"BenchmarkOpsAtScale/done=0/scrape-2 \t 20\t 2060306 ns/op\n"+
		"BenchmarkOpsAtScale/done=0/admin-stats-2 \t 20\t 103641 ns/op\n"+
		"BenchmarkOpsAtScale/done=1000000/healthz-2 \t 20\t 93168 ns/op\n"+
		"BenchmarkOpsAtScale/done=1000000/scrape-2 \t 20\t 2460306 ns/op\n"+
		"BenchmarkOpsAtScale/done=1000000/admin-stats-2 \t 20\t 303641 ns/op\n")
	fan, err := fanoutChart(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(fan.series) != 2 || fan.series[1].points[2] != [2]float64{12, 8000} {
		t.Fatalf("fan-out series %+v", fan.series)
	}
	sc, err := scrapeChart(filepath.Join(in, "ops-at-scale.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.series) != 3 || sc.series[0].points[1] != [2]float64{1, 2.460306} {
		t.Fatalf("scrape series %+v", sc.series)
	}
	img := fan.render(960, 540)
	seen := map[color.RGBA]int{}
	for y := range 540 {
		for x := range 960 {
			seen[img.RGBAAt(x, y)]++
		}
	}
	for _, s := range fan.series {
		if seen[s.color] < 100 {
			t.Errorf("series %q: %d pixels of its colour", s.label, seen[s.color])
		}
	}
	if err := run(in, out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"fanout-hung.png", "scrape-at-scale.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := fanoutChart(t.TempDir()); err == nil {
		t.Error("no series: no error")
	}
}
