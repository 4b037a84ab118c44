package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/loadgen"
)

// liveOptions are the flags of bench --live that bench has not.
type liveOptions struct {
	enabled      bool
	speedup      float64
	skip, warmup int
	kvBlocks     int
	maxTokens    int
	faults       bool
	dir          string
	scrape       time.Duration
	modes        liveModeOptions
}

// Defaults of bench --live, chosen so that round-robin's engines queue on
// the conversation trace (EVALUATION.md, "Live benchmark").
const (
	liveEngines    = 6
	livePrefillTPS = 14000
	liveSpeedup    = 2
	liveRecords    = 800
	liveWarmup     = 200
	liveKVBlocks   = 100000
	liveMaxTokens  = 32
)

// liveStrategies are the proxy's strategies, compared in this order: the
// picker, the baselines and the peers' routers (package peers).
var liveStrategies = []string{"picker", "round-robin", "least-loaded", "dynamo", "llm-d", "sglang"}

// livePeers are the peers' strategies among liveStrategies.
var livePeers = []string{"dynamo", "llm-d", "sglang"}

// liveMaxGateways bounds --gateways with --live: each proxy is a process
// on this machine.
const liveMaxGateways = 8

// liveSharedFlags are bench's flags that --live reads too; any other of
// bench's flags set with --live is refused.
var liveSharedFlags = []string{"live", "trace", "requests", "engines", "prefill-tps", "decode-tps", "strategies", "gateways", "json", "plot", "no-progress"}

func registerLiveFlags(f *pflag.FlagSet, o *liveOptions) {
	f.BoolVar(&o.enabled, "live", false, "run the live benchmark instead: real processes (cluster, sim engines, subscriber, proxy per strategy) and real requests (see below)")
	f.Float64Var(&o.speedup, "speedup", liveSpeedup, "--live: divide the trace's timestamps by this")
	f.IntVar(&o.skip, "skip", 0, "--live: start at this record of the trace")
	f.IntVar(&o.warmup, "warmup", liveWarmup, "--live: leave the first N requests out of the figures (they fill the caches)")
	f.IntVar(&o.kvBlocks, "kv-blocks", liveKVBlocks, "--live: each sim engine's KV capacity in blocks of 16 tokens")
	f.IntVar(&o.maxTokens, "max-tokens", liveMaxTokens, "--live: cap on each request's max_tokens (its output_length)")
	f.BoolVar(&o.faults, "faults", false, "--live: one picker run with faults: the leader SIGKILLed, all nodes SIGKILLed and restarted, an engine SIGKILLed, the proxy SIGTERMed (drained)")
	f.StringVar(&o.dir, "dir", "", "--live: directory for the processes' data and logs (default a new one under the system temporary directory)")
	f.DurationVar(&o.scrape, "subscriber-scrape-live", time.Second, "--live: how often the subscriber scrapes each engine's /metrics")
	o.modes.register(f)
	markPaths(f, "dir")
}

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

