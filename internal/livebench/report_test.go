package livebench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/loadgen"
)

// The targets compare the picker with round-robin: TTFT p50 at most 0.6×,
// engines' cache hit rate at least 2×, no failed request in any run.
func TestLiveTargets(t *testing.T) {
	run := func(name string, p50, hit float64, failed int) liveResult {
		return liveResult{Strategy: name, Summary: loadgen.Summary{Requests: 100, Failed: failed, TTFT: loadgen.Quantiles{P50: p50}, CacheHitRate: hit}}
	}
	met := func(ts []liveTarget) []bool {
		out := make([]bool, len(ts))
		for i, t := range ts {
			out[i] = t.Met
		}
		return out
	}
	for _, c := range []struct {
		rs   []liveResult
		want []bool
	}{
		{[]liveResult{run("picker", 600, 0.2, 0), run("round-robin", 1000, 0.1, 0)}, []bool{true, true, true}},
		{[]liveResult{run("picker", 601, 0.19, 0), run("round-robin", 1000, 0.1, 0), run("least-loaded", 900, 0.1, 1)}, []bool{false, false, false}},
	} {
		got := met(liveTargets(&liveReport{Strategies: c.rs}))
		if len(got) != 3 || got[0] != c.want[0] || got[1] != c.want[1] || got[2] != c.want[2] {
			t.Errorf("%+v: met %v, want %v", c.rs, got, c.want)
		}
	}
	if ts := liveTargets(&liveReport{Strategies: []liveResult{run("picker", 1, 1, 0)}}); ts != nil {
		t.Errorf("without round-robin: %v, want no targets", ts)
	}
}

// With the peers and 4 proxies: the picker against the best peer (the
// lowest p50 of dynamo, llm-d, sglang at 4 proxies: 0.8× at most) and
// against itself behind one proxy (1.1× at most).
func TestLiveTargets_PeersAndProxies(t *testing.T) {
	run := func(name string, gw int, p50 float64) liveResult {
		return liveResult{Strategy: name, Gateways: gw, Summary: loadgen.Summary{Requests: 100, TTFT: loadgen.Quantiles{P50: p50}, CacheHitRate: 0.5}}
	}
	rep := &liveReport{Gateways: 4, Strategies: []liveResult{run("picker", 4, 440), run("round-robin", 4, 1000), run("dynamo", 4, 560),
		run("llm-d", 4, 550), run("sglang", 4, 900), run("picker", 1, 400)}}
	ts := liveTargets(rep)
	want := map[string]bool{"TTFT p50 ≤ 0.8× the best peer's": true, "TTFT p50 with 4 proxies ≤ 1.1× with 1": true}
	found := 0
	for _, tg := range ts {
		if met, ok := want[tg.Name]; ok {
			found++
			if tg.Met != met {
				t.Errorf("%s: %s, met %v", tg.Name, tg.Measured, tg.Met)
			}
			if tg.Name == "TTFT p50 ≤ 0.8× the best peer's" && !strings.Contains(tg.Measured, "llm-d") {
				t.Errorf("best peer: %s, want llm-d (550 ms)", tg.Measured)
			}
		}
	}
	if found != 2 || len(ts) != 5 {
		t.Fatalf("targets %+v, want 5 with the peer and proxies ones", ts)
	}
	rep.Strategies[0].TTFT.P50 = 441 // 441/550 > 0.8; 441/400 > 1.1
	for _, tg := range liveTargets(rep) {
		if _, ok := want[tg.Name]; ok && tg.Met {
			t.Errorf("%s met at 441 ms: %s", tg.Name, tg.Measured)
		}
	}
}

// Each fault is measured from the requests around it: the leader's and
// the outage's failures in their windows, hits back after the return,
// and the engine's in-flight requests apart from the others.
func TestFaultReport(t *testing.T) {
	f := &faultRun{leaderName: "node2", leaderKill: 10 * time.Second, newLeader: 400 * time.Millisecond,
		allDown: 40 * time.Second, allBack: 50 * time.Second, backLeader: time.Second,
		engineKill: 80 * time.Second, engineName: "sim-2", proxyTerm: -1, healthFail: -1}
	ok := func(start float64, replica, reason string) loadgen.Result {
		return loadgen.Result{StartMs: start, E2EMs: 500, Replica: replica, Reason: reason}
	}
	rs := []loadgen.Result{
		ok(11000, "sim-1", "PREFIX_MATCH"), ok(12000, "sim-2", "LOAD"),
		ok(41000, "sim-1", "LOAD"), ok(45000, "sim-3", "LOAD"),
		ok(51000, "sim-1", "LOAD"), ok(53500, "sim-3", "PREFIX_MATCH"),
		// In flight on sim-2 when it was killed: failed.
		{StartMs: 79800, E2EMs: 300, Replica: "sim-2", ErrKind: loadgen.ErrStream},
		// Sent 300 ms after the kill: refused there, served by sim-1.
		{StartMs: 80300, E2EMs: 400, Replica: "sim-1", RetriedFrom: "sim-2"},
		ok(82000, "sim-3", "LOAD"),
	}
	rep := f.report(rs)
	if len(rep.Faults) != 3 {
		t.Fatalf("%d faults: %+v", len(rep.Faults), rep.Faults)
	}
	for i, want := range []string{
		"0 of 2 requests sent in the next 15s failed; a new leader after 0.4 s",
		"0 of 2 requests sent while down failed (picked by LOAD 2); 0 of 2 in the 15s after the return failed; leader elected 1.0 s after the start; first PREFIX_MATCH pick 3.5 s after",
		"1 requests in flight on it, 1 of them failed; 0 other requests failed; 1 requests sent after the kill reached it (refused and retried, or routed to it), the last 300 ms after",
	} {
		if !strings.Contains(rep.Faults[i].Measured, want) || !rep.Faults[i].Met {
			t.Errorf("fault %d: %q (met %v), want it to contain %q and be met", i, rep.Faults[i].Measured, rep.Faults[i].Met, want)
		}
	}
	// A failure outside the engine's in-flight requests, and hits back
	// late, are misses.
	rs = append(rs, loadgen.Result{StartMs: 81000, E2EMs: 10, Replica: "sim-1", ErrKind: loadgen.ErrStatus})
	rs[5].StartMs = 61000
	rep = f.report(rs)
	if rep.Faults[1].Met || rep.Faults[2].Met {
		t.Errorf("late hits and a stray failure still met: %+v", rep.Faults)
	}
	var b bytes.Buffer
	if err := rep.writeText(&b); err != nil || !strings.Contains(b.String(), "engine sim-2 SIGKILLed (left down): missed") {
		t.Errorf("text:\n%s", b.String())
	}

	// The proxy's SIGTERM: /health failed 50 ms after, and the requests
	// sent during the drain are all answered; one failure is a miss.
	f.proxyTerm, f.healthFail = 90*time.Second, 50*time.Millisecond
	drain := []loadgen.Result{ok(91000, "sim-1", "LOAD"), ok(95000, "sim-3", "LOAD")}
	rep = f.report(drain)
	last := rep.Faults[len(rep.Faults)-1]
	if !strings.Contains(last.Measured, "/health answered 503 50 ms after; 0 of 2 requests sent during the drain failed") || !last.Met {
		t.Errorf("drain: %+v, want met", last)
	}
	drain = append(drain, loadgen.Result{StartMs: 96000, E2EMs: 10, ErrKind: loadgen.ErrStatus})
	if last := f.report(drain).Faults; last[len(last)-1].Met {
		t.Errorf("a request failed during the drain, still met: %+v", last[len(last)-1])
	}
}
