package livebench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/inference-cache/inference-cache/loadgen"
)

// liveResult is one strategy's run.
type liveResult struct {
	Strategy string `json:"strategy"`
	// Gateways is the number of proxies the requests were split over.
	Gateways int `json:"gateways"`
	loadgen.Summary
	// FailOpen, Retries and UpstreamErrors are the proxy's counters at
	// the end of the run.
	FailOpen       float64 `json:"proxy_fail_open_picks"`
	Retries        float64 `json:"proxy_retries"`
	UpstreamErrors float64 `json:"proxy_upstream_errors"`
	// Wall is the replay's wall time, seconds.
	WallS float64 `json:"wall_s"`
	// AdapterLoads (lora mode) is the engines' adapter loads;
	// PrefillHitRate (disagg mode) the prefill engines' cached prompt
	// tokens over their prompt tokens; PrefixMatchPicks the proxy's
	// PREFIX_MATCH picks; Aggregated its requests served aggregated.
	AdapterLoads     float64 `json:"adapter_loads,omitempty"`
	PrefillHitRate   float64 `json:"prefill_hit_rate,omitempty"`
	PrefixMatchPicks float64 `json:"prefix_match_picks,omitempty"`
	Aggregated       float64 `json:"aggregated_requests,omitempty"`
	ttfts            []float64
}

// liveReport is bench --live's output.
type liveReport struct {
	Trace      string       `json:"trace"`
	Skip       int          `json:"skip"`
	Records    int          `json:"records"`
	Warmup     int          `json:"warmup"`
	Speedup    float64      `json:"speedup"`
	Engines    int          `json:"engines"`
	PrefillTPS float64      `json:"prefill_tps"`
	DecodeTPS  float64      `json:"decode_tps"`
	KVBlocks   int          `json:"kv_blocks"`
	MaxTokens  int          `json:"max_tokens"`
	Gateways   int          `json:"gateways"`
	CPUs       int          `json:"cpus"`
	Mode       string       `json:"mode"`
	Strategies []liveResult `json:"strategies"`
	Targets    []liveTarget `json:"targets,omitempty"`
	Faults     *faultReport `json:"faults,omitempty"`
}

