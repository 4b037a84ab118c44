package bench

import "testing"

// Each figure is its own median over the runs, worked by hand; what has
// no median (the per-engine counts, the plot's TTFTs) is the run whose
// p50 is the median, and an even count takes the mean of the middle two
// figures and the lower middle run.
func TestMedianOfRuns_EachFigureItsMedian(t *testing.T) {
	a := &Result{Name: "x", TokenHitRate: 0.30, MaxOverMeanRequests: 1.10, TTFTModelP50Ms: 500, TTFTModelP99Ms: 9000, PerEngine: []int64{1}}
	b := &Result{Name: "x", TokenHitRate: 0.20, MaxOverMeanRequests: 1.30, TTFTModelP50Ms: 400, TTFTModelP99Ms: 7000, PerEngine: []int64{2}}
	c := &Result{Name: "x", TokenHitRate: 0.25, MaxOverMeanRequests: 1.20, TTFTModelP50Ms: 450, TTFTModelP99Ms: 8000, PerEngine: []int64{3}}
	got := medianOfRuns([]*Result{a, b, c}, []uint64{1, 2, 3})
	if got.TokenHitRate != 0.25 || got.MaxOverMeanRequests != 1.20 || got.TTFTModelP50Ms != 450 || got.TTFTModelP99Ms != 8000 {
		t.Fatalf("medians: hit %v, max/mean %v, p50 %v, p99 %v; want 0.25, 1.20, 450, 8000", got.TokenHitRate, got.MaxOverMeanRequests, got.TTFTModelP50Ms, got.TTFTModelP99Ms)
	}
	if got.PerEngine[0] != 3 {
		t.Fatalf("per-engine counts of run %d, want the median-p50 run's (3)", got.PerEngine[0])
	}
	if len(got.Runs) != 3 || got.Runs[0] != (RunFigures{Seed: 1, TokenHitRate: 0.30, MaxOverMeanRequests: 1.10, TTFTModelP50Ms: 500, TTFTModelP99Ms: 9000}) {
		t.Fatalf("runs %+v", got.Runs)
	}
	if a.TTFTModelP50Ms != 500 || a.Runs != nil {
		t.Fatal("the runs given were changed")
	}
	even := medianOfRuns([]*Result{a, b}, []uint64{1, 2})
	if even.TTFTModelP50Ms != 450 || even.TokenHitRate != 0.25 || even.PerEngine[0] != 2 {
		t.Fatalf("two runs: p50 %v, hit %v, run %d; want 450, 0.25 and the lower run (2)", even.TTFTModelP50Ms, even.TokenHitRate, even.PerEngine[0])
	}
	if single := medianOfRuns([]*Result{a}, []uint64{1}); single != a || single.Runs != nil {
		t.Fatal("one run is not returned as it is")
	}
}
