package loadgen

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestLivePlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.png")
	ss := []PlotSeries{
		{Name: "picker", Summary: Summary{CacheHitRate: 0.2, HitRate: 0.18, TTFT: Quantiles{P50: 800, P99: 7000}, E2E: Quantiles{P50: 1600}}, TTFTMs: []float64{0.5, 700, 800, 7000}},
		{Name: "round-robin", Summary: Summary{CacheHitRate: 0.08, TTFT: Quantiles{P50: 4000, P99: 20000}}, TTFTMs: []float64{3000, 4000, 20000}},
	}
	if err := Plot(path, "test", ss); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("not a PNG: %v", err)
	}
	if err := Plot(filepath.Join(t.TempDir(), "x.svg"), "test", ss); err == nil {
		t.Fatal("an .svg path was accepted")
	}
}
