package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/bench/localcluster"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/engine"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/turns"
)

type benchOptions struct {
	trace, encoding, visibility, plot     string
	engines, cacheBlocks, requests        int
	cacheFraction                         float64
	prefillTPS, decodeTPS                 float64
	strategies, addrs                     []string
	sweep                                 []int
	jsonOut, noProgress                   bool
	v2Fallbacks                           []string
	seed                                  uint64
	runs                                  int
	genRequests                           int
	lookupTimeout, scrape, subScrape      time.Duration
	reportInterval                        time.Duration
	eventDelay                            time.Duration
	gateways                              int
	shareDelay, dynamoSyncDelay, turnWait time.Duration
	noProvisional                         bool
	logLevel                              string
	live                                  liveOptions
	security                              clientSecurityFlags
}

// benchLong is bench's help: the strategies, the fleet, the time model and the cluster.
const benchLong = `Plays a gateway in front of a simulated fleet of inference engines: replays a
Mooncake JSONL trace (--trace; without it the built-in generator), routes each
request with one strategy after another, and reports per strategy the
token-weighted prefix-cache hit rate, its fraction of the trace's ideal bound,
requests per engine max/mean, modelled TTFT p50/p99/mean, LookupRoute latency
p50/p99 as the gateway saw it, and the reason codes.

Strategies: round-robin, random, least-loaded, consistent-hash; the hint
strategies lookuproute-v1, lookuproute-v2 (head of the hint list) and
lookuproute-sdk (v2 hints and the Go SDK's load-aware picker); the peers'
routers from their public defaults, dynamo, llm-d and sglang; longest-match
(greedy longest cached run, the herding reference) and oracle (perfect,
instant knowledge of caches and queues, lowest predicted TTFT; greedy, a
reference and not a bound).

Every strategy replays the same trace on a fresh fleet with the same
settings (--engines, --cache-blocks per engine, --prefill-tps, --decode-tps).
Time model (--visibility delay, the default): an engine publishes a request's
KV events when its prefill ends and a lookup at virtual time t sees those
published before t - --event-delay, applied on every node; dynamo reads a
perfect KV-event indexer with the same delay, llm-d's default prefix scorer
and sglang only what they routed (package peers, shared with the proxy's
--strategy dynamo, llm-d, sglang); KV capacity is shared
with running requests. --gateways N splits the requests over N gateway
instances, each with its own router state. The hint strategies ask a real
cluster, which learns what each engine caches only from the engines'
vLLM-format KV events over ZMQ, read by the observe subscriber. Without
--addr an embedded 3-node cluster (real Raft over loopback TCP, a gRPC server
per node) is started for the run. With --addr the cluster's CachePolicy is
changed for the run (ranking version, blockSize of the bench models) and
restored at the end.

TTFT is modelled (queue wait + uncached tokens / prefill speed in the
trace's virtual time), never measured; the output says how time was
compressed.`

