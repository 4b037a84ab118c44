package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/loadgen"
)

// defaultLiveTrace is the trace loadgen and the live benchmark replay
// when given none: the Mooncake conversation trace, from the repository
// root.
const defaultLiveTrace = "testdata/mooncake/conversation_trace.jsonl.gz"

type loadgenOptions struct {
	cfg                loadgen.Config
	trace, resultsFile string
	compare            string
	skip, warmup       int
	jsonOut, quiet     bool
	progressEvery      time.Duration
}

// newLoadgenCmd is `inference-cache loadgen`: a Mooncake trace replayed
// in real time as streaming chat requests (package loadgen).
func newLoadgenCmd() *cobra.Command {
	o := &loadgenOptions{}
	cmd := &cobra.Command{
		Use:   "loadgen",
		Short: "Replay a Mooncake trace as streaming chat requests and measure TTFT, latency and routing",
		Long: `Replays a Mooncake JSONL trace (--trace) in real time, its timestamps divided by
--speedup, as streaming /v1/chat/completions requests to --target (an
OpenAI-compatible API on this machine: the inference-cache proxy, a sim engine,
vLLM). Each record's hash ids become blocks of 512 words seeded by the id
(one Qwen3 token each), so records sharing hash-id prefixes share prompt
prefixes; max_tokens is the record's output_length, capped by --max-tokens.

Measured per request at the client: TTFT (first streamed content), end-to-end
latency, errors by kind, the engine's prompt and cached tokens (usage), and
the proxy's x-inference-cache-replica, -reason and -matched-tokens headers.
The summary gives TTFT and E2E p50/p90/p99, errors, the hit rate (matched
tokens / prompt tokens, from the headers), the engines' cached share, and
requests per replica max/mean; --json prints it as JSON, --results FILE
writes every request as a JSON line.

The load is bounded: --limit records, --duration of sending, --timeout per
request, at most --max-in-flight open; the target must be a loopback
address. Ctrl-C stops it and prints what was measured. Exit status 1 when
any measured request failed.

--compare URL replays the same records a second time, to URL (a second
proxy in front of the same engines, e.g. make run's round-robin proxy on
127.0.0.1:7463), after the first replay ends, and prints the two summaries
side by side with the first's engines' cached tokens and TTFT p50 as
multiples of the second's. Each replay's prompt words are drawn under a
salt of its own, new every invocation, so neither finds the other's (or an
earlier run's) prefixes in the engines' caches: each strategy starts from
caches holding nothing of its records.`,
		Example: `  # make run's proxy (strategy picker) against its round-robin proxy, same engines:
  inference-cache loadgen --target http://127.0.0.1:7461 --compare http://127.0.0.1:7463 --model qwen3 \
      --trace testdata/mooncake/synthetic_trace.jsonl.gz --skip 1500 --limit 800 --warmup 200 --speedup 2 --quiet
  inference-cache loadgen --target http://127.0.0.1:7480 --model qwen3 --speedup 4 --limit 300
  inference-cache loadgen --target http://127.0.0.1:7431 --model qwen3 --duration 20s --max-tokens 32 --json   # make run's sim-1, no proxy
  inference-cache loadgen --target http://127.0.0.1:7480 --model qwen3 --skip 1000 --limit 500 --warmup 100 --results r.jsonl`,
		Args: cobra.NoArgs,
		RunE: untilSignal(func(ctx context.Context, cmd *cobra.Command) error {
			return runLoadgen(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.cfg.Target, "target", "", "base URL of the OpenAI-compatible API, http://HOST:PORT on loopback (required)")
	f.StringVar(&o.compare, "compare", "", "base URL of a second API on loopback in front of the same engines: replay the records there too, after --target, and print both summaries side by side")
	f.StringVar(&o.cfg.Model, "model", "", "model name of every request (required)")
	f.StringVar(&o.trace, "trace", defaultLiveTrace, "Mooncake JSONL trace, plain or gzip")
	f.Float64Var(&o.cfg.Speedup, "speedup", 1, "divide the trace's timestamps by this (at most 10000)")
	f.IntVar(&o.skip, "skip", 0, "start at this record (0 = the first)")
	f.IntVar(&o.cfg.Limit, "limit", 0, "send at most this many records (0 = every one after --skip)")
	f.DurationVar(&o.cfg.Duration, "duration", 0, "stop sending after this long (0 = no limit); requests in flight finish")
	f.IntVar(&o.warmup, "warmup", 0, "leave the first N requests out of the summary (they still fill the caches)")
	f.IntVar(&o.cfg.MaxTokens, "max-tokens", 64, "cap on max_tokens, which is each record's output_length (0 = no cap)")
	f.DurationVar(&o.cfg.Timeout, "timeout", loadgen.DefaultTimeout, "bound on one request, connect to the end of its stream")
	f.IntVar(&o.cfg.MaxInFlight, "max-in-flight", loadgen.DefaultMaxInFlight, "requests open at once at most; a record due beyond it waits")
	f.BoolVar(&o.jsonOut, "json", false, "print the summary as JSON")
	f.StringVar(&o.resultsFile, "results", "", "write every request's measurement to this file, one JSON object per line")
	f.BoolVar(&o.quiet, "quiet", false, "no progress lines on standard error")
	f.DurationVar(&o.progressEvery, "progress-every", 10*time.Second, "time between progress lines on standard error")
	markPaths(f, "trace", "results")
	return cmd
}

func runLoadgen(ctx context.Context, o *loadgenOptions, out, errw io.Writer) error {
	if err := o.check(); err != nil {
		return err
	}
	tr, err := bench.LoadMooncake(o.trace)
	if err != nil {
		return fmt.Errorf("--trace: %w", err)
	}
	if o.skip >= len(tr.Requests) {
		return fmt.Errorf("--skip %d: the trace has %d records", o.skip, len(tr.Requests))
	}
	if !o.quiet {
		stop := o.progress(ctx, errw)
		defer stop()
	}
	if o.compare != "" {
		return runCompare(ctx, o, tr, out, errw)
	}
	run, err := loadgen.Replay(ctx, tr.Requests[o.skip:], o.cfg)
	if err != nil {
		return err
	}
	if o.resultsFile != "" {
		if err := loadgen.WriteResults(o.resultsFile, run.Results); err != nil {
			return fmt.Errorf("--results %s: %w", o.resultsFile, err)
		}
	}
	measured := run.Results[min(o.warmup, len(run.Results)):]
	s := loadgen.Summarize(measured)
	if o.jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(s)
	} else {
		o.header(out, tr.Name, len(run.Results), o.cfg.Target)
		err = s.WriteText(out)
	}
	if err != nil {
		return err
	}
	if s.Failed > 0 {
		return fmt.Errorf("%d of %d requests failed", s.Failed, s.Requests)
	}
	return nil
}

// check refuses flag values no replay can use, naming the flag.
func (o *loadgenOptions) check() error {
	if _, err := loadgen.CheckTarget(o.cfg.Target); err != nil {
		return err
	}
	if o.compare != "" {
		if _, err := loadgen.CheckTarget(o.compare); err != nil {
			return errors.New(strings.Replace(err.Error(), "--target", "--compare", 1))
		}
		if o.resultsFile != "" {
			return errors.New("--results: not with --compare (it would hold two runs' requests)")
		}
	}
	switch {
	case o.cfg.Model == "":
		return errors.New("--model: required (the model every request names)")
	case o.skip < 0:
		return fmt.Errorf("--skip %d: must be 0 or more", o.skip)
	case o.warmup < 0:
		return fmt.Errorf("--warmup %d: must be 0 or more", o.warmup)
	case o.progressEvery <= 0:
		return fmt.Errorf("--progress-every %v: must be positive", o.progressEvery)
	}
	return nil
}

// progress counts the requests done and failed (o.cfg.OnResult) and
// prints them on errw every --progress-every until stop.
func (o *loadgenOptions) progress(ctx context.Context, errw io.Writer) (stop func()) {
	var done, failed atomic.Int64
	o.cfg.OnResult = func(r loadgen.Result) {
		done.Add(1)
		if r.Failed() {
			failed.Add(1)
		}
	}
	pctx, pstop := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(o.progressEvery)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
				fmt.Fprintf(errw, "loadgen: %d requests done, %d failed\n", done.Load(), failed.Load())
			}
		}
	}()
	return pstop
}

