package livebench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/internal/localfleet"
	"github.com/inference-cache/inference-cache/internal/promscrape"
	"github.com/inference-cache/inference-cache/loadgen"
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
	ModeAggregated = "aggregated"
	ModeLoRA       = "lora"
	ModeDisagg     = "disagg"
)

// Modes are the fleet's mode and its settings (bench --live's
// --live-* flags).
type Modes struct {
	// Mode is ModeAggregated, ModeLoRA or ModeDisagg.
	Mode string
	// Adapters and MaxLoRAs (lora): the adapters each engine serves and
	// its --max-loras; LoRALoadTime its --lora-load-time (a duration).
	Adapters, MaxLoRAs int
	LoRALoadTime       string
	// PrefillEngines (disagg): how many of the engines are prefill
	// backends, the rest decode.
	PrefillEngines int
	// LookupBudget is the proxy's --lookup-budget (0 = its default).
	LookupBudget time.Duration
}

// check validates the mode's flags against the fleet size.
func (m *Modes) check(engines int) error {
	switch m.Mode {
	case ModeAggregated:
	case ModeLoRA:
		if m.Adapters < 1 || m.MaxLoRAs < 1 {
			return fmt.Errorf("--live-adapters %d, --live-max-loras %d: want at least 1", m.Adapters, m.MaxLoRAs)
		}
	case ModeDisagg:
		if m.PrefillEngines < 1 || m.PrefillEngines >= engines {
			return fmt.Errorf("--live-prefill-engines %d: want 1 to %d (--engines %d leaves the rest to decode)", m.PrefillEngines, engines-1, engines)
		}
	default:
		return fmt.Errorf("--live-mode %q: want aggregated, lora or disagg", m.Mode)
	}
	if m.LookupBudget < 0 {
		return fmt.Errorf("--live-lookup-budget %v: must not be negative", m.LookupBudget)
	}
	return nil
}

// apply sets the fleet's engine arguments and backend roles.
func (m *Modes) apply(c *localfleet.Config) {
	if m.LookupBudget > 0 {
		defer func() { c.ProxyArgs = append(c.ProxyArgs, "--lookup-budget", m.LookupBudget.String()) }()
	}
	switch m.Mode {
	case ModeLoRA:
		c.EngineArgs = []string{"--enable-lora", "--max-loras", strconv.Itoa(m.MaxLoRAs), "--lora-load-time", m.LoRALoadTime}
		for i := range m.Adapters {
			c.EngineArgs = append(c.EngineArgs, "--lora-modules", adapterName(i)+"=/adapters/"+adapterName(i))
		}
		c.ProxyArgs = []string{"--health-interval", "250ms"} // fresher residency
	case ModeDisagg:
		c.EngineArgs = []string{"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_both"}`}
		c.Roles = map[string]string{}
		for i, e := range c.Engines {
			c.Roles[e.ID] = proxy.RoleDecode
			if i < m.PrefillEngines {
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
func (m *Modes) modelFor() func(rec *bench.Request) string {
	if m.Mode != ModeLoRA {
		return nil
	}
	return func(rec *bench.Request) string {
		if len(rec.HashIDs) == 0 {
			return ""
		}
		return adapterName(int(rec.HashIDs[min(1, len(rec.HashIDs)-1)] % uint64(m.Adapters)))
	}
}

// measure reads the engines' counters at the end of a run into res: the
// adapter loads (lora) or the prefill engines' prefix-cache hit rate
// (disagg).
func (m *Modes) measure(ctx context.Context, st *liveStack, res *liveResult) {
	var loads, hits, queries float64
	for i, e := range st.fleet.Engines {
		fams, err := promscrape.Get(ctx, e.URL()+"/metrics")
		if err != nil {
			continue
		}
		loads += promscrape.Sum(fams, "simengine_lora_loads_total")
		if i < m.PrefillEngines {
			hits += promscrape.Sum(fams, "vllm:prefix_cache_hits_total")
			queries += promscrape.Sum(fams, "vllm:prefix_cache_queries_total")
		}
	}
	switch m.Mode {
	case ModeLoRA:
		res.AdapterLoads = loads
	case ModeDisagg:
		if queries > 0 {
			res.PrefillHitRate = hits / queries
		}
	}
	if fams, err := promscrape.Get(ctx, st.proxyURL()+"/metrics"); err == nil {
		res.PrefixMatchPicks = promscrape.Sum(fams, "inference_cache_proxy_picks_total", "reason", "PREFIX_MATCH")
		res.Aggregated = promscrape.Sum(fams, "inference_cache_proxy_disagg_requests_total", "path", "aggregated")
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
	ttft := liveTarget{"TTFT p50 ≤ 0.6× round-robin's", fmt.Sprintf("%.2f× (%s against %s)", tr, loadgen.MsText(p.TTFT.P50), loadgen.MsText(rr.TTFT.P50)), rr.TTFT.P50 > 0 && tr <= 0.6}
	failed := liveTarget{"0 failed requests", fmt.Sprintf("%d and %d of %d measured requests failed", p.Failed, rr.Failed, p.Requests), p.Failed+rr.Failed == 0}
	records = max(records, 1)
	switch mode {
	case ModeLoRA:
		lp, lr := p.AdapterLoads/float64(records), rr.AdapterLoads/float64(records)
		return []liveTarget{ttft,
			{"adapter requests get PREFIX_MATCH", fmt.Sprintf("%.0f PREFIX_MATCH picks of %d requests (warm-up included)", p.PrefixMatchPicks, records), p.PrefixMatchPicks > 0},
			{"adapter loads per request ≤ 0.5× round-robin's", fmt.Sprintf("%.3f against %.3f (%.2f×)", lp, lr, ratio(lp, lr)), lr > 0 && lp <= 0.5*lr},
			failed}
	case ModeDisagg:
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
	case ModeLoRA:
		fmt.Fprintln(w, "\nlora mode: each conversation asks one of the engines' adapters")
		for _, s := range r.Strategies {
			fmt.Fprintf(w, "  %s: %.0f adapter loads (%.3f per request), %.0f PREFIX_MATCH picks (warm-up included)\n", s.Strategy, s.AdapterLoads, s.AdapterLoads/float64(max(1, r.Records)), s.PrefixMatchPicks)
		}
	case ModeDisagg:
		fmt.Fprintln(w, "\ndisagg mode: the strategy picks the prefill engine; decode engines are picked by load")
		for _, s := range r.Strategies {
			fmt.Fprintf(w, "  %s: prefill engines' hit rate %.1f %%, %.0f requests served aggregated\n", s.Strategy, 100*s.PrefillHitRate, s.Aggregated)
		}
	}
}