// checkLiveFlags refuses bench's flags that mean nothing live and fills
// the live defaults of the shared ones.
func checkLiveFlags(cmd *cobra.Command, o *benchOptions) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if err == nil && !slices.Contains(liveSharedFlags, f.Name) && !strings.HasPrefix(f.Usage, "--live:") {
			err = fmt.Errorf("--%s: not used with --live", f.Name)
		}
	})
	if err != nil {
		return err
	}
	ch := cmd.Flags().Changed
	if !ch("engines") {
		o.engines = liveEngines
	}
	if !ch("prefill-tps") {
		o.prefillTPS = livePrefillTPS
	}
	if !ch("requests") {
		o.requests = liveRecords
	}
	if !ch("trace") {
		o.trace = defaultLiveTrace
	}
	if len(o.strategies) == 0 {
		o.strategies = liveStrategies
	}
	l := &o.live
	switch {
	case o.engines < 2:
		return fmt.Errorf("--engines %d: --live needs at least 2 (a strategy chooses among them)", o.engines)
	case o.engines > 16:
		return fmt.Errorf("--engines %d: --live runs at most 16 on one machine", o.engines)
	case !(o.prefillTPS > 0), !(o.decodeTPS > 0):
		return fmt.Errorf("--prefill-tps %v, --decode-tps %v: must be positive", o.prefillTPS, o.decodeTPS)
	case o.requests < 1:
		return fmt.Errorf("--requests %d: --live replays at least 1 record", o.requests)
	case !(l.speedup > 0) || l.speedup > loadgen.MaxSpeedup:
		return fmt.Errorf("--speedup %v: want above 0, at most %d", l.speedup, loadgen.MaxSpeedup)
	case l.skip < 0, l.warmup < 0:
		return fmt.Errorf("--skip %d, --warmup %d: must be 0 or more", l.skip, l.warmup)
	case l.warmup >= o.requests:
		return fmt.Errorf("--warmup %d: leaves none of the --requests %d measured", l.warmup, o.requests)
	case l.kvBlocks < 1:
		return fmt.Errorf("--kv-blocks %d: need at least 1", l.kvBlocks)
	case l.maxTokens < 1:
		return fmt.Errorf("--max-tokens %d: must be at least 1", l.maxTokens)
	case l.scrape < 100*time.Millisecond:
		return fmt.Errorf("--subscriber-scrape-live %v: at least 100ms", l.scrape)
	case o.gateways < 1 || o.gateways > liveMaxGateways:
		return fmt.Errorf("--gateways %d: --live runs 1 to %d proxies", o.gateways, liveMaxGateways)
	}
	if err := l.modes.check(o.engines); err != nil {
		return err
	}
	for _, s := range o.strategies {
		if !slices.Contains(liveStrategies, s) {
			return fmt.Errorf("--strategies %q: --live runs the proxy's strategies %s", s, strings.Join(liveStrategies, ", "))
		}
	}
	return nil
}