// header is the line naming the replayed records above a summary.
func (o *loadgenOptions) header(out io.Writer, trace string, n int, target string) {
	fmt.Fprintf(out, "%s, records %d–%d, speed-up %g, target %s\n", trace, o.skip, o.skip+n-1, o.cfg.Speedup, target)
	if o.warmup > 0 {
		fmt.Fprintf(out, "first %d requests left out (warm-up)\n", min(o.warmup, n))
	}
}

// runCompare replays the records to --target, then to --compare, each
// under a fresh text salt, and prints both summaries and the comparison.
func runCompare(ctx context.Context, o *loadgenOptions, tr *bench.Trace, out, errw io.Writer) error {
	salt := rand.Uint64() | 1
	targets := [2]string{o.cfg.Target, o.compare}
	var sums [2]loadgen.Summary
	n := 0
	for i, target := range targets {
		cfg := o.cfg
		cfg.Target, cfg.TextSalt = target, salt+uint64(i)
		if !o.quiet {
			fmt.Fprintf(errw, "loadgen: replaying to %s (%d of 2)\n", target, i+1)
		}
		run, err := loadgen.Replay(ctx, tr.Requests[o.skip:], cfg)
		if err != nil {
			return err
		}
		n = len(run.Results)
		sums[i] = loadgen.Summarize(run.Results[min(o.warmup, len(run.Results)):])
		if ctx.Err() != nil {
			break // stopped: print what was measured
		}
	}
	var err error
	if o.jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(map[string]loadgen.Summary{"target": sums[0], "compare": sums[1]})
	} else {
		o.header(out, tr.Name, n, targets[0]+" and "+targets[1])
		err = loadgen.WriteComparison(out, targets, sums)
	}
	if err != nil {
		return err
	}
	if f := sums[0].Failed + sums[1].Failed; f > 0 {
		return fmt.Errorf("%d of %d requests failed", f, sums[0].Requests+sums[1].Requests)
	}
	return nil
}
