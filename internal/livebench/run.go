package livebench

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
	"time"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/internal/localfleet"
	"github.com/inference-cache/inference-cache/internal/promscrape"
	"github.com/inference-cache/inference-cache/loadgen"
)

// Options are one bench --live run: bench's flags that --live reads, and
// its own.
type Options struct {
	// Trace is the Mooncake trace (plain or gzip); Skip records are left
	// out at its start, then Requests replayed.
	Trace          string
	Skip, Requests int
	// Warmup is how many of the first requests the figures leave out.
	Warmup int
	// Speedup divides the trace's timestamps.
	Speedup float64
	// Engines, each with PrefillTPS and DecodeTPS (tokens per second),
	// KVBlocks blocks of 16 tokens; MaxTokens caps each request's
	// max_tokens.
	Engines               int
	PrefillTPS, DecodeTPS float64
	KVBlocks, MaxTokens   int
	// Strategies are the proxy's strategies run in turn (Strategies by
	// default), each behind Gateways proxies.
	Strategies []string
	Gateways   int
	// Faults runs the picker once, with the fault schedule.
	Faults bool
	// Dir holds the processes' data and logs ("" = a new temporary one).
	Dir string
	// Scrape is how often the subscriber scrapes each engine's /metrics.
	Scrape time.Duration
	// Modes is the fleet's mode.
	Modes Modes
	// JSON prints the report as JSON; Plot, when set, writes a PNG there;
	// Progress prints a line every 10 s of each replay.
	JSON     bool
	Plot     string
	Progress bool
	// Binary is this executable, run for every process.
	Binary string
}

// Defaults of bench --live, chosen so that round-robin's engines queue on
// the conversation trace (EVALUATION.md, "Live benchmark").
const (
	DefaultEngines    = 6
	DefaultPrefillTPS = 14000
	DefaultSpeedup    = 2
	DefaultRecords    = 800
	DefaultWarmup     = 200
	DefaultKVBlocks   = 100000
	DefaultMaxTokens  = 32
)

// Strategies are the proxy's strategies, compared in this order: the
// picker, the baselines and the peers' routers (package peers).
var Strategies = []string{"picker", "round-robin", "least-loaded", "dynamo", "llm-d", "sglang"}

// peers are the peers' strategies among Strategies.
var peers = []string{"dynamo", "llm-d", "sglang"}

// MaxGateways bounds Options.Gateways: each proxy is a process on this
// machine.
const MaxGateways = 8

// Check refuses values no live run can use, naming the flag.
func (o *Options) Check() error {
	switch {
	case o.Engines < 2:
		return fmt.Errorf("--engines %d: --live needs at least 2 (a strategy chooses among them)", o.Engines)
	case o.Engines > 16:
		return fmt.Errorf("--engines %d: --live runs at most 16 on one machine", o.Engines)
	case !(o.PrefillTPS > 0), !(o.DecodeTPS > 0):
		return fmt.Errorf("--prefill-tps %v, --decode-tps %v: must be positive", o.PrefillTPS, o.DecodeTPS)
	case o.Requests < 1:
		return fmt.Errorf("--requests %d: --live replays at least 1 record", o.Requests)
	case !(o.Speedup > 0) || o.Speedup > loadgen.MaxSpeedup:
		return fmt.Errorf("--speedup %v: want above 0, at most %d", o.Speedup, loadgen.MaxSpeedup)
	case o.Skip < 0, o.Warmup < 0:
		return fmt.Errorf("--skip %d, --warmup %d: must be 0 or more", o.Skip, o.Warmup)
	case o.Warmup >= o.Requests:
		return fmt.Errorf("--warmup %d: leaves none of the --requests %d measured", o.Warmup, o.Requests)
	case o.KVBlocks < 1:
		return fmt.Errorf("--kv-blocks %d: need at least 1", o.KVBlocks)
	case o.MaxTokens < 1:
		return fmt.Errorf("--max-tokens %d: must be at least 1", o.MaxTokens)
	case o.Scrape < 100*time.Millisecond:
		return fmt.Errorf("--subscriber-scrape-live %v: at least 100ms", o.Scrape)
	case o.Gateways < 1 || o.Gateways > MaxGateways:
		return fmt.Errorf("--gateways %d: --live runs 1 to %d proxies", o.Gateways, MaxGateways)
	}
	if err := o.Modes.check(o.Engines); err != nil {
		return err
	}
	for _, s := range o.Strategies {
		if !slices.Contains(Strategies, s) {
			return fmt.Errorf("--strategies %q: --live runs the proxy's strategies %s", s, strings.Join(Strategies, ", "))
		}
	}
	return nil
}

