package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// DemoConfig configures RunDemo; zero fields take the defaults in
// parentheses.
type DemoConfig struct {
	// Addrs are the cluster's gRPC addresses (required).
	Addrs []string
	// Engines (4) and CacheBlocks (256 per engine) size the demo fleet.
	Engines, CacheBlocks int
	// RatePerSec is the wall-clock request rate (20).
	RatePerSec float64
	// Seed of the generator (1).
	Seed uint64
	// Out receives the live status line.
	Out io.Writer
	// Live: rewrite one line in place (a terminal); otherwise print a
	// full line every LineEvery (10s).
	Live      bool
	LineEvery time.Duration
	// Logger (default: discard).
	Logger *slog.Logger
}

// Partition keys of the demo fleet (separate from the bench's).
const (
	DemoModel = "demo"
)

// RunDemo drives a demo fleet against a running cluster until ctx ends:
// the built-in generator's requests, paced in wall-clock time, routed with
// LookupRoute (the cluster's own policy; blockSize of model "demo" is set
// to 512 if absent), served by simulated engines that publish their KV
// events over ZMQ to an observe subscriber feeding the cluster. It prints
// a status line: requests, token hit rate against round-robin's on a
// shadow fleet serving the same requests, the ideal so far, reason codes,
// lookup latency.
func RunDemo(ctx context.Context, cfg DemoConfig) error {
	if cfg.Engines <= 0 {
		cfg.Engines = 4
	}
	if cfg.CacheBlocks <= 0 {
		cfg.CacheBlocks = 256
	}
	if cfg.RatePerSec <= 0 {
		cfg.RatePerSec = 20
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.LineEvery <= 0 {
		cfg.LineEvery = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	cl, err := client.New(client.Config{Addrs: cfg.Addrs, LookupTimeout: DefaultLookupTimeout})
	if err != nil {
		return err
	}
	defer cl.Close()
	p, err := getPolicy(ctx, cl)
	if err != nil {
		return err
	}
	if p.GetBlockSize()[DemoModel] != TraceBlockTokens {
		p = proto.Clone(p).(*pb.CachePolicy)
		if p.BlockSize == nil {
			p.BlockSize = map[string]uint32{}
		}
		p.BlockSize[DemoModel] = TraceBlockTokens
		if err := setPolicy(ctx, cl, p); err != nil {
			return err
		}
	}
	fc := FleetConfig{Engines: cfg.Engines, CacheBlocks: cfg.CacheBlocks, EventsAtArrival: true}
	if err := fc.fill(); err != nil {
		return err
	}
	f := NewFleet(fc, DemoModel, "demo-")
	obs, err := startObservation(ctx, f, cfg.Addrs, EncodingPositional, time.Second, cfg.Seed, cfg.Logger)
	if err != nil {
		return err
	}
	defer obs.stop()
	lr := newLookupRouter(f, cl, newLookupStats())
	// The same requests on a second fleet routed round-robin (no events
	// published): the hit rate the fleet would get without the index.
	rr := NewFleet(fc, DemoModel, "rr-")
	var rrCached int64
	all := func(float64) bool { return true }
	seen := map[uint64]struct{}{}
	var prompt, cached, idealHit int64
	n := 0
	lastLine := time.Now()
	interval := time.Duration(float64(time.Second) / cfg.RatePerSec)
	next := time.Now()
	var vt0 float64 // virtual time offset of the current chunk
	for chunk := uint64(0); ; chunk++ {
		tr := Generate(GeneratorConfig{Seed: cfg.Seed + chunk, Requests: 2000})
		off := chunk << 40 // distinct ids per chunk
		var last float64
		for i := range tr.Requests {
			q := tr.Requests[i]
			ids := make([]uint64, len(q.HashIDs))
			for j, h := range q.HashIDs {
				ids[j] = h + off
			}
			q.HashIDs = ids
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
					fmt.Fprintln(cfg.Out)
					return nil
				case <-time.After(d):
				}
			} else if ctx.Err() != nil {
				return nil
			}
			next = next.Add(interval)
			t := vt0 + float64(q.Timestamp)/1000
			last = t
			e := lr.Route(ctx, n, &q, t)
			s := f.Engines[e].Serve(&q, t)
			for k, eng := range f.Engines {
				eng.Scrape(t)
				eng.Release(all, func(ev *KVEvent) { obs.publish(k, ev) })
			}
			rrCached += int64(rr.Engines[n%len(rr.Engines)].Serve(&q, t).CachedTokens)
			for _, eng := range rr.Engines {
				eng.Release(all, func(*KVEvent) {})
			}
			n++
			prompt += int64(q.InputLength)
			cached += int64(s.CachedTokens)
			for j, h := range q.HashIDs {
				k := min(TraceBlockTokens, q.InputLength-j*TraceBlockTokens)
				if k <= 0 {
					break
				}
				if _, ok := seen[h]; ok {
					idealHit += int64(k)
				}
			}
			for _, h := range q.HashIDs {
				seen[h] = struct{}{}
			}
			if len(seen) > 4<<20 {
				seen = map[uint64]struct{}{}
			}
			if cfg.Live && time.Since(lastLine) >= 500*time.Millisecond || !cfg.Live && time.Since(lastLine) >= cfg.LineEvery {
				lastLine = time.Now()
				line := fmt.Sprintf("demo fleet (%d engines, lookuproute): %d requests, token hit rate %.1f%% (round-robin %.1f%%, ideal so far %.1f%%), %s, lookup p50 %.0f µs",
					cfg.Engines, n, 100*float64(cached)/float64(max(prompt, 1)), 100*float64(rrCached)/float64(max(prompt, 1)), 100*float64(idealHit)/float64(max(prompt, 1)),
					formatReasons(lr.reasons), Percentile(lr.lat, 0.5))
				lr.lat = lr.lat[:0]
				if cfg.Live {
					fmt.Fprintf(cfg.Out, "\r\033[K%s", line)
				} else {
					fmt.Fprintln(cfg.Out, strings.TrimSpace(line))
				}
			}
		}
		vt0 = last + 1
	}
}
