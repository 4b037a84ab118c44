package client

import (
	"math"
	"slices"
	"sync"
	"testing"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// The expected values below come from Picker's documented cost model:
//
//	cost(r)   = queued(r) + others(r) + uncached(r) − CacheAffinity × cached(r)
//	others(r) = (max(0, waiting(r) − own_waiting(r))
//	            + RunningWeight × max(0, running(r) − own_in_flight(r))) × tokens per request
//	own_waiting(r) = this picker's requests on r before their first token, beyond the one prefilling

// expectedCost is the documented cost of one candidate.
func expectedCost(cfg PickerConfig, prompt, cached int, queued float64, waiting, running, ownPrefilling, ownInFlight int, perReq float64) (others, cost float64) {
	ownWaiting := max(0, ownPrefilling-1)
	ownRunning := ownInFlight - ownWaiting
	others = (float64(max(0, waiting-ownWaiting)) + cfg.RunningWeight*float64(max(0, running-ownRunning))) * perReq
	return others, queued + others + float64(prompt-cached) - cfg.CacheAffinity*float64(cached)
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

func prefixHint(id string, matched, waiting, running uint32) *pb.ReplicaHint {
	return &pb.ReplicaHint{ReplicaId: id, MatchedTokens: matched, WaitingRequests: waiting, RunningRequests: running}
}

// A long cached prefix on a busy replica against an idle cold one: the
// warm replica wins while its queue costs less than the prefill it saves
// plus the locality credit, and loses past that.
func TestPicker_CachedPrefixAgainstQueue(t *testing.T) {
	const prompt, cached, perReq = 8192, 6144, 4096
	for _, tc := range []struct {
		name             string
		affinity         float64
		waiting, running uint32 // replica "warm"'s counts, as its hint reports them
		want             string
	}{
		// others = (2 + 0.3 × (3 − 1)) × 4096 = 10649.6; warm 3000 +
		// 10649.6 + 2048 = 15697.6 against cold 8192.
		{"no affinity, busy: the cold replica wins", 0, 2, 3, "cold"},
		// Only this picker's request runs there: 3000 + 0 + 2048 = 5048.
		{"no affinity, only our request: the warm replica wins", 0, 0, 1, "warm"},
		// 15697.6 − 4 × 6144 = −8878.4.
		{"affinity 4, busy: the warm replica wins", 4, 2, 3, "warm"},
		// others = (10 + 0.6) × 4096 = 43417.6; 3000 + 43417.6 + 2048 −
		// 24576 = 23889.6 against 8192.
		{"affinity 4, very busy: the cold replica wins", 4, 10, 3, "cold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := PickerConfig{TokensPerWaitingRequest: perReq, CacheAffinity: tc.affinity, RunningWeight: 0.3, Seed: 1}
			p := NewPicker(cfg)
			// This picker already sent one request of 3000 uncached tokens to
			// warm, before its first token.
			p.StartOn("warm", 3000)
			resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH,
				Replicas: []*pb.ReplicaHint{prefixHint("warm", cached, tc.waiting, tc.running)}}
			d := p.Pick(resp, []string{"warm", "cold"}, prompt)

			wOthers, wCost := expectedCost(cfg, prompt, cached, 3000, int(tc.waiting), int(tc.running), 1, 1, perReq)
			_, cCost := expectedCost(cfg, prompt, 0, 0, 0, 0, 0, 0, perReq)
			w, c := d.Costs[0], d.Costs[1]
			if w.Replica != "warm" || w.Reason != pb.ReasonCode_PREFIX_MATCH || w.CachedTokens != cached || w.UncachedTokens != prompt-cached ||
				w.QueuedTokens != 3000 || !near(w.OthersTokens, wOthers) || w.InFlight != 1 ||
				w.ReportedWaiting != tc.waiting || w.ReportedRunning != tc.running || !near(w.Cost, wCost) {
				t.Errorf("warm terms %+v, want cached %d, queued 3000, others %v, in flight 1, cost %v", w, cached, wOthers, wCost)
			}
			if c.Replica != "cold" || c.Reason != pb.ReasonCode_NO_HINT || c.CachedTokens != 0 || c.UncachedTokens != prompt ||
				c.QueuedTokens != 0 || c.OthersTokens != 0 || c.InFlight != 0 || !near(c.Cost, cCost) {
				t.Errorf("cold terms %+v, want no hint, cost %v", c, cCost)
			}
			if d.Replica != tc.want || d.Costs[d.Index].Replica != tc.want || d.PromptTokens != prompt {
				t.Errorf("picked %q (index %d), want %q (costs %v, %v)", d.Replica, d.Index, tc.want, wCost, cCost)
			}
		})
	}
}