// liveRun is one run of the benchmark: a strategy on a fleet.
type liveRun struct {
	strategy string
	fleet    liveFleet
}

// Run is bench --live: o checked, then each strategy's run on a fresh
// stack of processes under o.Dir, the report printed to out (text, or
// JSON with o.JSON) and kept as <dir>/report.json, the progress and the
// faults on errw. It errors when o fails Check, the trace cannot be read,
// a stack does not start or a replay fails; ctx's error when it ended.
func Run(ctx context.Context, o Options, out, errw io.Writer) error {
	if err := o.Check(); err != nil {
		return err
	}
	tr, err := bench.LoadMooncake(o.Trace)
	if err != nil {
		return fmt.Errorf("--trace: %w", err)
	}
	// The window at its recorded pace: the replay applies --speedup.
	w, err := tr.Window(o.Skip, o.Requests, 1)
	if err != nil {
		return err
	}
	recs := w.Requests
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "inference-cache-bench-live-"); err != nil {
			return err
		}
	}
	models, err := localfleet.ModelsDir(dir, "")
	if err != nil {
		return err
	}
	rep := &liveReport{Trace: tr.Name, Skip: o.Skip, Records: len(recs), Warmup: o.Warmup, Speedup: o.Speedup, Engines: o.Engines,
		PrefillTPS: o.PrefillTPS, DecodeTPS: o.DecodeTPS, KVBlocks: o.KVBlocks, MaxTokens: o.MaxTokens, Gateways: o.Gateways, CPUs: runtime.NumCPU(),
		Mode: o.Modes.Mode}
	span := time.Duration(float64(recs[len(recs)-1].Timestamp-recs[0].Timestamp) / o.Speedup * float64(time.Millisecond))
	fmt.Fprintf(errw, "bench --live: %d records of %s (from %d), %v of arrivals each run at speed-up %g; processes' logs under %s\n",
		len(recs), tr.Name, o.Skip, span.Round(time.Second), o.Speedup, dir)
	for _, r := range o.runs() {
		if ctx.Err() != nil {
			break
		}
		sub := r.strategy
		if r.fleet.proxies > 1 {
			sub += "-" + strconv.Itoa(r.fleet.proxies) + "gw"
		}
		res, faults, err := runOne(ctx, filepath.Join(dir, sub), models, r.strategy, recs, r.fleet, &o, errw)
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
	return o.write(rep, dir, out, errw)
}

// runs are the runs o asks for: the picker alone with the faults, else
// each strategy, and with several proxies the picker behind one as well:
// the baseline of "p50 with N proxies ≤ 1.1× with 1", in the same run.
func (o *Options) runs() []liveRun {
	lf := liveFleet{engines: o.Engines, prefillTPS: o.PrefillTPS, decodeTPS: o.DecodeTPS, kvBlocks: o.KVBlocks, scrape: o.Scrape, proxies: o.Gateways,
		modes: &o.Modes}
	if o.Faults {
		lf.proxyDrain = faultProxyDrain
		return []liveRun{{"picker", lf}}
	}
	var runs []liveRun
	for _, s := range o.Strategies {
		runs = append(runs, liveRun{s, lf})
	}
	if one := lf; lf.proxies > 1 && slices.Contains(o.Strategies, "picker") {
		one.proxies = 1
		runs = append(runs, liveRun{"picker", one})
	}
	return runs
}

