package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inference-cache/inference-cache/internal/livebench"
)

// liveOptions are the flags of bench --live that bench has not.
type liveOptions struct {
	enabled bool
	livebench.Options
}

// liveSharedFlags are bench's flags that --live reads too; any other of
// bench's flags set with --live is refused.
var liveSharedFlags = []string{"live", "trace", "skip", "speedup", "requests", "engines", "prefill-tps", "decode-tps", "strategies", "gateways", "json", "plot", "no-progress"}

func registerLiveFlags(f *pflag.FlagSet, o *liveOptions) {
	f.BoolVar(&o.enabled, "live", false, "run the live benchmark instead: real processes (cluster, sim engines, subscriber, proxy per strategy) and real requests (see below)")
	f.Float64Var(&o.Speedup, "speedup", 0, fmt.Sprintf("divide the trace's timestamps by this (above 0); unset: %g with --live, 1 without (a modelled run of --live's records: --skip, --requests and --speedup as there)", float64(livebench.DefaultSpeedup)))
	f.IntVar(&o.Skip, "skip", 0, "start at this record of the trace")
	f.IntVar(&o.Warmup, "warmup", livebench.DefaultWarmup, "--live: leave the first N requests out of the figures (they fill the caches)")
	f.IntVar(&o.KVBlocks, "kv-blocks", livebench.DefaultKVBlocks, "--live: each sim engine's KV capacity in blocks of 16 tokens")
	f.IntVar(&o.MaxTokens, "max-tokens", livebench.DefaultMaxTokens, "--live: cap on each request's max_tokens (its output_length)")
	f.BoolVar(&o.Faults, "faults", false, "--live: one picker run with faults: the leader SIGKILLed, all nodes SIGKILLed and restarted, an engine SIGKILLed, the proxy SIGTERMed (drained)")
	f.StringVar(&o.Dir, "dir", "", "--live: directory for the processes' data and logs (default a new one under the system temporary directory)")
	f.DurationVar(&o.Scrape, "subscriber-scrape-live", time.Second, "--live: how often the subscriber scrapes each engine's /metrics")
	registerLiveModeFlags(f, &o.Modes)
	markPaths(f, "dir")
}

// registerLiveModeFlags adds the flags of bench --live's fleet modes.
func registerLiveModeFlags(f *pflag.FlagSet, m *livebench.Modes) {
	f.StringVar(&m.Mode, "live-mode", livebench.ModeAggregated, "--live: the fleet: aggregated, lora (every engine serves --live-adapters LoRA adapters, one per conversation) or disagg (prefill and decode engines)")
	f.IntVar(&m.Adapters, "live-adapters", 4, "--live: --live-mode lora: the adapters each engine serves")
	f.IntVar(&m.MaxLoRAs, "live-max-loras", 2, "--live: --live-mode lora: each engine's --max-loras")
	f.StringVar(&m.LoRALoadTime, "live-lora-load-time", "50ms", "--live: --live-mode lora: each engine's --lora-load-time")
	f.DurationVar(&m.LookupBudget, "live-lookup-budget", 0, "--live: the proxy's --lookup-budget (0 = its default, 50ms); a loaded machine fails more lookups open with a shorter one")
	f.IntVar(&m.PrefillEngines, "live-prefill-engines", 2, "--live: --live-mode disagg: how many of the --engines are prefill backends (the rest decode)")
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
	if !ch("speedup") {
		o.live.Speedup = livebench.DefaultSpeedup
	}
	if !ch("engines") {
		o.engines = livebench.DefaultEngines
	}
	if !ch("prefill-tps") {
		o.prefillTPS = livebench.DefaultPrefillTPS
	}
	if !ch("requests") {
		o.requests = livebench.DefaultRecords
	}
	if !ch("trace") {
		o.trace = defaultLiveTrace
	}
	if len(o.strategies) == 0 {
		o.strategies = livebench.Strategies
	}
	return nil
}

// runBenchLive is bench --live: bench's shared flags handed to the live
// benchmark with its own (livebench.Run checks them all).
func runBenchLive(ctx context.Context, cmd *cobra.Command, o *benchOptions, out, errw io.Writer) error {
	if err := checkLiveFlags(cmd, o); err != nil {
		return err
	}
	l := o.live.Options
	l.Trace, l.Requests, l.Engines, l.PrefillTPS, l.DecodeTPS = o.trace, o.requests, o.engines, o.prefillTPS, o.decodeTPS
	l.Strategies, l.Gateways, l.JSON, l.Plot, l.Progress = o.strategies, o.gateways, o.jsonOut, o.plot, !o.noProgress
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	l.Binary = exe
	return livebench.Run(ctx, l, out, errw)
}