// liveTarget is one target of the live benchmark, met or missed.
type liveTarget struct {
	Name     string `json:"name"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

// title is the plot's title: the trace's records, speed-up, engines and
// proxies.
func (r *liveReport) title() string {
	return fmt.Sprintf("%s %d–%d, speed-up %g, %d engines, %d proxies, measured",
		strings.TrimSuffix(r.Trace, ".jsonl"), r.Skip, r.Skip+r.Records-1, r.Speedup, r.Engines, max(r.Gateways, 1))
}

// writeText prints the settings, one row per run and the targets.
func (r *liveReport) writeText(w io.Writer) error {
	fmt.Fprintf(w, "live benchmark: %s records %d–%d (%d; the first %d left out as warm-up), speed-up %g\n",
		r.Trace, r.Skip, r.Skip+r.Records-1, r.Records, r.Warmup, r.Speedup)
	fmt.Fprintf(w, "%d sim engines (prefill %g tok/s, decode %g tok/s, %d KV blocks of 16 tokens), max_tokens ≤ %d; a 3-node cluster, the subscriber and %d proxies (requests split round robin by arrival) as real processes on loopback, %d CPUs shared by all of them\n\n",
		r.Engines, r.PrefillTPS, r.DecodeTPS, r.KVBlocks, r.MaxTokens, max(r.Gateways, 1), r.CPUs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tproxies\trequests\tfailed\tTTFT p50\tTTFT p99\tE2E p50\tcache hit rate\trouted hit rate\treq max/mean\t")
	for _, s := range r.Strategies {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%.1f %%\t%.1f %%\t%.2f\t\n", s.Strategy, max(s.Gateways, 1), s.Requests, s.Failed,
			loadgen.MsText(s.TTFT.P50), loadgen.MsText(s.TTFT.P99), loadgen.MsText(s.E2E.P50), 100*s.CacheHitRate, 100*s.HitRate, s.MaxOverMean)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	writeModeText(w, r)
	fmt.Fprintln(w, "\ncache hit rate: the engines' cached prompt tokens (usage.prompt_tokens_details.cached_tokens) over prompt tokens; routed hit rate: the proxy's x-inference-cache-matched-tokens over prompt tokens (what the strategy believed cached; 0 for the strategies that ask no hint)")
	if len(r.Targets) > 0 {
		fmt.Fprintln(w, "\ntargets (the picker against round-robin, the best peer, and itself behind one proxy):")
		for _, t := range r.Targets {
			fmt.Fprintf(w, "  %s: %s: %s\n", t.Name, t.Measured, metText(t.Met))
		}
	}
	if r.Faults != nil {
		fmt.Fprintln(w)
		return r.Faults.writeText(w)
	}
	return nil
}

// liveTargets checks the picker against round-robin (and, when they ran,
// the best peer strategy and the picker behind one proxy), at the
// report's proxy count.
func liveTargets(r *liveReport) []liveTarget {
	n := max(r.Gateways, 1)
	var p, rr, one, peer *liveResult
	for i := range r.Strategies {
		s := &r.Strategies[i]
		g := max(s.Gateways, 1)
		switch {
		case s.Strategy == "picker" && g == n:
			p = s
		case s.Strategy == "picker" && g == 1:
			one = s
		case s.Strategy == "round-robin" && g == n:
			rr = s
		case slices.Contains(peers, s.Strategy) && g == n && s.TTFT.P50 > 0 && (peer == nil || s.TTFT.P50 < peer.TTFT.P50):
			peer = s
		}
	}
	if p == nil || rr == nil {
		return nil
	}
	if r.Mode != ModeAggregated && r.Mode != "" {
		return modeTargets(r.Mode, p, rr, r.Records)
	}
	failed := 0
	total := 0
	for _, s := range r.Strategies {
		failed += s.Failed
		total += s.Requests
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	tr, hr := ratio(p.TTFT.P50, rr.TTFT.P50), ratio(p.CacheHitRate, rr.CacheHitRate)
	out := []liveTarget{
		{"TTFT p50 ≤ 0.6× round-robin's", fmt.Sprintf("%.2f× (%s against %s)", tr, loadgen.MsText(p.TTFT.P50), loadgen.MsText(rr.TTFT.P50)), rr.TTFT.P50 > 0 && tr <= 0.6},
		{"hit rate ≥ 2× round-robin's", fmt.Sprintf("%.2f× (%.1f %% against %.1f %%, engines' cached tokens)", hr, 100*p.CacheHitRate, 100*rr.CacheHitRate),
			rr.CacheHitRate > 0 && hr >= 2 || rr.CacheHitRate == 0 && p.CacheHitRate > 0},
	}
	if peer != nil {
		pr := ratio(p.TTFT.P50, peer.TTFT.P50)
		out = append(out, liveTarget{"TTFT p50 ≤ 0.8× the best peer's", fmt.Sprintf("%.2f× (%s against %s's %s)", pr, loadgen.MsText(p.TTFT.P50), peer.Strategy,
			loadgen.MsText(peer.TTFT.P50)), pr <= 0.8})
	}
	if one != nil && n > 1 {
		gr := ratio(p.TTFT.P50, one.TTFT.P50)
		out = append(out, liveTarget{fmt.Sprintf("TTFT p50 with %d proxies ≤ 1.1× with 1", n), fmt.Sprintf("%.2f× (%s against %s)", gr, loadgen.MsText(p.TTFT.P50),
			loadgen.MsText(one.TTFT.P50)), one.TTFT.P50 > 0 && gr <= 1.1})
	}
	return append(out, liveTarget{"0 failed requests", fmt.Sprintf("%d of %d measured requests failed", failed, total), failed == 0})
}

// metText is "met" or "missed".
func metText(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