// Start queues the chosen candidate's uncached tokens; FirstToken removes
// them and the request from the prefilling ones; Done from those in
// flight (and does FirstToken's part when it was not called). Each call
// counts once. The state is read back through Pick's terms: QueuedTokens,
// InFlight, and OthersTokens, where own_waiting and own_running offset
// the engine's reported counts.
func TestPicker_StartFirstTokenDoneMoveTheLoad(t *testing.T) {
	cfg := PickerConfig{TokensPerWaitingRequest: 1000, RunningWeight: 0.5, Seed: 1}
	p := NewPicker(cfg)
	// The engine reports 5 waiting and 4 running (TENANT_HOT: no cached
	// tokens, but the counts are carried).
	resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_TENANT_HOT, Replicas: []*pb.ReplicaHint{prefixHint("a", 0, 5, 4)}}
	check := func(step string, queued float64, prefilling, inflight int) {
		t.Helper()
		d := p.Pick(resp, []string{"a"}, 100)
		c := d.Costs[0]
		others, cost := expectedCost(cfg, 100, 0, queued, 5, 4, prefilling, inflight, 1000)
		if c.QueuedTokens != queued || c.InFlight != inflight || !near(c.OthersTokens, others) || !near(c.Cost, cost) {
			t.Fatalf("%s: queued %v, in flight %d, others %v, cost %v; want %v, %d, %v, %v",
				step, c.QueuedTokens, c.InFlight, c.OthersTokens, c.Cost, queued, inflight, others, cost)
		}
	}
	check("nothing sent", 0, 0, 0)
	r1, r2, r3 := p.StartOn("a", 300), p.StartOn("a", 500), p.StartOn("a", 700)
	// own waiting 2, own running 3 − 2 = 1:
	// others = (5 − 2 + 0.5 × (4 − 1)) × 1000 = 4500.
	check("three started", 1500, 3, 3)
	r1.FirstToken()
	check("r1 first token", 1200, 2, 3)
	r1.FirstToken()
	check("r1 first token again", 1200, 2, 3)
	r1.Done()
	check("r1 done", 1200, 2, 2)
	r1.Done()
	check("r1 done again", 1200, 2, 2)
	// Done without FirstToken (a failed request) releases both.
	r2.Done()
	check("r2 done before its first token", 700, 1, 1)
	r2.FirstToken()
	check("r2 first token after done", 700, 1, 1)
	r3.FirstToken()
	r3.Done()
	check("all done", 0, 0, 0)

	// Start of a Decision queues the chosen candidate's uncached tokens:
	// 4096 − 1024 cached.
	hint := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, Replicas: []*pb.ReplicaHint{prefixHint("b", 1024, 0, 0)}}
	d := p.Pick(hint, []string{"b"}, 4096)
	r := p.Start(&d)
	if d2 := p.Pick(nil, []string{"b"}, 1); d2.Costs[0].QueuedTokens != 3072 || d2.Costs[0].InFlight != 1 {
		t.Fatalf("after Start: %+v, want 3072 queued, 1 in flight", d2.Costs[0])
	}
	r.Done()
	// Start of an empty Decision does nothing, and its calls neither.
	e := p.Start(&Decision{Index: -1})
	e.FirstToken()
	e.Done()
	if d2 := p.Pick(nil, []string{"b"}, 1); d2.Costs[0].QueuedTokens != 0 || d2.Costs[0].InFlight != 0 {
		t.Fatalf("after Done: %+v, want no load", d2.Costs[0])
	}
}

