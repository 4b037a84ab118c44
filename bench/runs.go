package bench

import (
	"slices"
	"sort"
)

// MaxRuns bounds Config.Runs: each run is a whole replay of the trace.
const MaxRuns = 16

// RunFigures are one run's headline figures of a strategy when a bench
// replays it several times (Config.Runs): the run's seed and its token hit
// rate (0..1), requests max/mean and modelled TTFT p50 and p99 (ms).
type RunFigures struct {
	Seed                              uint64
	TokenHitRate, MaxOverMeanRequests float64
	TTFTModelP50Ms, TTFTModelP99Ms    float64
}

// figures are r's headline figures, of the run seeded seed.
func (r *Result) figures(seed uint64) RunFigures {
	return RunFigures{Seed: seed, TokenHitRate: r.TokenHitRate, MaxOverMeanRequests: r.MaxOverMeanRequests,
		TTFTModelP50Ms: r.TTFTModelP50Ms, TTFTModelP99Ms: r.TTFTModelP99Ms}
}

// medianOfRuns folds one strategy's runs (the same trace and settings,
// seeded seeds[i]) into one Result. Every figure a target reads is its
// median over the runs (the mean of the middle two for an even count):
// the hit rate, its fraction of ideal, requests max/mean, the TTFT
// percentiles and mean, the lookup latencies. What has no median (the
// per-engine counts, the sorted TTFTs a plot draws, the reason codes, the
// token counts, the counters and the wall time) is the median run's: the
// run whose TTFT p50 is the median (the lower middle for an even count).
// Runs lists every run's figures. One run is returned as it is, without
// Runs.
func medianOfRuns(runs []*Result, seeds []uint64) *Result {
	if len(runs) == 1 {
		return runs[0]
	}
	order := make([]int, len(runs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return runs[order[a]].TTFTModelP50Ms < runs[order[b]].TTFTModelP50Ms })
	out := *runs[order[(len(runs)-1)/2]]
	med := func(get func(*Result) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		return median(v)
	}
	out.TokenHitRate = med(func(r *Result) float64 { return r.TokenHitRate })
	out.FractionOfIdeal = med(func(r *Result) float64 { return r.FractionOfIdeal })
	out.MaxOverMeanRequests = med(func(r *Result) float64 { return r.MaxOverMeanRequests })
	out.TTFTModelP50Ms = med(func(r *Result) float64 { return r.TTFTModelP50Ms })
	out.TTFTModelP90Ms = med(func(r *Result) float64 { return r.TTFTModelP90Ms })
	out.TTFTModelP99Ms = med(func(r *Result) float64 { return r.TTFTModelP99Ms })
	out.TTFTModelMeanMs = med(func(r *Result) float64 { return r.TTFTModelMeanMs })
	out.LookupP50Us = med(func(r *Result) float64 { return r.LookupP50Us })
	out.LookupP99Us = med(func(r *Result) float64 { return r.LookupP99Us })
	out.Runs = make([]RunFigures, len(runs))
	for i, r := range runs {
		out.Runs[i] = r.figures(seeds[i])
	}
	return &out
}

// median is the median of v (the mean of the middle two for an even
// count; 0 for none); v is not changed.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
