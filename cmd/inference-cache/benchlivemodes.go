package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/proxy"
)

// The fleets bench --live can serve besides the aggregated one:
//
//   - lora: every engine serves --live-adapters LoRA adapters of the
//     model (a0, a1, …) with --live-max-loras slots; each conversation of
//     the trace asks one adapter (its second 512-token block names it: the
//     first is the system prompt every record shares), so the adapters'
//     prefixes live in their own partitions;
//   - disagg: the first --live-prefill-engines engines are the proxy's
//     prefill backends, the others its decode backends, all with vLLM's
//     NixlConnector config; the strategy is the prefill pick's (the decode
//     pick is by load either way).
const (
	liveModeAggregated = "aggregated"
	liveModeLoRA       = "lora"
	liveModeDisagg     = "disagg"
)

// liveModeOptions are the flags of the modes.
type liveModeOptions struct {
	mode           string
	adapters       int
	maxLoRAs       int
	loraLoadTime   string
	prefillEngines int
	lookupBudget   time.Duration
}

func (m *liveModeOptions) register(f *pflag.FlagSet) {
	f.StringVar(&m.mode, "live-mode", liveModeAggregated, "--live: the fleet: aggregated, lora (every engine serves --live-adapters LoRA adapters, one per conversation) or disagg (prefill and decode engines)")
	f.IntVar(&m.adapters, "live-adapters", 4, "--live: --live-mode lora: the adapters each engine serves")
	f.IntVar(&m.maxLoRAs, "live-max-loras", 2, "--live: --live-mode lora: each engine's --max-loras")
	f.StringVar(&m.loraLoadTime, "live-lora-load-time", "50ms", "--live: --live-mode lora: each engine's --lora-load-time")
	f.DurationVar(&m.lookupBudget, "live-lookup-budget", 0, "--live: the proxy's --lookup-budget (0 = its default, 20ms); a loaded machine fails more lookups open at 20ms")
	f.IntVar(&m.prefillEngines, "live-prefill-engines", 2, "--live: --live-mode disagg: how many of the --engines are prefill backends (the rest decode)")
}

// check validates the mode's flags against the fleet size.
func (m *liveModeOptions) check(engines int) error {
	switch m.mode {
	case liveModeAggregated:
	case liveModeLoRA:
		if m.adapters < 1 || m.maxLoRAs < 1 {
			return fmt.Errorf("--live-adapters %d, --live-max-loras %d: want at least 1", m.adapters, m.maxLoRAs)
		}
	case liveModeDisagg:
		if m.prefillEngines < 1 || m.prefillEngines >= engines {
			return fmt.Errorf("--live-prefill-engines %d: want 1 to %d (--engines %d leaves the rest to decode)", m.prefillEngines, engines-1, engines)
		}
	default:
		return fmt.Errorf("--live-mode %q: want aggregated, lora or disagg", m.mode)
	}
	if m.lookupBudget < 0 {
		return fmt.Errorf("--live-lookup-budget %v: must not be negative", m.lookupBudget)
	}
	return nil
}