// The engine's reported waiting and running requests enter OthersTokens
// beyond this picker's own, times the tokens per request: the configured
// value, or the mean uncached tokens of the requests this picker started
// (DefaultTokensPerWaitingRequest before the first).
func TestPicker_ReportedCountsEnterOthersTokens(t *testing.T) {
	for _, tc := range []struct {
		name             string
		perReqConfigured float64
		started          []int // uncached tokens of requests started on "x" (before their first token)
		waiting, running uint32
		perReq           float64 // the tokens per request, by hand
		ownPrefilling    int
	}{
		{"waiting only, default tokens per request", 0, nil, 3, 0, 2048, 0},
		{"running only: RunningWeight of each", 0, nil, 0, 10, 2048, 0},
		{"no counts in the hint", 0, nil, 0, 0, 2048, 0},
		// Mean of 1000 and 3000; own waiting = 2 − 1 = 1, own running
		// 2 − 1 = 1: (4 − 1 + 0.3 × (5 − 1)) × 2000.
		{"mean of the requests sent", 0, []int{1000, 3000}, 4, 5, 2000, 2},
		// Own counts cover the reported ones: nothing from others
		// (own waiting 2 > 1 reported, own running 3 − 2 = 1 = 1 reported).
		{"own requests cover the reported ones", 500, []int{10, 10, 10}, 1, 1, 500, 3},
		// A negative uncached count is taken as 0 and still counts as a
		// request for the mean: (0 + 600) / 2.
		{"negative uncached counted as 0", 0, []int{-50, 600}, 1, 0, 300, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := PickerConfig{TokensPerWaitingRequest: tc.perReqConfigured, RunningWeight: 0.3, Seed: 1}
			p := NewPicker(cfg)
			queued := 0.0
			for _, u := range tc.started {
				p.StartOn("x", u)
				queued += float64(max(0, u))
			}
			resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_AFFINITY_HINT,
				Replicas: []*pb.ReplicaHint{prefixHint("x", 0, tc.waiting, tc.running)}}
			c := p.Pick(resp, []string{"x"}, 1000).Costs[0]
			others, cost := expectedCost(cfg, 1000, 0, queued, int(tc.waiting), int(tc.running), tc.ownPrefilling, len(tc.started), tc.perReq)
			if c.Reason != pb.ReasonCode_AFFINITY_HINT || !near(c.OthersTokens, others) || !near(c.Cost, cost) {
				t.Fatalf("terms %+v, want others %v, cost %v", c, others, cost)
			}
		})
	}
}

// Ties between idle replicas are broken at random: the same for a fixed
// Seed, different across seeds, spread over every tied replica.
func TestPicker_TiesAtRandomDeterministicPerSeed(t *testing.T) {
	cands := []string{"r0", "r1", "r2", "r3"}
	picks := func(seed uint64, n int) []int {
		p := NewPicker(PickerConfig{RunningWeight: 0.3, Seed: seed})
		out := make([]int, n)
		for i := range out {
			out[i] = p.Pick(nil, cands, 1000).Index
		}
		return out
	}
	a, b := picks(42, 64), picks(42, 64)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 42 gave %v then %v", a, b)
	}
	if c := picks(43, 64); slices.Equal(a, c) {
		t.Fatalf("seeds 42 and 43 made the same 64 choices %v", a)
	}
	counts := make([]int, len(cands))
	for _, i := range a {
		counts[i]++
	}
	first := map[int]bool{}
	for seed := uint64(1); seed <= 32; seed++ {
		first[picks(seed, 1)[0]] = true
	}
	for i, n := range counts {
		if n == 0 {
			t.Fatalf("replica %d never chosen in 64 tied picks (%v)", i, counts)
		}
	}
	if len(first) < 3 {
		t.Fatalf("the first pick of 32 seeds covers %v only: gateways with their own seeds would herd", first)
	}
}

// Equal costs are not random when another rule separates them: fewer in
// flight first (the engine's running count when larger than the
// picker's), then the cluster's order among PREFIX_MATCH hints, then the
// hint's kind.
func TestPicker_TieBreaksBeforeRandom(t *testing.T) {
	for _, tc := range []struct {
		name string
		resp *pb.LookupRouteResponse
		want string
	}{
		// RunningWeight 0: running requests add no cost, only the tie-break.
		{"fewer running", &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_AFFINITY_HINT,
			Replicas: []*pb.ReplicaHint{prefixHint("a", 0, 0, 2), prefixHint("b", 0, 0, 0)}}, "b"},
		// Same matched tokens, same cost: the cluster's first.
		{"the cluster's order among PREFIX_MATCH hints", &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH,
			Replicas: []*pb.ReplicaHint{prefixHint("b", 512, 0, 0), prefixHint("a", 512, 0, 0)}}, "b"},
		// An AFFINITY_HINT pick before a replica the cluster did not name.
		{"a named replica before the rest", &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_AFFINITY_HINT,
			Replicas: []*pb.ReplicaHint{prefixHint("b", 0, 0, 0)}}, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 20; seed++ {
				p := NewPicker(PickerConfig{Seed: seed})
				if d := p.Pick(tc.resp, []string{"a", "b"}, 1024); d.Replica != tc.want {
					t.Fatalf("seed %d: picked %q, want %q (%+v)", seed, d.Replica, tc.want, d.Costs)
				}
			}
		})
	}
}

