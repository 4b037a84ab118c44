package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// JSONReport is the --json object of contract §12.7, field for field.
type JSONReport struct {
	// Trace, Requests, IdealTokenHitRate and Strategies are contract §12.7's
	// trace, requests, ideal_token_hit_rate and strategies.
	Trace             string         `json:"trace"`
	Requests          int            `json:"requests"`
	IdealTokenHitRate float64        `json:"ideal_token_hit_rate"`
	Strategies        []JSONStrategy `json:"strategies"`
	// Settings of the run: the time model, its event delay, the gateway
	// instances, the fleet.
	Visibility   string  `json:"visibility"`
	EventDelayMs float64 `json:"event_delay_ms"`
	Gateways     int     `json:"gateways"`
	// ShareDelayMs and DynamoSyncDelayMs are the modelled delays of the
	// shared state's pushes (lookuproute-sdk) and of dynamo-sync-nats's
	// replica sync; ShareDelay says whether the first is "fixed" or
	// "measured" (drawn per push from MeasuredShareDelay; ShareDelayMs is
	// then its median).
	ShareDelay        string  `json:"share_delay"`
	ShareDelayMs      float64 `json:"share_delay_ms"`
	DynamoSyncDelayMs float64 `json:"dynamo_sync_delay_ms"`
	PrefillTPS        float64 `json:"prefill_tps"`
	Engines           int     `json:"engines"`
	CacheBlocks       int     `json:"cache_blocks"`
	// Runs is how many times each strategy was replayed; the strategies'
	// figures are medians over them.
	Runs int `json:"runs"`
}

// JSONStrategy is one strategy of JSONReport (rates in 0..1; the TTFT is
// modelled, as the field names say).
type JSONStrategy struct {
	// The fields are contract §12.7's, named by their JSON keys; see Result for
	// their meaning.
	Name                string           `json:"name"`
	GatewaysShared      bool             `json:"gateways_shared"`
	TokenHitRate        float64          `json:"token_hit_rate"`
	FractionOfIdeal     float64          `json:"fraction_of_ideal"`
	MaxOverMeanRequests float64          `json:"max_over_mean_requests"`
	TTFTModelP50Ms      float64          `json:"ttft_model_p50_ms"`
	TTFTModelP90Ms      float64          `json:"ttft_model_p90_ms"`
	TTFTModelP99Ms      float64          `json:"ttft_model_p99_ms"`
	TTFTModelMeanMs     float64          `json:"ttft_model_mean_ms"`
	LookupP50Us         float64          `json:"lookup_p50_us"`
	LookupP99Us         float64          `json:"lookup_p99_us"`
	ReasonCodes         map[string]int64 `json:"reason_codes"`
	// PerRun is each run's figures when the report has several runs
	// (the fields above are then their medians); absent for one.
	PerRun []JSONRun `json:"per_run,omitempty"`
}

// JSONRun is one run of a strategy in a report of several (Config.Runs):
// its seed and headline figures, keyed as JSONStrategy's.
type JSONRun struct {
	Seed                uint64  `json:"seed"`
	TokenHitRate        float64 `json:"token_hit_rate"`
	MaxOverMeanRequests float64 `json:"max_over_mean_requests"`
	TTFTModelP50Ms      float64 `json:"ttft_model_p50_ms"`
	TTFTModelP99Ms      float64 `json:"ttft_model_p99_ms"`
}

// JSON returns the contract §12.7 shape of r.
func (r *Report) JSON() JSONReport {
	out := JSONReport{Trace: r.Trace, Requests: r.Requests, IdealTokenHitRate: r.IdealTokenHitRate, Strategies: []JSONStrategy{},
		Visibility: string(r.Visibility), EventDelayMs: float64(r.EventDelay) / float64(time.Millisecond), Gateways: r.Gateways,
		ShareDelay: "fixed", ShareDelayMs: float64(r.ShareDelay) / float64(time.Millisecond), DynamoSyncDelayMs: float64(r.DynamoSyncDelay) / float64(time.Millisecond),
		PrefillTPS: r.Fleet.PrefillTPS, Engines: r.Fleet.Engines, CacheBlocks: r.Fleet.CacheBlocks, Runs: max(1, r.Runs)}
	if r.ShareDelay == 0 {
		out.ShareDelay, out.ShareDelayMs = "measured", math.Round(quantileAt(MeasuredShareDelay, 0.5)*1e6)/1e3
	}
	for _, s := range r.Strategies {
		rc := s.ReasonCodes
		if rc == nil {
			rc = map[string]int64{}
		}
		var per []JSONRun
		for _, x := range s.Runs {
			per = append(per, JSONRun(x))
		}
		out.Strategies = append(out.Strategies, JSONStrategy{Name: s.Name, GatewaysShared: s.GatewaysShared, TokenHitRate: s.TokenHitRate,
			FractionOfIdeal: s.FractionOfIdeal, MaxOverMeanRequests: s.MaxOverMeanRequests,
			TTFTModelP50Ms: s.TTFTModelP50Ms, TTFTModelP90Ms: s.TTFTModelP90Ms, TTFTModelP99Ms: s.TTFTModelP99Ms, TTFTModelMeanMs: s.TTFTModelMeanMs,
			LookupP50Us: s.LookupP50Us, LookupP99Us: s.LookupP99Us, ReasonCodes: rc, PerRun: per})
	}
	return out
}