// write keeps the JSON report beside the runs whatever is printed, prints
// it to out and writes the plot.
func (o *Options) write(rep *liveReport, dir string, out, errw io.Writer) error {
	if b, err := json.MarshalIndent(rep, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644)
	}
	var err error
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.writeText(out)
	}
	if err != nil || o.Plot == "" {
		return err
	}
	series := make([]loadgen.PlotSeries, len(rep.Strategies))
	for i, s := range rep.Strategies {
		name := s.Strategy
		if s.Gateways != rep.Gateways {
			name += fmt.Sprintf(" (%d proxy)", s.Gateways)
		}
		series[i] = loadgen.PlotSeries{Name: name, Summary: s.Summary, TTFTMs: s.ttfts}
	}
	if err := loadgen.Plot(o.Plot, rep.title(), series); err != nil {
		return err
	}
	fmt.Fprintf(errw, "bench --live: plot written to %s\n", o.Plot)
	return nil
}

// runOne starts a fresh stack with the proxy's strategy s, replays recs
// through it (with the fault schedule when o.Faults), and stops it.
func runOne(ctx context.Context, dir, models, s string, recs []bench.Request, lf liveFleet, o *Options,
	errw io.Writer) (*liveResult, *faultReport, error) {
	// Each run starts on an empty cluster: an earlier run's data under
	// dir was made on other ports and would never elect a leader.
	if err := os.RemoveAll(dir); err != nil {
		return nil, nil, err
	}
	st, err := startLiveStack(ctx, o.Binary, dir, models, s, lf)
	if err != nil {
		return nil, nil, err
	}
	defer st.stop()
	urls := st.proxyURLs()
	fmt.Fprintf(errw, "bench --live: %s: cluster, %d engines, subscriber and %d proxies up (%s); replaying\n", s, lf.engines, len(urls),
		strings.Join(urls, ", "))
	cfg := loadgen.Config{Target: urls[0], MoreTargets: urls[1:], Model: localfleet.Model, Speedup: o.Speedup, MaxTokens: o.MaxTokens, Epoch: time.Now(),
		ModelFor: o.Modes.modelFor()}
	var fr *faultRun
	if o.Faults {
		fr = newFaultRun(st, cfg.Epoch, recs, o.Speedup, errw)
		go fr.run(ctx)
	}
	var stopProgress func()
	if o.Progress {
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
	if err := loadgen.WriteResults(filepath.Join(dir, "results.jsonl"), run.Results); err != nil {
		return nil, nil, err
	}
	var faults *faultReport
	if fr != nil {
		faults = fr.report(run.Results)
	}
	res := measure(ctx, s, urls, run.Results[min(o.Warmup, len(run.Results)):], run.Wall)
	o.Modes.measure(ctx, st, res)
	return res, faults, nil
}

// measure is a run's result from its measured requests and the proxies'
// counters at its end.
func measure(ctx context.Context, s string, urls []string, measured []loadgen.Result, wall time.Duration) *liveResult {
	res := &liveResult{Strategy: s, Gateways: len(urls), Summary: loadgen.Summarize(measured), WallS: wall.Seconds()}
	for _, r := range measured {
		if !r.Failed() {
			res.ttfts = append(res.ttfts, r.TTFTMs)
		}
	}
	for _, u := range urls {
		if fams, err := promscrape.Get(ctx, u+"/metrics"); err == nil {
			res.FailOpen += promscrape.Sum(fams, "inference_cache_proxy_fail_open_picks_total")
			res.Retries += promscrape.Sum(fams, "inference_cache_proxy_retries_total")
			res.UpstreamErrors += promscrape.Sum(fams, "inference_cache_proxy_upstream_errors_total")
		}
	}
	return res
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
