package bench

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// decodePNG fails the test unless path holds a PNG of a plausible size.
func decodePNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a valid PNG: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
		t.Fatalf("%s is %v: too small to hold the panels", path, b)
	}
}

// A log-scale TTFT axis cannot show 0 ms (gonum's LogScale panics on
// non-positive values); PlotReport draws such values at TTFTFloorMs. The
// reports are built by hand: a fully cached prompt on an idle engine has a
// modelled TTFT of 0.
func TestPlotReport_ZeroMsPercentileDrawsAtTheFloor(t *testing.T) {
	for _, tc := range []struct {
		name string
		rs   []Result
	}{
		// A zero p50 beside positive values; per-request values out of
		// order (sorted for the CDF) and one strategy without any (left out
		// of the CDF).
		{"one zero percentile", []Result{
			{Name: StrategyRoundRobin, TokenHitRate: 0.2, TTFTModelP50Ms: 0, TTFTModelP99Ms: 850, TTFTModelMeanMs: 120,
				TTFTMs: []float64{850, 0, 3, 0, 40}},
			{Name: StrategyOracle, TokenHitRate: 0.5, TTFTModelP50Ms: 12, TTFTModelP99Ms: 300, TTFTModelMeanMs: 40},
		}},
		// Every value at or below the floor: without a fixed axis range,
		// gonum widens [1, 1] to [0, 2] and the log axis panics.
		{"every value zero", []Result{
			{Name: StrategyRoundRobin, TTFTMs: []float64{0, 0}},
			{Name: StrategyLeastLoaded, TTFTModelP99Ms: 0.4},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // drawing is slow under -race
			r := &Report{Trace: "hand-built", Requests: 5, IdealTokenHitRate: 0.6,
				Fleet: FleetConfig{Engines: 2, CacheBlocks: 8}, Strategies: tc.rs}
			path := filepath.Join(t.TempDir(), "report.png")
			if err := PlotReport(path, r); err != nil {
				t.Fatal(err)
			}
			decodePNG(t, path)
		})
	}
}

// A report read back from --json carries no per-request TTFTs: the CDF
// panel is left out rather than drawn empty.
func TestPlotReport_NoCDFWithoutPerRequestValues(t *testing.T) {
	r := &Report{Strategies: []Result{{Name: StrategyDynamo, TTFTModelP50Ms: 5}}}
	p, err := ttftCDFPanel(r)
	if err != nil || p != nil {
		t.Fatalf("CDF panel %v, %v; want none", p, err)
	}
}

func TestPlotReport_RejectsNonPNGAndEmptyReports(t *testing.T) {
	dir := t.TempDir()
	r := &Report{Strategies: []Result{{Name: StrategyRoundRobin}}}
	if err := PlotReport(filepath.Join(dir, "x.svg"), r); err == nil {
		t.Fatal("a .svg path was accepted")
	}
	if err := PlotReport(filepath.Join(dir, "x.png"), &Report{}); err == nil {
		t.Fatal("a report without strategies was accepted")
	}
}

func TestPlotSweep_WritesAPNG(t *testing.T) {
	mk := func(blocks int, hit float64) *Report {
		return &Report{Trace: "hand-built", IdealTokenHitRate: 0.5, Fleet: FleetConfig{Engines: 2, CacheBlocks: blocks},
			Strategies: []Result{{Name: StrategyRoundRobin, TokenHitRate: hit}, {Name: StrategyOracle, TokenHitRate: hit + 0.1}}}
	}
	path := filepath.Join(t.TempDir(), "sweep.png")
	if err := PlotSweep(path, []*Report{mk(8, 0.1), mk(16, 0.2), mk(32, 0.3)}); err != nil {
		t.Fatal(err)
	}
	decodePNG(t, path)
}