// runBenchLive is bench --live.
func runBenchLive(ctx context.Context, cmd *cobra.Command, o *benchOptions, out, errw io.Writer) error {
	if err := checkLiveFlags(cmd, o); err != nil {
		return err
	}
	l := &o.live
	tr, err := bench.LoadMooncake(o.trace)
	if err != nil {
		return fmt.Errorf("--trace: %w", err)
	}
	if l.skip >= len(tr.Requests) {
		return fmt.Errorf("--skip %d: the trace has %d records", l.skip, len(tr.Requests))
	}
	recs := tr.Requests[l.skip:min(len(tr.Requests), l.skip+o.requests)]
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir := l.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "inference-cache-bench-live-"); err != nil {
			return err
		}
	}
	models, err := fleetModelsDir(dir, "")
	if err != nil {
		return err
	}
	rep := &liveReport{Trace: tr.Name, Skip: l.skip, Records: len(recs), Warmup: l.warmup, Speedup: l.speedup, Engines: o.engines,
		PrefillTPS: o.prefillTPS, DecodeTPS: o.decodeTPS, KVBlocks: l.kvBlocks, MaxTokens: l.maxTokens, Gateways: o.gateways, CPUs: runtime.NumCPU(),
		Mode: l.modes.mode}
	lf := liveFleet{engines: o.engines, prefillTPS: o.prefillTPS, decodeTPS: o.decodeTPS, kvBlocks: l.kvBlocks, scrape: l.scrape, proxies: o.gateways,
		modes: &l.modes}
	span := time.Duration(float64(recs[len(recs)-1].Timestamp-recs[0].Timestamp) / l.speedup * float64(time.Millisecond))
	fmt.Fprintf(errw, "bench --live: %d records of %s (from %d), %v of arrivals each run at speed-up %g; processes' logs under %s\n",
		len(recs), tr.Name, l.skip, span.Round(time.Second), l.speedup, dir)
	if l.faults {
		lf.proxyDrain = faultProxyDrain
	}
	type liveRun struct {
		strategy string
		fleet    liveFleet
	}
	var runs []liveRun
	if l.faults {
		runs = []liveRun{{"picker", lf}}
	} else {
		for _, s := range o.strategies {
			runs = append(runs, liveRun{s, lf})
		}
		// With several proxies the picker also runs behind one: the
		// baseline of "p50 with N proxies ≤ 1.1× with 1", in the same run.
		if one := lf; lf.proxies > 1 && slices.Contains(o.strategies, "picker") {
			one.proxies = 1
			runs = append(runs, liveRun{"picker", one})
		}
	}
	for _, r := range runs {
		if ctx.Err() != nil {
			break
		}
		sub := r.strategy
		if r.fleet.proxies > 1 {
			sub += "-" + strconv.Itoa(r.fleet.proxies) + "gw"
		}
		res, faults, err := liveRunOne(ctx, exe, filepath.Join(dir, sub), models, r.strategy, recs, r.fleet, l, !o.noProgress, errw)
		if err != nil {
			return fmt.Errorf("%s: %w", sub, err)
		}
		rep.Strategies = append(rep.Strategies, *res)
		rep.Faults = faults
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep.Targets = liveTargets(rep)
	// The JSON report stays beside the runs whatever is printed.
	if b, err := json.MarshalIndent(rep, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644)
	}
	if o.jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.writeText(out)
	}
	if err != nil {
		return err
	}
	if o.plot != "" {
		series := make([]loadgen.PlotSeries, len(rep.Strategies))
		for i, s := range rep.Strategies {
			name := s.Strategy
			if s.Gateways != rep.Gateways {
				name += fmt.Sprintf(" (%d proxy)", s.Gateways)
			}
			series[i] = loadgen.PlotSeries{Name: name, Summary: s.Summary, TTFTMs: s.ttfts}
		}
		if err := loadgen.Plot(o.plot, rep.title(), series); err != nil {
			return err
		}
		fmt.Fprintf(errw, "bench --live: plot written to %s\n", o.plot)
	}
	return nil
}

// liveRunOne starts a fresh stack with the proxy's strategy s, replays
// recs through it (with the fault schedule when l.faults), and stops it.
func liveRunOne(ctx context.Context, exe, dir, models, s string, recs []bench.Request, lf liveFleet, l *liveOptions,
	progress bool, errw io.Writer) (*liveResult, *faultReport, error) {
	// Each run starts on an empty cluster: an earlier run's data under
	// dir was made on other ports and would never elect a leader.
	if err := os.RemoveAll(dir); err != nil {
		return nil, nil, err
	}
	st, err := startLiveStack(ctx, exe, dir, models, s, lf)
	if err != nil {
		return nil, nil, err
	}
	defer st.stop()
	urls := st.proxyURLs()
	fmt.Fprintf(errw, "bench --live: %s: cluster, %d engines, subscriber and %d proxies up (%s); replaying\n", s, lf.engines, len(urls),
		strings.Join(urls, ", "))
	cfg := loadgen.Config{Target: urls[0], MoreTargets: urls[1:], Model: fleetModel, Speedup: l.speedup, MaxTokens: l.maxTokens, Epoch: time.Now(),
		ModelFor: l.modes.modelFor()}
	var fr *faultRun
	if l.faults {
		fr = newFaultRun(st, cfg.Epoch, recs, l.speedup, errw)
		go fr.run(ctx)
	}
	var stopProgress func()
	if progress {
		stopProgress = liveProgress(ctx, s, len(recs), &cfg, errw)
	}
	run, err := loadgen.Replay(ctx, recs, cfg)
	if stopProgress != nil {
		stopProgress()
	}
	if err != nil {
		return nil, nil, err
	}
	// Every request's measurement stays beside the processes' logs.
	if err := writeResults(filepath.Join(dir, "results.jsonl"), run.Results); err != nil {
		return nil, nil, err
	}
	var faults *faultReport
	if fr != nil {
		faults = fr.report(run.Results)
	}
	measured := run.Results[min(l.warmup, len(run.Results)):]
	res := &liveResult{Strategy: s, Gateways: len(urls), Summary: loadgen.Summarize(measured), WallS: run.Wall.Seconds()}
	for _, r := range measured {
		if !r.Failed() {
			res.ttfts = append(res.ttfts, r.TTFTMs)
		}
	}
	for _, u := range urls {
		if fams, err := scrapeMetrics(ctx, u+"/metrics"); err == nil {
			res.FailOpen += metricSum(fams, "inference_cache_proxy_fail_open_picks_total")
			res.Retries += metricSum(fams, "inference_cache_proxy_retries_total")
			res.UpstreamErrors += metricSum(fams, "inference_cache_proxy_upstream_errors_total")
		}
	}
	l.modes.measure(ctx, st, res)
	return res, faults, nil
}

