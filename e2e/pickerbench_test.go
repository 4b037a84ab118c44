package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inference-cache/inference-cache/internal/extproctest"
	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/proccluster"
)

var (
	pickerBench       = flag.Bool("picker-bench", false, "run TestPickerBench: the endpoint picker's added latency vs a pass-through ext_proc server, and three pickers with one killed")
	pickerBenchRate   = flag.Int("picker-bench-rate", 500, "TestPickerBench: requests per second to each ext_proc server")
	pickerBenchFor    = flag.Duration("picker-bench-duration", 6*time.Second, "TestPickerBench: length of one fixed-rate phase")
	pickerBenchRounds = flag.Int("picker-bench-rounds", 5, "TestPickerBench: rounds of (picker, pass-through) phases")
)

// TestPickerBench measures the picker over real processes (a 3-node
// cluster, three sim engines, the subscriber, the picker with lookups
// on; a pass-through ext_proc server, internal/extproctest/passthrough,
// as the baseline) and logs the figures of BENCHMARKS.md:
//
//  1. added latency: the same chat requests (32 system prompts of ~600
//     tokens, the index warm) driven by one extproctest client in
//     FULL_DUPLEX_STREAMED mode at a fixed rate to the picker, to the
//     pass-through and to a picker without lookups (no --addr), in
//     rotating phases of one run; per phase the
//     request phase's latency (headers and body sent → the answer and the
//     body back: what the gateway waits for before sending upstream) and
//     the whole exchange's (with a one-chunk response);
//  2. three pickers behind one client (each request to the next in
//     turn), one SIGKILLed a third of the way: requests served per
//     picker, requests whose first attempt failed, and how many of those
//     a retry on the next picker served.
//
// It runs only with -picker-bench (go test ./e2e -run TestPickerBench
// -picker-bench -v).
func TestPickerBench(t *testing.T) {
	if !*pickerBench {
		t.Skip("a benchmark: run with -picker-bench")
	}
	if testing.Short() {
		t.Skip("starts a cluster, sim engines, the subscriber and pickers")
	}
	f := startFleet(t, fleetOptions{sims: 3, simFlags: []string{"--prefill-tps", "1e9", "--decode-tps", "1e6", "--kv-blocks", "65536"}})
	p := f.startPicker("picker")

	// The pass-through, a process of its own as the picker is.
	ptBin := filepath.Join(f.dir, "passthrough")
	if out, err := exec.Command("go", "build", "-o", ptBin, "../internal/extproctest/passthrough").CombinedOutput(); err != nil {
		t.Fatalf("build passthrough: %v\n%s", err, out)
	}
	ptAddr := freeport.MustAddr(t)
	pt := proccluster.New(proccluster.Options{Binary: ptBin}).Add(proccluster.Spec{Name: "passthrough", Args: []string{ptAddr, p.addr["sim-0"]},
		LogPath: filepath.Join(f.dir, "passthrough.log")})
	if err := pt.Start(); err != nil {
		t.Fatal(err)
	}
	defer pt.Kill()
	ptConn, err := grpc.NewClient(ptAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer ptConn.Close()

	r := rand.New(rand.NewPCG(1, 2))
	systems := make([]string, 32)
	for i := range systems {
		systems[i] = longSystem(fmt.Sprintf("topic-%d", i)) + strings.Repeat("Answer in detail. ", 20)
	}
	bodies := make([][]byte, 4096)
	for i := range bodies {
		bodies[i] = []byte(chatBody(systems[r.IntN(len(systems))], fmt.Sprintf("Question %d about caching?", i), 1, false))
	}
	// Warm the index: every system prompt served once, the last indexed.
	fd := filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	var last string
	for _, s := range systems {
		pk, _, _ := viaPicker(t, p, extproctest.Request{Mode: fd, ResponseMode: fd, Body: []byte(chatBody(s, "warm-up", 1, false))})
		last, _, _ = strings.Cut(pk.Destination, ",")
	}
	f.waitIndexed(chatBody(systems[len(systems)-1], "warm-up", 1, false), p.replicaAt(last), 20*time.Second)
	for _, c := range []*grpc.ClientConn{p.conn, ptConn} { // connections up, code paths warm
		phase(t, c, bodies, 200, time.Second)
	}

	// A third contender, the picker without lookups (no --addr): the
	// share of the cluster's round trip in the picker's latency.
	nl := f.startPickerWith("picker-no-lookups", false)
	phase(t, nl.conn, bodies, 200, time.Second)

	type q struct{ p50, p99, fp50, fp99 time.Duration }
	var pick, pass, nolk []q
	var picked, passed int
	names := []string{"picker", "pass-through", "picker without lookups"}
	conns := []*grpc.ClientConn{p.conn, ptConn, nl.conn}
	for round := 0; round < *pickerBenchRounds; round++ {
		for k := 0; k < 3; k++ {
			which := (round + k) % 3 // each contender first in turn
			req, full, errs := phase(t, conns[which], bodies, *pickerBenchRate, *pickerBenchFor)
			if errs > 0 {
				t.Fatalf("%d failed exchanges", errs)
			}
			x := q{quantile(req, .5), quantile(req, .99), quantile(full, .5), quantile(full, .99)}
			switch which {
			case 0:
				pick, picked = append(pick, x), picked+len(req)
			case 1:
				pass, passed = append(pass, x), passed+len(req)
			default:
				nolk = append(nolk, x)
			}
			t.Logf("round %d %s: request phase p50 %v p99 %v; whole exchange p50 %v p99 %v (%d requests)", round,
				names[which], x.p50, x.p99, x.fp50, x.fp99, len(req))
		}
	}
	med := func(qs []q, get func(q) time.Duration) time.Duration {
		v := make([]time.Duration, len(qs))
		for i := range qs {
			v[i] = get(qs[i])
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	ratios := func(get func(q) time.Duration) float64 {
		v := make([]float64, len(pick))
		for i := range pick {
			v[i] = float64(get(pick[i])) / float64(get(pass[i]))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	t.Logf("ADDED LATENCY at %d req/s, medians of %d rounds (%d picker, %d pass-through requests):", *pickerBenchRate, len(pick), picked, passed)
	t.Logf("  request phase: picker p50 %v p99 %v; pass-through p50 %v p99 %v; ratio (median of per-round ratios) p50 %.2fx p99 %.2fx",
		med(pick, func(x q) time.Duration { return x.p50 }), med(pick, func(x q) time.Duration { return x.p99 }),
		med(pass, func(x q) time.Duration { return x.p50 }), med(pass, func(x q) time.Duration { return x.p99 }),
		ratios(func(x q) time.Duration { return x.p50 }), ratios(func(x q) time.Duration { return x.p99 }))
	t.Logf("  whole exchange: picker p50 %v p99 %v; pass-through p50 %v p99 %v; ratio p50 %.2fx p99 %.2fx",
		med(pick, func(x q) time.Duration { return x.fp50 }), med(pick, func(x q) time.Duration { return x.fp99 }),
		med(pass, func(x q) time.Duration { return x.fp50 }), med(pass, func(x q) time.Duration { return x.fp99 }),
		ratios(func(x q) time.Duration { return x.fp50 }), ratios(func(x q) time.Duration { return x.fp99 }))
	t.Logf("  picker without lookups: request phase p50 %v p99 %v; whole exchange p50 %v p99 %v",
		med(nolk, func(x q) time.Duration { return x.p50 }), med(nolk, func(x q) time.Duration { return x.p99 }),
		med(nolk, func(x q) time.Duration { return x.fp50 }), med(nolk, func(x q) time.Duration { return x.fp99 }))
	t.Logf("  picker metrics: fail_open %v, picks PREFIX_MATCH %v, LOAD %v", metricSum(t, p.metrics, "inference_cache_picker_fail_open_picks_total"),
		metricSum(t, p.metrics, "inference_cache_picker_picks_total", `reason="PREFIX_MATCH"`), metricSum(t, p.metrics, "inference_cache_picker_picks_total", `reason="LOAD"`))

	// 2. Three pickers, one killed.
	ps := []*pickerProc{p, f.startPicker("picker-1"), f.startPicker("picker-2")}
	const rate, dur = 200, 6 * time.Second
	var served [3]atomic.Int64
	var firstFailed, retryServed, lost atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	n := int(dur.Seconds() * rate)
	killAt := n / 3
	for i := 0; i < n; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / rate)))
		if i == killAt {
			ps[1].Kill()
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			k := i % 3
			if exchange(ps[k].conn, bodies[i%len(bodies)]) == nil {
				served[k].Add(1)
				return
			}
			firstFailed.Add(1)
			k2 := (k + 1) % 3
			if exchange(ps[k2].conn, bodies[i%len(bodies)]) == nil {
				retryServed.Add(1)
				served[k2].Add(1)
				return
			}
			lost.Add(1)
		}(i)
	}
	wg.Wait()
	t.Logf("THREE PICKERS at %d req/s for %v, picker-1 SIGKILLed at request %d of %d: served per picker %d / %d / %d; first attempt failed %d, served by a retry on the next picker %d, lost %d",
		rate, dur, killAt, n, served[0].Load(), served[1].Load(), served[2].Load(), firstFailed.Load(), retryServed.Load(), lost.Load())
	if lost.Load() != 0 {
		t.Errorf("%d requests lost that a retry did not serve", lost.Load())
	}
	_ = os.Stdout.Sync()
}

// phase drives bodies at rate for d over c; it returns the request
// phases' and the whole exchanges' latencies and the failures.
func phase(t *testing.T, c *grpc.ClientConn, bodies [][]byte, rate int, d time.Duration) ([]time.Duration, []time.Duration, int) {
	t.Helper()
	n := int(d.Seconds() * float64(rate))
	req, full := make([]time.Duration, n), make([]time.Duration, n)
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))))
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			fd := filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
			x, err := extproctest.Start(ctx, c, extproctest.Request{Mode: fd, ResponseMode: fd, Path: "/v1/chat/completions", Body: bodies[i%len(bodies)]})
			if err != nil || x.Pick.Destination == "" {
				errs.Add(1)
				return
			}
			req[i] = time.Since(t0)
			if _, err := x.Respond(extproctest.Response{ContentType: "application/json", Chunks: [][]byte{[]byte(`{"choices":[]}`)}}); err != nil {
				errs.Add(1)
				return
			}
			full[i] = time.Since(t0)
		}(i)
	}
	wg.Wait()
	return slices.DeleteFunc(req, func(d time.Duration) bool { return d == 0 }), slices.DeleteFunc(full, func(d time.Duration) bool { return d == 0 }), int(errs.Load())
}

// exchange is one whole exchange over c; nil when the picker answered
// with a destination and the stream ended cleanly.
func exchange(c *grpc.ClientConn, body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fd := filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	x, err := extproctest.Start(ctx, c, extproctest.Request{Mode: fd, ResponseMode: fd, Path: "/v1/chat/completions", Body: body})
	if err != nil {
		return err
	}
	if x.Pick.Destination == "" {
		return fmt.Errorf("no destination")
	}
	_, err = x.Respond(extproctest.Response{ContentType: "application/json", Chunks: [][]byte{[]byte(`{"choices":[]}`)}})
	return err
}

// quantile is the q-quantile of ds (sorted in place).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}
