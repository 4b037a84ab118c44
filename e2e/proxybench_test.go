package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	proxyBench     = flag.Bool("proxy-bench", false, "run TestProxyBench: the proxy's added latency at a fixed rate and its CPU per request, over real processes")
	proxyBenchRate = flag.Int("proxy-bench-rate", 200, "TestProxyBench: requests per second through the proxy (and as many straight to the engine)")
	proxyBenchFor  = flag.Duration("proxy-bench-duration", 20*time.Second, "TestProxyBench: how long the fixed-rate phase runs")
)

// TestProxyBench measures the proxy over real processes (a 3-node
// cluster, the subscriber, one sim engine answering at once, the proxy
// with lookups on) and logs the figures of BENCHMARKS.md:
//
//  1. added latency: the same chat requests sent at a fixed rate both
//     straight to the engine and through the proxy, interleaved in one
//     run; the latency quantiles of each and their differences;
//  2. CPU per request: 4,000-token chat requests sent one at a time in
//     windows of 100, the proxy process's CPU time (/proc/<pid>/stat)
//     per request in each window, for prompts of new words and for one
//     conversation whose last turn changes;
//  3. one core: the proxy restarted with GOMAXPROCS=1 and driven by 8
//     concurrent clients: requests/s and the proxy's CPU use.
//
// It runs only with -proxy-bench (go test ./e2e -run TestProxyBench
// -proxy-bench -v).
func TestProxyBench(t *testing.T) {
	if !*proxyBench {
		t.Skip("a benchmark: run with -proxy-bench")
	}
	if testing.Short() {
		t.Skip("starts a cluster, a sim engine, the subscriber and the proxy")
	}
	f := startFleet(t, fleetOptions{sims: 1, simFlags: []string{"--prefill-tps", "1e9", "--decode-tps", "1e6", "--kv-blocks", "65536"}})
	engine := f.sims[0].url + "/v1/chat/completions"
	proxied := f.proxy.url + "/v1/chat/completions"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}}

	// 1. Added latency. 32 system prompts of ~600 tokens, each request a
	// new user turn: the mix of hits and misses of a chat service.
	r := rand.New(rand.NewPCG(1, 2))
	bodies := make([]string, 4096)
	for i := range bodies {
		bodies[i] = chatBody(longSystem(fmt.Sprintf("topic-%d", r.IntN(32)))+strings.Repeat("Answer in detail. ", 20),
			fmt.Sprintf("Question %d about caching?", i), 1, false)
	}
	for i := 0; i < 200; i++ { // warm both paths: connections, tokenizer cache, index
		send(t, hc, engine, bodies[i])
		send(t, hc, proxied, bodies[i])
	}
	direct, viaProxy := fixedRate(t, hc, engine, proxied, bodies, *proxyBenchRate, *proxyBenchFor)
	dq, pq := quantiles(direct), quantiles(viaProxy)
	t.Logf("added latency at %d requests/s through the proxy (and %d/s straight to the engine), %v, %d + %d requests:",
		*proxyBenchRate, *proxyBenchRate, *proxyBenchFor, len(direct), len(viaProxy))
	for _, q := range []string{"p50", "p90", "p99"} {
		t.Logf("  %s: engine %7.3f ms, proxy %7.3f ms, added %7.3f ms", q, dq[q], pq[q], pq[q]-dq[q])
	}

	// 2. CPU per request, 4,000-token chat prompts: words all new to the
	// tokenizer's cache (the worst case), and one long conversation whose
	// last turn changes (the common case of a chat service).
	big := make([]string, 64)
	typical := make([]string, 64)
	for i := range big {
		big[i] = chat4kBody(i+1, "")
		typical[i] = chat4kBody(0, fmt.Sprintf("Question %d: and then?", i))
	}
	for _, v := range []struct {
		name   string
		bodies []string
	}{{"distinct words", big}, {"one conversation, new last turn", typical}} {
		for i := 0; i < 64; i++ {
			send(t, hc, proxied, v.bodies[i])
		}
		var perReq []float64
		for w := 0; w < 10; w++ {
			before := procCPU(t, f.proxy.Pid())
			for i := 0; i < 100; i++ {
				send(t, hc, proxied, v.bodies[(w*100+i)%len(v.bodies)])
			}
			perReq = append(perReq, (procCPU(t, f.proxy.Pid())-before).Seconds()*1000/100)
		}
		slices.Sort(perReq)
		t.Logf("proxy CPU per 4,000-token chat request, %s (10 windows of 100): median %.3f ms, min %.3f, max %.3f",
			v.name, perReq[len(perReq)/2], perReq[0], perReq[len(perReq)-1])
	}

	// 3. One core.
	f.proxy.Stop(10 * time.Second)
	args := []string{"--models-dir", f.modelsDir, "--backend", f.sims[0].id + "=" + f.sims[0].url}
	for _, p := range f.c.procs {
		args = append(args, "--addr", p.grpc)
	}
	one := f.startProxy("proxy-1core", []string{"GOMAXPROCS=1"}, args...)
	oneURL := one.url + "/v1/chat/completions"
	for i := 0; i < 64; i++ {
		send(t, hc, oneURL, big[i])
	}
	var done atomic.Int64
	stop := time.Now().Add(10 * time.Second)
	cpu0, wall0 := procCPU(t, one.Pid()), time.Now()
	var wg sync.WaitGroup
	for c := 0; c < 8; c++ {
		wg.Go(func() {
			for i := c; time.Now().Before(stop); i += 8 {
				send(t, hc, oneURL, big[i%len(big)])
				done.Add(1)
			}
		})
	}
	wg.Wait()
	wall, cpu := time.Since(wall0), procCPU(t, one.Pid())-cpu0
	t.Logf("one core (GOMAXPROCS=1, 8 clients, 4,000-token chats): %.0f requests/s, proxy CPU %.2f cores, %.3f ms CPU per request",
		float64(done.Load())/wall.Seconds(), cpu.Seconds()/wall.Seconds(), cpu.Seconds()*1000/float64(done.Load()))
}