// newBenchCmd is `inference-cache bench` (contract §12 "Benchmark gateway").
func newBenchCmd() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Replay a request trace through a simulated fleet and compare routing strategies",
		Long:  benchLong,
		Example: `  inference-cache bench --trace testdata/mooncake/conversation_trace.jsonl.gz --engines 8 --cache-blocks 5712
  inference-cache bench --requests 2000 --strategies round-robin,dynamo,lookuproute-sdk,oracle --json
  inference-cache bench --trace trace.jsonl --gateways 4 --prefill-tps 7000 --plot out.png
  inference-cache bench --trace trace.jsonl --addr 127.0.0.1:7401 --addr 127.0.0.1:7411 --plot out.png
  inference-cache bench --trace trace.jsonl --sweep 1000,2000,4000,8000 --plot sweep.png`,
		Args: cobra.NoArgs,
		RunE: untilSignal(func(ctx context.Context, cmd *cobra.Command) error {
			if o.live.enabled {
				return runBenchLive(ctx, cmd, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if !cmd.Flags().Changed("speedup") {
				o.live.Speedup = 1
			}
			return runBench(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	o.register(cmd)
	return cmd
}

// register adds bench's flags (with --live's), bound to o.
func (o *benchOptions) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.trace, "trace", "", "Mooncake JSONL trace file (timestamp, input_length, output_length, hash_ids), plain or gzip-compressed; empty = the built-in generator")
	f.IntVar(&o.requests, "requests", 0, "replay only the first N requests of the trace (0 = all)")
	f.IntVar(&o.genRequests, "gen-requests", 4000, "requests the built-in generator produces (without --trace)")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the generator and of a replay's randomness (the random strategy, the peers' tie-breaks, the engines' hash seeds, the gateways' picker seeds, the share-delay draws)")
	f.IntVar(&o.runs, "runs", 1, fmt.Sprintf("replay each strategy this many times (1 to %d), seeded --seed, --seed+1, …, on the same trace, and report each figure's median", bench.MaxRuns))
	f.IntVar(&o.engines, "engines", 8, "number of simulated engines")
	f.IntVar(&o.cacheBlocks, "cache-blocks", 0, "KV cache per engine in 512-token blocks (0 = --cache-fraction of the trace's distinct blocks / engines)")
	f.Float64Var(&o.cacheFraction, "cache-fraction", 0.25, "when --cache-blocks is 0: the fleet's total cache as a fraction of the trace's distinct blocks")
	f.Float64Var(&o.prefillTPS, "prefill-tps", engine.DefaultPrefillTPS, "engine prefill speed, prompt tokens per second")
	f.Float64Var(&o.decodeTPS, "decode-tps", engine.DefaultDecodeTPS, "decode speed of one request, output tokens per second")
	f.StringSliceVar(&o.strategies, "strategies", nil, "strategies to run, comma-separated (default all): "+strings.Join(bench.AllStrategies, ","))
	f.StringArrayVar(&o.addrs, "addr", nil, "gRPC address of an existing cluster node (repeatable); none = start an embedded 3-node cluster; a secured one needs the --tls-* flags and the admin token (it reads status, sets the policy, writes and looks up)")
	f.BoolVar(&o.jsonOut, "json", false, "print the contract §12.7 JSON object instead of the table")
	f.StringVar(&o.plot, "plot", "", "write a PNG of hit rate and modelled TTFT per strategy (with --sweep: hit rate against cache size)")
	f.IntSliceVar(&o.sweep, "sweep", nil, "cache sizes (blocks per engine) to sweep; one full run per size")
	f.StringVar(&o.encoding, "event-encoding", string(bench.EncodingPositional), "msgpack form of the engines' KV-event batches: positional or map")
	f.StringVar(&o.visibility, "visibility", string(bench.VisibilityDelay), "time model: delay (events published at each prefill's end, visible --event-delay later), timestamp (at arrival, visible to later trace timestamps) or request (at arrival, visible to every later request)")
	f.DurationVar(&o.eventDelay, "event-delay", bench.DefaultEventDelay, "virtual delay from a KV event's publication to its visibility (--visibility delay)")
	f.IntVar(&o.gateways, "gateways", 1, "gateway instances the requests are split over (round robin), each with its own router state; with --live, that many proxy processes (1 to 8) on one cluster, and the picker also run behind one proxy as the baseline")
	f.DurationVar(&o.reportInterval, "report-interval", bench.DefaultReportInterval, "how often, in virtual time, each lookuproute-sdk gateway's SDK reports its in-flight load (10ms to 1m; --gateways > 1), besides the report each picks push carries; the picks' full state goes every 1s, the SDK's default")
	f.DurationVar(&o.turnWait, "turn-wait", turns.DefaultWait, "bound on a lookuproute-sdk gateway's wait for its turn at the node that orders several gateways' picks (--gateways > 1; contract §5.13); 0 = no turns (an ablation), as the server's --turn-wait")
	f.DurationVar(&o.shareDelay, "share-delay", 0, "virtual delay from a call of a lookuproute-sdk gateway's SDK senders (a picks push, a load report) to every node's lookups (--gateways > 1); 0 draws each push's from the live system's measured push-to-visible delays (p50 1.29 ms, p99 7.84 ms on a 2-core machine, BENCHMARKS.md), above 0 fixes it (5ms: the design's p99 bound)")
	f.BoolVar(&o.noProvisional, "no-provisional", false, "ablation: lookuproute-sdk and picker-indexer without provisional residencies (no local table, no shared picks)")
	f.DurationVar(&o.dynamoSyncDelay, "dynamo-sync-delay", bench.DefaultDynamoSyncDelay, "virtual delay of dynamo-sync-nats's replica sync (one NATS hop); dynamo-sync is the same at zero delay")
	f.DurationVar(&o.lookupTimeout, "lookup-timeout", bench.DefaultLookupTimeout, "the gateway's LookupRoute budget; past it the lookup fails open to NO_HINT")
	f.DurationVar(&o.scrape, "scrape-interval", bench.DefaultScrapeInterval, "how often, in virtual time, the engines' /metrics change (what llm-d and the subscriber read)")
	f.DurationVar(&o.subScrape, "subscriber-scrape", bench.DefaultSubscriberScrape, "how often, in wall time, the cluster's subscriber scrapes the engines' /metrics")
	f.StringSliceVar(&o.v2Fallbacks, "v2-fallbacks", []string{"tenant-hot", "affinity"}, "fallbacks lookuproute-v2 runs with (ablation): tenant-hot, affinity, or none")
	f.BoolVar(&o.noProgress, "no-progress", false, "no progress bar on stderr")
	f.StringVar(&o.logLevel, "log-level", "error", "least log level of the embedded cluster and subscriber: debug, info, warn or error")
	o.security.register(cmd)
	markPaths(f, "trace", "plot")
	registerLiveFlags(f, &o.live)
}

func runBench(ctx context.Context, o *benchOptions, out, errw io.Writer) error {
	log, err := newLogger(errw, "text", o.logLevel)
	if err != nil {
		return err
	}
	tr, sizes, err := o.traceAndSizes()
	if err != nil {
		return err
	}
	addrs, clusterDesc, stop, err := o.cluster(ctx, errw, log)
	if err != nil {
		return err
	}
	defer stop()
	noTenantHot, noAffinity, err := o.fallbacks()
	if err != nil {
		return err
	}
	var reports []*bench.Report
	for _, c := range sizes {
		var cc client.Config
		if len(o.addrs) > 0 {
			if err := o.security.apply(&cc); err != nil {
				return err
			}
		}
		cfg := bench.Config{
			Trace: tr, Strategies: o.strategies, Addrs: addrs, Client: cc, Seed: o.seed, Runs: o.runs,
			Fleet:    bench.FleetConfig{Engines: o.engines, CacheBlocks: c, PrefillTPS: o.prefillTPS, DecodeTPS: o.decodeTPS},
			Encoding: bench.Encoding(o.encoding), Visibility: bench.Visibility(o.visibility),
			LookupTimeout: o.lookupTimeout, ScrapeInterval: o.scrape, SubscriberScrape: o.subScrape, Logger: log,
			EventDelay: o.eventDelay, Gateways: o.gateways, ReportInterval: o.reportInterval,
			ShareDelay: o.shareDelay, TurnWait: turnWaitFlag(o.turnWait), DynamoSyncDelay: o.dynamoSyncDelay, NoProvisional: o.noProvisional,
			V2NoTenantHot: noTenantHot, V2NoAffinity: noAffinity,
		}
		if !o.noProgress {
			cfg.Progress = newProgress(errw)
		}
		rep, err := bench.Run(ctx, cfg)
		if err != nil {
			return err
		}
		rep.Cluster = clusterDesc
		reports = append(reports, rep)
		if !o.jsonOut {
			if err := rep.WriteTable(out); err != nil {
				return err
			}
			fmt.Fprintln(out)
		}
	}
	return o.writeReports(reports, out, errw)
}

// traceAndSizes reads --trace (or generates the built-in trace), cut to
// --skip and --requests and sped up by --speedup, and the cache sizes to
// run: --sweep, else --cache-blocks,
// else --cache-fraction of the trace's distinct blocks per engine.
func (o *benchOptions) traceAndSizes() (*bench.Trace, []int, error) {
	var tr *bench.Trace
	var err error
	if o.trace != "" {
		if tr, err = bench.LoadMooncake(o.trace); err != nil {
			return nil, nil, err
		}
	} else {
		tr = bench.Generate(bench.GeneratorConfig{Seed: o.seed, Requests: o.genRequests})
	}
	if tr, err = tr.Window(o.live.Skip, o.requests, o.live.Speedup); err != nil {
		return nil, nil, err
	}
	sizes := o.sweep
	if len(sizes) == 0 {
		c := o.cacheBlocks
		if c == 0 {
			if o.engines < 1 {
				return nil, nil, fmt.Errorf("--engines %d: must be at least 1", o.engines)
			}
			c = max(1, int(o.cacheFraction*float64(tr.DistinctBlocks())/float64(o.engines)))
		}
		sizes = []int{c}
	}
	return tr, sizes, nil
}

// cluster is the cluster the hint strategies ask: --addr, or an embedded
// 3-node one when a strategy needs one and none is given (stop closes
// it); desc names it for the report.
func (o *benchOptions) cluster(ctx context.Context, errw io.Writer, log *slog.Logger) (addrs []string, desc string, stop func(), err error) {
	addrs, desc, stop = o.addrs, "--addr "+strings.Join(o.addrs, ","), func() {}
	needCluster := len(o.strategies) == 0
	for _, s := range o.strategies {
		needCluster = needCluster || bench.UsesCluster(s)
	}
	if len(addrs) > 0 || !needCluster {
		return addrs, desc, stop, nil
	}
	pol := policy.Default()
	pol.BlockSize = map[string]uint32{bench.BenchModel: bench.TraceBlockTokens}
	fmt.Fprintln(errw, "bench: starting an embedded 3-node cluster (in-process Raft nodes over loopback TCP, one gRPC server each)")
	lc, err := localcluster.Start(ctx, localcluster.Options{Nodes: 3, Policy: &pol, Logger: log})
	if err != nil {
		return nil, "", nil, err
	}
	addrs = lc.Addrs()
	return addrs, "embedded 3-node (" + strings.Join(addrs, ",") + ")", func() { lc.Close() }, nil
}

// fallbacks reads --v2-fallbacks: which of lookuproute-v2's fallbacks
// are off.
func (o *benchOptions) fallbacks() (noTenantHot, noAffinity bool, err error) {
	noTenantHot, noAffinity = true, true
	for _, fb := range o.v2Fallbacks {
		switch fb {
		case "tenant-hot":
			noTenantHot = false
		case "affinity":
			noAffinity = false
		case "none":
		default:
			return false, false, fmt.Errorf("--v2-fallbacks %q: want tenant-hot, affinity or none", fb)
		}
	}
	return noTenantHot, noAffinity, nil
}

// writeReports prints the reports as JSON with --json (the tables were
// printed as each run ended) and writes the plot.
func (o *benchOptions) writeReports(reports []*bench.Report, out, errw io.Writer) error {
	if o.jsonOut {
		for _, rep := range reports {
			if err := rep.WriteJSON(out); err != nil {
				return err
			}
			for i := range rep.Strategies {
				if bench.UsesCluster(rep.Strategies[i].Name) {
					fmt.Fprintf(errw, "bench: %s: %s; TTFT is modelled\n", rep.Strategies[i].Name, rep.TimeCompression(&rep.Strategies[i]))
				}
			}
		}
	}
	if o.plot == "" {
		return nil
	}
	var err error
	if len(reports) > 1 {
		err = bench.PlotSweep(o.plot, reports)
	} else {
		err = bench.PlotReport(o.plot, reports[0])
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(errw, "bench: plot written to %s\n", o.plot)
	return nil
}

// newProgress returns a Progress callback drawing one progress bar per
// strategy on w.
func newProgress(w io.Writer) func(strategy string, done, total int) {
	return newProgressAt(w, isTerminal(w), time.Now)
}

// newProgressAt is newProgress with the terminal test and the clock
// given: a bar redrawn in place on a terminal, else one plain line per
// tenth of the run (a log or CI file gets no carriage returns). The rate
// is measured from a strategy's first report, never over ~0 s (which
// printed millions of req/s), and shown once a second has passed.
func newProgressAt(w io.Writer, terminal bool, now func() time.Time) func(strategy string, done, total int) {
	var bar *progressbar.ProgressBar
	var cur string
	var t0 time.Time
	var d0, lastTenth int
	rate := func(done int) string {
		el := now().Sub(t0)
		if el < time.Second || done <= d0 {
			return ""
		}
		return fmt.Sprintf(", %.0f req/s", float64(done-d0)/el.Seconds())
	}
	return func(strategy string, done, total int) {
		if strategy != cur {
			cur, t0, d0, lastTenth = strategy, now(), done, 0
			if terminal {
				bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(fmt.Sprintf("%-16s", strategy)),
					progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionSetWidth(30),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))
			}
		}
		if terminal {
			bar.Describe(fmt.Sprintf("%-16s%s", strategy, rate(done)))
			_ = bar.Set(done)
			return
		}
		if tenth := done * 10 / max(total, 1); tenth > lastTenth || done == total {
			lastTenth = tenth
			fmt.Fprintf(w, "bench: %s: %d/%d requests (%d%%)%s\n", strategy, done, total, done*100/max(total, 1), rate(done))
		}
	}
}