// Hints naming replicas that are not candidates are ignored; no
// candidates gives an empty Decision.
func TestPicker_NonCandidateHintsAndNoCandidates(t *testing.T) {
	p := NewPicker(PickerConfig{CacheAffinity: 4, RunningWeight: 0.3, Seed: 1})
	resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH,
		Replicas: []*pb.ReplicaHint{prefixHint("gone", 4096, 0, 0), prefixHint("b", 1024, 0, 0)}}
	d := p.Pick(resp, []string{"a", "b"}, 4096)
	if len(d.Costs) != 2 || d.Costs[0].Replica != "a" || d.Costs[0].Reason != pb.ReasonCode_NO_HINT || d.Costs[0].CachedTokens != 0 {
		t.Fatalf("costs %+v: want a and b only, a without a hint", d.Costs)
	}
	// b: 3072 − 4 × 1024 = −1024 against a's 4096.
	if d.Replica != "b" || d.Index != 1 || !near(d.Costs[1].Cost, -1024) {
		t.Fatalf("picked %q (%d), b's cost %v; want b at −1024", d.Replica, d.Index, d.Costs[1].Cost)
	}
	// Matched tokens beyond the prompt count as the prompt.
	over := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, Replicas: []*pb.ReplicaHint{prefixHint("a", 9999, 0, 0)}}
	if c := p.Pick(over, []string{"a"}, 100).Costs[0]; c.CachedTokens != 100 || c.UncachedTokens != 0 {
		t.Fatalf("terms %+v, want 100 cached, 0 uncached", c)
	}
	for _, cands := range [][]string{nil, {}} {
		d := p.Pick(resp, cands, 4096)
		if d.Index != -1 || d.Replica != "" || len(d.Costs) != 0 || d.PromptTokens != 4096 {
			t.Fatalf("no candidates: %+v, want index −1", d)
		}
	}
}

// The picker is safe for concurrent use: gateways pick and record from
// many goroutines (run with -race), and when every request is done no
// load is left.
func TestPicker_ConcurrentUse(t *testing.T) {
	p := NewPicker(DefaultPickerConfig())
	cands := []string{"a", "b", "c"}
	resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH,
		Replicas: []*pb.ReplicaHint{prefixHint("a", 512, 1, 2), prefixHint("c", 1024, 0, 1)}}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				d := p.Pick(resp, cands, 2048+i)
				r := p.Start(&d)
				if i%3 != 0 {
					r.FirstToken()
				}
				r.Done()
			}
		}()
	}
	wg.Wait()
	for _, c := range p.Pick(nil, cands, 1).Costs {
		if c.QueuedTokens != 0 || c.InFlight != 0 {
			t.Fatalf("%s: %+v left after every request ended", c.Replica, c)
		}
	}
}

// A replica without a hint takes the engine's counts from the response's
// loads (LookupRouteRequest.include_load); a replica with a hint keeps
// the hint's; loads naming non-candidates are ignored.
func TestPicker_LoadsCountForReplicasWithoutAHint(t *testing.T) {
	cfg := PickerConfig{TokensPerWaitingRequest: 1000, RunningWeight: 0.5, Seed: 1}
	p := NewPicker(cfg)
	resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH,
		Replicas: []*pb.ReplicaHint{prefixHint("a", 1024, 1, 0)},
		Loads: []*pb.ReplicaLoad{
			{ReplicaId: "a", WaitingRequests: 9, RunningRequests: 9},
			{ReplicaId: "b", WaitingRequests: 2, RunningRequests: 4},
			{ReplicaId: "gone", WaitingRequests: 50},
		}}
	d := p.Pick(resp, []string{"a", "b", "c"}, 2048)
	for i, want := range []struct {
		waiting, running uint32
		cached           int
	}{{1, 0, 1024}, {2, 4, 0}, {0, 0, 0}} {
		c := d.Costs[i]
		others, cost := expectedCost(cfg, 2048, want.cached, 0, int(want.waiting), int(want.running), 0, 0, 1000)
		if c.ReportedWaiting != want.waiting || c.ReportedRunning != want.running || !near(c.OthersTokens, others) || !near(c.Cost, cost) {
			t.Errorf("%s: %+v, want reported %d/%d, others %v, cost %v", c.Replica, c, want.waiting, want.running, others, cost)
		}
	}
	// a: 1000 + 1024 = 2024; b: (2 + 0.5 × 4) × 1000 + 2048 = 6048; c: 2048.
	if d.Replica != "a" || len(d.Costs) != 3 {
		t.Fatalf("picked %q from %d costs, want a from 3", d.Replica, len(d.Costs))
	}
}