// chat4kBody is a chat request of about 4,000 Qwen3 tokens (a long system
// prompt and eight turns) whose words vary with seed (0: the same words
// every time), with a last user turn when last is not empty.
func chat4kBody(seed int, last string) string {
	r := rand.New(rand.NewPCG(uint64(seed), 11))
	words := strings.Fields("The prefix cache keeps the attention keys and values of a prompt's leading blocks, so a request that shares them skips their prefill.")
	sentence := func() string {
		w := make([]string, len(words))
		for i, x := range words {
			w[i] = x
			if seed != 0 {
				w[i] += string([]rune{'a' + rune(r.IntN(26)), 'a' + rune(r.IntN(26))})
			}
		}
		return strings.Join(w, " ") + " "
	}
	var sys strings.Builder
	for range 96 {
		sys.WriteString(sentence())
	}
	msgs := []map[string]any{{"role": "system", "content": sys.String()}}
	for i := range 8 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		var turn strings.Builder
		for range 6 {
			turn.WriteString(sentence())
		}
		msgs = append(msgs, map[string]any{"role": role, "content": "Turn " + strconv.Itoa(i) + ". " + turn.String()})
	}
	if last != "" {
		msgs = append(msgs, map[string]any{"role": "user", "content": last})
	}
	b, _ := json.Marshal(map[string]any{"model": fleetModel, "max_tokens": 1, "messages": msgs})
	return string(b)
}

// send posts body to url and reads the whole answer, failing on a
// status other than 200.
func send(t *testing.T, hc *http.Client, url, body string) {
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("%s: status %d", url, resp.StatusCode)
	}
}

// fixedRate sends rate requests/s to each of a and b for d, open loop
// (each at its scheduled time, whatever the earlier ones do), a and b
// alternating with the same bodies, and returns each one's latencies.
func fixedRate(t *testing.T, hc *http.Client, a, b string, bodies []string, rate int, d time.Duration) (la, lb []time.Duration) {
	n := int(d.Seconds() * float64(rate))
	gap := time.Second / time.Duration(2*rate)
	lat := [2][]time.Duration{make([]time.Duration, n), make([]time.Duration, n)}
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < 2*n; i++ {
		at := start.Add(time.Duration(i) * gap)
		time.Sleep(time.Until(at))
		which, k := i%2, i/2
		url := a
		if which == 1 {
			url = b
		}
		wg.Go(func() {
			t0 := time.Now()
			send(t, hc, url, bodies[k%len(bodies)])
			lat[which][k] = time.Since(t0)
		})
	}
	wg.Wait()
	return lat[0], lat[1]
}

// quantiles are the p50, p90 and p99 of ls, in milliseconds.
func quantiles(ls []time.Duration) map[string]float64 {
	s := slices.Clone(ls)
	slices.Sort(s)
	q := func(p float64) float64 { return float64(s[int(p*float64(len(s)-1))].Microseconds()) / 1000 }
	return map[string]float64{"p50": q(0.50), "p90": q(0.90), "p99": q(0.99)}
}

// procCPU is the user + system CPU time of process pid so far.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name (in parentheses, which may hold
	// spaces): utime and stime are the 12th and 13th.
	rest := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(rest[11], 10, 64)
	st, _ := strconv.ParseInt(rest[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / ticks
}