// WriteJSON writes the contract §12.7 object, indented, with a final newline.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.JSON())
}

// TimeCompression describes how the trace's virtual time was compressed
// in a strategy's replay.
func (r *Report) TimeCompression(s *Result) string {
	span := time.Duration(r.SpanMs) * time.Millisecond
	if s.Wall <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%s of trace time in %s wall (%.0f×)", span.Round(time.Second), s.Wall.Round(time.Millisecond),
		span.Seconds()/s.Wall.Seconds())
}

// WriteTable writes the human-readable report: the settings, one row per
// strategy, the reason codes, and notes on time and visibility.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s: %d requests, %d distinct blocks, span %s; ideal token hit rate %.1f%%\n",
		r.Trace, r.Requests, r.DistinctBlocks, (time.Duration(r.SpanMs) * time.Millisecond).Round(time.Second), 100*r.IdealTokenHitRate)
	fmt.Fprintf(&b, "fleet: %d engines × %d blocks of %d tokens (LRU, shared with running requests), prefill %.0f tok/s, decode %.0f tok/s per request; %d gateway(s); cluster: %s\n",
		r.Fleet.Engines, r.Fleet.CacheBlocks, TraceBlockTokens, r.Fleet.PrefillTPS, r.Fleet.DecodeTPS, r.Gateways, r.Cluster)
	if r.Runs > 1 {
		fmt.Fprintf(&b, "figures: medians of %d runs of each strategy (the seeds below; the reason codes and observation counts are the median run's)\n", r.Runs)
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\thit rate\tof ideal\treq max/mean\tTTFT p50 (modelled)\tTTFT p99 (modelled)\tTTFT mean\tlookup p50\tlookup p99\twall\t")
	for i := range r.Strategies {
		s := &r.Strategies[i]
		lp50, lp99 := "-", "-"
		if UsesCluster(s.Name) {
			lp50, lp99 = fmt.Sprintf("%.0f µs", s.LookupP50Us), fmt.Sprintf("%.0f µs", s.LookupP99Us)
		}
		fmt.Fprintf(tw, "%s\t%.1f%%\t%.1f%%\t%.2f\t%.0f ms\t%.0f ms\t%.0f ms\t%s\t%s\t%s\t\n", s.Name, 100*s.TokenHitRate,
			100*s.FractionOfIdeal, s.MaxOverMeanRequests, s.TTFTModelP50Ms, s.TTFTModelP99Ms, s.TTFTModelMeanMs, lp50, lp99, s.Wall.Round(time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i := range r.Strategies {
		s := &r.Strategies[i]
		if !UsesCluster(s.Name) {
			continue
		}
		fmt.Fprintf(&b, "%s reason codes: %s", s.Name, formatReasons(s.ReasonCodes))
		if s.FailOpen > 0 || s.UnknownReplica > 0 {
			fmt.Fprintf(&b, " (client fail-open %d, unknown replica %d)", s.FailOpen, s.UnknownReplica)
		}
		fmt.Fprintf(&b, "\n  policy: %s\n", s.Policy)
		fmt.Fprintf(&b, "  observation: %d block hashes published over ZMQ (%s), %d visibility waits (%s total, %d timed out); time: %s\n",
			s.Published, r.Encoding, s.Barriers, s.BarrierWall.Round(time.Millisecond), s.BarrierTimeouts, r.TimeCompression(s))
		if s.StatsSyncs > 0 {
			fmt.Fprintf(&b, "  stats: the engines whose metrics changed scraped at %d virtual scrape ticks (%s total)\n", s.StatsSyncs, s.StatsSyncWall.Round(time.Millisecond))
		}
	}
	fmt.Fprintf(&b, "TTFT is modelled: queue wait + uncached tokens / prefill speed, in the trace's virtual time.\n")
	fmt.Fprintf(&b, "Visibility (%s): ", r.Visibility)
	if r.Visibility == VisibilityDelay {
		fmt.Fprintf(&b, "engines publish a request's KV events when its prefill ends; a lookup at virtual time t sees the events published before t − %s, applied on every node (the peers' indexers alike).\n", r.EventDelay)
	} else if r.Visibility == VisibilityRequest {
		b.WriteString("every lookup sees the events of every earlier request, applied on every node.\n")
	} else {
		b.WriteString("a lookup sees the events of every request with an earlier trace timestamp, applied on every node; same-timestamp requests are concurrent and never see each other's events.\n")
	}
	b.WriteString("Engines publish KV events stamped with wall-clock time; cluster calls run as fast as the cluster allows, in trace order.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func formatReasons(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || (m[keys[i]] == m[keys[j]] && keys[i] < keys[j]) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Percentile returns the nearest-rank p-quantile (0 < p ≤ 1) of v (which
// it sorts); 0 for an empty slice.
func Percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	k := int(math.Ceil(p*float64(len(v)))) - 1
	return v[min(max(k, 0), len(v)-1)]
}