// liveProgress prints a line every 10 s of how far the replay is, until
// the returned stop is called.
func liveProgress(ctx context.Context, s string, total int, cfg *loadgen.Config, errw io.Writer) (stop func()) {
	var done, failed atomic.Int64
	prev := cfg.OnResult
	cfg.OnResult = func(r loadgen.Result) {
		done.Add(1)
		if r.Failed() {
			failed.Add(1)
		}
		if prev != nil {
			prev(r)
		}
	}
	pctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
				fmt.Fprintf(errw, "bench --live: %s: %d/%d requests done, %d failed\n", s, done.Load(), total, failed.Load())
			}
		}
	}()
	return cancel
}

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
			msCell(s.TTFT.P50), msCell(s.TTFT.P99), msCell(s.E2E.P50), 100*s.CacheHitRate, 100*s.HitRate, s.MaxOverMean)
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
		case slices.Contains(livePeers, s.Strategy) && g == n && s.TTFT.P50 > 0 && (peer == nil || s.TTFT.P50 < peer.TTFT.P50):
			peer = s
		}
	}
	if p == nil || rr == nil {
		return nil
	}
	if r.Mode != liveModeAggregated && r.Mode != "" {
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
		{"TTFT p50 ≤ 0.6× round-robin's", fmt.Sprintf("%.2f× (%s against %s)", tr, msCell(p.TTFT.P50), msCell(rr.TTFT.P50)), rr.TTFT.P50 > 0 && tr <= 0.6},
		{"hit rate ≥ 2× round-robin's", fmt.Sprintf("%.2f× (%.1f %% against %.1f %%, engines' cached tokens)", hr, 100*p.CacheHitRate, 100*rr.CacheHitRate),
			rr.CacheHitRate > 0 && hr >= 2 || rr.CacheHitRate == 0 && p.CacheHitRate > 0},
	}
	if peer != nil {
		pr := ratio(p.TTFT.P50, peer.TTFT.P50)
		out = append(out, liveTarget{"TTFT p50 ≤ 0.8× the best peer's", fmt.Sprintf("%.2f× (%s against %s's %s)", pr, msCell(p.TTFT.P50), peer.Strategy,
			msCell(peer.TTFT.P50)), pr <= 0.8})
	}
	if one != nil && n > 1 {
		gr := ratio(p.TTFT.P50, one.TTFT.P50)
		out = append(out, liveTarget{fmt.Sprintf("TTFT p50 with %d proxies ≤ 1.1× with 1", n), fmt.Sprintf("%.2f× (%s against %s)", gr, msCell(p.TTFT.P50),
			msCell(one.TTFT.P50)), one.TTFT.P50 > 0 && gr <= 1.1})
	}
	return append(out, liveTarget{"0 failed requests", fmt.Sprintf("%d of %d measured requests failed", failed, total), failed == 0})
}

func metText(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// msCell is a time in ms for a table: "812 ms", or "12.3 s" from 10 s.
func msCell(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%.1f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}
