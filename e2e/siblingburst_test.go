package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/openai"
)

// A sibling burst across gateways: 8 requests that share a new prefix of
// at least 4,000 tokens (an agent's fan-out, many users of one new system
// prompt) are sent within a few milliseconds through 4 proxies, two each,
// before any engine can report the prefix in a KV event. At least 7 of
// the 8 must land on one replica (issue "Gateways that decide as one":
// the sibling-burst target): the proxies converge without talking for a
// prefix no replica holds (contract's cold-prefix rule) and see each
// other's picks as they are made (provisional residency).
func TestSiblingBurst_FourProxies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster, 4 sim engines, the subscriber and 4 proxies")
	}
	// At debug level each proxy logs its decisions' cost terms: a failure
	// prints them in the log tails.
	f := startFleet(t, fleetOptions{sims: 4, proxyFlags: []string{"--log-level", "debug"}})
	args := []string{"--models-dir", f.modelsDir, "--log-level", "debug"}
	for _, p := range f.c.procs {
		args = append(args, "--addr", p.grpc)
	}
	for _, s := range f.sims {
		args = append(args, "--backend", s.id+"="+s.url)
	}
	proxies := []*httpProc{f.proxy}
	for i := 1; i < 4; i++ {
		proxies = append(proxies, f.startProxy(fmt.Sprintf("proxy-%d", i), nil, args...))
	}
	// Every proxy must see every engine healthy before the burst: a
	// proxy still probing its backends would pick among fewer.
	for _, p := range proxies {
		waitBackendsUp(t, p, len(f.sims), 30*time.Second)
	}

	system := burstPrefix(time.Now().UnixNano())
	bodies := make([]string, 8)
	for i := range bodies {
		bodies[i] = chatBody(system, fmt.Sprintf("Sibling task %d: answer in one word.", i), 1, false)
	}
	req, err := openai.DecodeChat([]byte(bodies[0]))
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.prompts.Tokens(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.TokenIDs) < 4000 {
		t.Fatalf("the shared prompt is %d tokens, want at least 4,000", len(p.TokenIDs))
	}

	type answer struct {
		replica, reason string
		sent            time.Time
		err             error
	}
	answers := make([]answer, len(bodies))
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	// Warm one connection per proxy so the burst's spread is the
	// requests', not the dials'.
	for _, px := range proxies {
		resp, err := hc.Get(px.url + "/health")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i, body := range bodies {
		px := proxies[i%len(proxies)]
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			r, err := http.NewRequest(http.MethodPost, px.url+"/v1/chat/completions", strings.NewReader(body))
			if err != nil {
				answers[i].err = err
				ready.Done()
				return
			}
			r.Header.Set("Content-Type", "application/json")
			ready.Done()
			<-start
			answers[i].sent = time.Now()
			resp, err := hc.Do(r)
			if err != nil {
				answers[i].err = err
				return
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				answers[i].err = fmt.Errorf("status %d: %s", resp.StatusCode, raw)
				return
			}
			answers[i].replica = resp.Header.Get("x-inference-cache-replica")
			answers[i].reason = resp.Header.Get("x-inference-cache-reason")
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()

	first, last := answers[0].sent, answers[0].sent
	byReplica := map[string]int{}
	for i, a := range answers {
		if a.err != nil {
			t.Fatalf("request %d: %v", i, a.err)
		}
		if a.sent.Before(first) {
			first = a.sent
		}
		if a.sent.After(last) {
			last = a.sent
		}
		byReplica[a.replica]++
		t.Logf("request %d via proxy %d: %s (%s)", i, i%len(proxies), a.replica, a.reason)
	}
	t.Logf("sent within %v; per replica %v", last.Sub(first), byReplica)
	most := 0
	for _, n := range byReplica {
		most = max(most, n)
	}
	if most < 7 {
		t.Errorf("the 8 siblings landed %v: at most %d on one replica, want at least 7", byReplica, most)
	}

	// The proxies took their turns at one node, the first of the list by
	// address (contract §5.13), and their picks' pushes, which carry
	// their load reports, settled them (a lookup whose wait ran out on a
	// loaded machine took none; one that timed out moves that proxy to
	// the next node for a second, so the first node need only hold most
	// of them).
	turns := func(outcome string) (sum, most float64) {
		for _, p := range f.c.procs {
			n := metricSum(t, "http://"+p.http+"/metrics", "inferencecache_turns_total", `outcome="`+outcome+`"`)
			sum, most = sum+n, max(most, n)
		}
		return sum, most
	}
	poll.Eventually(t, 10*time.Second, 50*time.Millisecond, func() (bool, string) {
		taken, atFirst := turns("taken")
		settled, _ := turns("settled")
		lapsed, _ := turns("lapsed")
		return taken >= 2 && atFirst*2 > taken && settled >= 1 && settled+lapsed == taken,
			fmt.Sprintf("turns: %v taken (%v at one node), %v settled, %v lapsed; want at least 2, most at one node, settled by the pushes and reports", taken, atFirst, settled, lapsed)
	})
}

// burstPrefix is a system prompt of more than 4,000 tokens that no
// engine has seen: nonce makes it new for every run.
func burstPrefix(nonce int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Session %d. ", nonce)
	for i := 0; b.Len() < 22000; i++ {
		fmt.Fprintf(&b, "Rule %d of the shared playbook: keep the attention keys and values of prompt %d warm. ", i, i*7+int(nonce%97))
	}
	return b.String()
}

// waitBackendsUp waits until proxy p reports n backends up on its
// /metrics (inference_cache_proxy_backend_up).
func waitBackendsUp(t *testing.T, p *httpProc, n int, limit time.Duration) {
	t.Helper()
	poll.Eventually(t, limit, 50*time.Millisecond, func() (bool, string) {
		up := metricSum(t, p.url+"/metrics", "inference_cache_proxy_backend_up")
		return int(up) >= n, fmt.Sprintf("%s: %v of %d backends up", p.url, up, n)
	})
}
