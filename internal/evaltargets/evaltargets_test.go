package evaltargets

import (
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/bench"
)

// Two runs of one trace, one and two gateways, with figures chosen so
// each target's verdict follows from its rule by hand: against the best
// peer (least-loaded: p50 100, p99 400, hit 0.50), the oracle (p50 80,
// max/mean 1.5) and, with two gateways, the one-gateway p50 (90).
func TestWrite_MarksEachTargetByItsRule(t *testing.T) {
	peerRR := bench.JSONStrategy{Name: bench.StrategyRoundRobin, TokenHitRate: 0.40, TTFTModelP50Ms: 150, TTFTModelP99Ms: 500}
	peerLL := bench.JSONStrategy{Name: bench.StrategyLeastLoaded, TokenHitRate: 0.50, TTFTModelP50Ms: 100, TTFTModelP99Ms: 400}
	oracle := bench.JSONStrategy{Name: bench.StrategyOracle, TTFTModelP50Ms: 80, MaxOverMeanRequests: 1.5}
	reps := []bench.JSONReport{
		{Trace: "t", PrefillTPS: 1000, Gateways: 1, Strategies: []bench.JSONStrategy{peerRR, peerLL, oracle,
			// p50 90 ≤ 100 met; p99 450 > 400 missed; hit 0.49 ≥ 0.97×0.50 = 0.485 met;
			// p50 90 ≤ 1.2×80 = 96 met; max/mean 1.4 ≤ max(1.3, 1.5) met.
			{Name: "sut", TokenHitRate: 0.49, TTFTModelP50Ms: 90, TTFTModelP99Ms: 450, MaxOverMeanRequests: 1.4}}},
		{Trace: "t", PrefillTPS: 1000, Gateways: 2, Strategies: []bench.JSONStrategy{peerRR, peerLL, oracle,
			// p50 100 ≤ 100 met; p99 400 ≤ 400 met; hit 0.48 < 0.485 missed;
			// p50 100 > 96 missed; max/mean 1.6 > 1.5 missed; p50 100 > 1.1×90 = 99 missed.
			{Name: "sut", TokenHitRate: 0.48, TTFTModelP50Ms: 100, TTFTModelP99Ms: 400, MaxOverMeanRequests: 1.6}}},
	}
	var b strings.Builder
	if err := Write(&b, reps, "sut"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	want := []string{
		"| t, prefill 1000 tok/s, 1 gateway(s) | met: 90 ms vs 100 ms (least-loaded) | missed: 450 ms vs 400 ms (least-loaded) | met: 49.0 % vs 48.5 % (least-loaded) | met: 90 ms vs 96 ms | met: 1.40 vs 1.50 | – |",
		"| t, prefill 1000 tok/s, 2 gateway(s) | met: 100 ms vs 100 ms (least-loaded) | met: 400 ms vs 400 ms (least-loaded) | missed: 48.0 % vs 48.5 % (least-loaded) | missed: 100 ms vs 96 ms | missed: 1.60 vs 1.50 | missed: 100 ms vs 99 ms |",
		"6 of 11 targets met.",
		"| **sut** | 49.0 % |",
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// A run without the oracle or the strategy under test gets a table but no
// targets row.
func TestWrite_NoTargetsRowWithoutTheOracle(t *testing.T) {
	reps := []bench.JSONReport{{Trace: "t", PrefillTPS: 1000, Gateways: 1, Strategies: []bench.JSONStrategy{{Name: "sut"}}}}
	var b strings.Builder
	if err := Write(&b, reps, "sut"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "| t, prefill") || !strings.Contains(b.String(), "0 of 0 targets met.") {
		t.Fatalf("want no targets row and 0 of 0:\n%s", b.String())
	}
}

// A report of several runs says its figures are medians and lists the
// strategy under test's p50 run by run; a report of one run says neither.
func TestWrite_SeveralRunsNamedWithThePerRunP50(t *testing.T) {
	sut := bench.JSONStrategy{Name: "sut", TTFTModelP50Ms: 450, PerRun: []bench.JSONRun{{Seed: 1, TTFTModelP50Ms: 500}, {Seed: 2, TTFTModelP50Ms: 400}, {Seed: 3, TTFTModelP50Ms: 450}}}
	reps := []bench.JSONReport{{Trace: "t", PrefillTPS: 1000, Gateways: 1, Runs: 3, Strategies: []bench.JSONStrategy{sut}}}
	var b strings.Builder
	if err := Write(&b, reps, "sut"); err != nil {
		t.Fatal(err)
	}
	if want := "Each figure is the median of 3 runs (seeds in the report's per_run); sut's TTFT p50 run by run: 500 ms, 400 ms, 450 ms."; !strings.Contains(b.String(), want) {
		t.Fatalf("output lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	reps[0].Runs, reps[0].Strategies[0].PerRun = 1, nil
	if err := Write(&b, reps, "sut"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "median of") {
		t.Fatalf("a one-run report speaks of medians:\n%s", b.String())
	}
}

// A hit rate that misses its bound by less than 0.05 points is printed
// with two decimals, so the figure and the bound never read alike.
func TestPcts_TwoDecimalsWhenOneWouldTie(t *testing.T) {
	for _, c := range []struct {
		a, b float64
		want [2]string
	}{
		{0.4455795, 0.4462037, [2]string{"44.56 %", "44.62 %"}},
		{0.334, 0.345, [2]string{"33.4 %", "34.5 %"}},
		{0.5, 0.5, [2]string{"50.0 %", "50.0 %"}},
	} {
		if got := pcts(c.a, c.b); got != c.want {
			t.Errorf("pcts(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