// apply sets the fleet's engine arguments and backend roles.
func (m *liveModeOptions) apply(c *fleetConfig) {
	if m.lookupBudget > 0 {
		defer func() { c.ProxyArgs = append(c.ProxyArgs, "--lookup-budget", m.lookupBudget.String()) }()
	}
	switch m.mode {
	case liveModeLoRA:
		c.EngineArgs = []string{"--enable-lora", "--max-loras", strconv.Itoa(m.maxLoRAs), "--lora-load-time", m.loraLoadTime}
		for i := range m.adapters {
			c.EngineArgs = append(c.EngineArgs, "--lora-modules", adapterName(i)+"=/adapters/"+adapterName(i))
		}
		c.ProxyArgs = []string{"--health-interval", "250ms"} // fresher residency
	case liveModeDisagg:
		c.EngineArgs = []string{"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_both"}`}
		c.Roles = map[string]string{}
		for i, e := range c.Engines {
			c.Roles[e.ID] = proxy.RoleDecode
			if i < m.prefillEngines {
				c.Roles[e.ID] = proxy.RolePrefill
			}
		}
	}
}

// adapterName is the i-th adapter's name.
func adapterName(i int) string { return "a" + strconv.Itoa(i) }

// modelFor is the record's model in lora mode: the adapter of its
// conversation (its second block's id, the first being the system
// prompt every record of the conversation trace shares; the first for a
// one-block record); nil in the other modes.
func (m *liveModeOptions) modelFor() func(rec *bench.Request) string {
	if m.mode != liveModeLoRA {
		return nil
	}
	return func(rec *bench.Request) string {
		if len(rec.HashIDs) == 0 {
			return ""
		}
		return adapterName(int(rec.HashIDs[min(1, len(rec.HashIDs)-1)] % uint64(m.adapters)))
	}
}

// measure reads the engines' counters at the end of a run into res: the
// adapter loads (lora) or the prefill engines' prefix-cache hit rate
// (disagg).
func (m *liveModeOptions) measure(ctx context.Context, st *liveStack, res *liveResult) {
	var loads, hits, queries float64
	for i, e := range st.fleet.Engines {
		fams, err := scrapeMetrics(ctx, e.URL()+"/metrics")
		if err != nil {
			continue
		}
		loads += metricSum(fams, "simengine_lora_loads_total")
		if i < m.prefillEngines {
			hits += metricSum(fams, "vllm:prefix_cache_hits_total")
			queries += metricSum(fams, "vllm:prefix_cache_queries_total")
		}
	}
	switch m.mode {
	case liveModeLoRA:
		res.AdapterLoads = loads
	case liveModeDisagg:
		if queries > 0 {
			res.PrefillHitRate = hits / queries
		}
	}
	if fams, err := scrapeMetrics(ctx, st.proxyURL()+"/metrics"); err == nil {
		res.PrefixMatchPicks = metricSum(fams, "inference_cache_proxy_picks_total", "reason", "PREFIX_MATCH")
		res.Aggregated = metricSum(fams, "inference_cache_proxy_disagg_requests_total", "path", "aggregated")
	}
}

// modeTargets are the targets of the lora and disagg modes: picker
// against round-robin; records is every request of a run (the engines'
// counters count the warm-up too).
func modeTargets(mode string, p, rr *liveResult, records int) []liveTarget {
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	tr := ratio(p.TTFT.P50, rr.TTFT.P50)
	ttft := liveTarget{"TTFT p50 ≤ 0.6× round-robin's", fmt.Sprintf("%.2f× (%s against %s)", tr, msCell(p.TTFT.P50), msCell(rr.TTFT.P50)), rr.TTFT.P50 > 0 && tr <= 0.6}
	failed := liveTarget{"0 failed requests", fmt.Sprintf("%d and %d of %d measured requests failed", p.Failed, rr.Failed, p.Requests), p.Failed+rr.Failed == 0}
	records = max(records, 1)
	switch mode {
	case liveModeLoRA:
		lp, lr := p.AdapterLoads/float64(records), rr.AdapterLoads/float64(records)
		return []liveTarget{ttft,
			{"adapter requests get PREFIX_MATCH", fmt.Sprintf("%.0f PREFIX_MATCH picks of %d requests (warm-up included)", p.PrefixMatchPicks, records), p.PrefixMatchPicks > 0},
			{"adapter loads per request ≤ 0.5× round-robin's", fmt.Sprintf("%.3f against %.3f (%.2f×)", lp, lr, ratio(lp, lr)), lr > 0 && lp <= 0.5*lr},
			failed}
	case liveModeDisagg:
		hr := ratio(p.PrefillHitRate, rr.PrefillHitRate)
		return []liveTarget{ttft,
			{"prefill hit rate ≥ 2× round-robin's", fmt.Sprintf("%.2f× (%.1f %% against %.1f %%, the prefill engines' cached tokens)", hr, 100*p.PrefillHitRate, 100*rr.PrefillHitRate),
				rr.PrefillHitRate > 0 && hr >= 2 || rr.PrefillHitRate == 0 && p.PrefillHitRate > 0},
			failed}
	}
	return nil
}

// writeModeText prints the mode's own counters per strategy.
func writeModeText(w io.Writer, r *liveReport) {
	switch r.Mode {
	case liveModeLoRA:
		fmt.Fprintln(w, "\nlora mode: each conversation asks one of the engines' adapters")
		for _, s := range r.Strategies {
			fmt.Fprintf(w, "  %s: %.0f adapter loads (%.3f per request), %.0f PREFIX_MATCH picks (warm-up included)\n", s.Strategy, s.AdapterLoads, s.AdapterLoads/float64(max(1, r.Records)), s.PrefixMatchPicks)
		}
	case liveModeDisagg:
		fmt.Fprintln(w, "\ndisagg mode: the strategy picks the prefill engine; decode engines are picked by load")
		for _, s := range r.Strategies {
			fmt.Fprintf(w, "  %s: prefill engines' hit rate %.1f %%, %.0f requests served aggregated\n", s.Strategy, 100*s.PrefillHitRate, s.Aggregated)
		}
	}
}
