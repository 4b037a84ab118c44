package bench

import (
	"context"
	"math"
	"testing"
	"time"
)

// req is a request of isl prompt tokens whose blocks are ids.
func req(isl int, ids ...uint64) *Request {
	return &Request{InputLength: isl, HashIDs: ids}
}

// ids returns the block ids from, from+1, …, from+n−1.
func ids(from uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = from + uint64(i)
	}
	return out
}

// storedEvent is a released KV event storing blocks, none evicted.
func storedEvent(blocks ...uint64) *KVEvent {
	return &KVEvent{Blocks: blocks, Adm: Admission{Stored: []BlockRun{{Start: 0, End: len(blocks)}}}}
}

// viewHolding is an indexer view of n engines where engine e holds the
// blocks held[e] (released events).
func viewHolding(n int, held map[int][]uint64) *IndexerView {
	v := NewIndexerView(n)
	for e, b := range held {
		v.Apply(e, storedEvent(b...))
	}
	return v
}

func closeTo(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

// earlier is a request routed to engine e before the one under test, with
// its first and last tokens at first and done.
type earlier struct {
	q           *Request
	e           int
	first, done float64
}

// Dynamo's logit in the bench, worked by hand at block size 512:
// (active prefill tokens + ISL − overlap × 512) / 512 + (active distinct
// blocks + the request's blocks not among them). Engine 0's indexer view
// holds blocks 1..8 of a 9-block request of 4608 tokens; engine 1 holds
// nothing. A long cold request (10240 tokens, blocks 100..119) runs on
// engine 0 with its first token at 10 s and its end at 20 s.
func TestDynamo_LogitReleasesPrefillAtFirstTokenAndBlocksAtEnd(t *testing.T) {
	q := req(4608, ids(1, 9)...)
	long := earlier{req(10240, ids(100, 20)...), 0, 10, 20}
	for _, tc := range []struct {
		name   string
		at     float64
		logits [2]float64
		want   int
	}{
		// Engine 0: (10240 + 512)/512 + (20 + 9) = 50; engine 1: 9 + 9.
		{"the busy engine's cached prefix loses", 1, [2]float64{50, 18}, 1},
		// Prefill released: 512/512 + 29 = 30.
		{"prefill released at the first token", 10, [2]float64{30, 18}, 1},
		// Blocks released: 1 + 9 = 10.
		{"blocks released at the end", 20, [2]float64{10, 18}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newDynamo(2, viewHolding(2, map[int][]uint64{0: ids(1, 8)}), 1)
			r.Route(context.Background(), 0, long.q, 0)
			r.Routed(long.q, long.e, &Served{FirstTokenAt: long.first, DoneAt: long.done})
			got := r.Route(context.Background(), 1, q, tc.at)
			if !closeTo(r.logits[0], tc.logits[0]) || !closeTo(r.logits[1], tc.logits[1]) || got != tc.want {
				t.Fatalf("logits %v → %d; want %v → %d", r.logits, got, tc.logits, tc.want)
			}
		})
	}
}

// A request sharing blocks with an active one adds only its new blocks
// there; its prefill counts only its uncached tokens, as the indexer saw
// them when it was routed.
func TestDynamo_SharedActiveBlocksCountOnce(t *testing.T) {
	r := newDynamo(2, viewHolding(2, map[int][]uint64{0: ids(1, 4)}), 1)
	// 2560 tokens, 2048 of them held by engine 0: 512 new tokens there.
	a := req(2560, ids(1, 5)...)
	r.Route(context.Background(), 0, a, 0)
	r.Routed(a, 0, &Served{FirstTokenAt: 5, DoneAt: 9})
	// b shares a's 5 blocks and adds one: engine 0 (overlap 4): (512 +
	// 3072 − 2048)/512 + (5 + 1) = 9; engine 1: 3072/512 + 6 = 12.
	b := req(3072, ids(1, 6)...)
	if got := r.Route(context.Background(), 1, b, 1); got != 0 || !closeTo(r.logits[0], 9) || !closeTo(r.logits[1], 12) {
		t.Fatalf("logits %v → %d, want [9 12] → 0", r.logits, got)
	}
}

// Equal logits go to the smaller indexer tree; equal trees at random.
func TestDynamo_TiesBySmallerTreeThenRandom(t *testing.T) {
	r := newDynamo(3, viewHolding(3, map[int][]uint64{1: ids(500, 5)}), 7)
	seen := map[int]int{}
	for i := 0; i < 50; i++ {
		seen[r.Route(context.Background(), i, req(512, 1), 0)]++
	}
	if seen[1] != 0 {
		t.Fatalf("choices %v: engine 1's tree is the largest, it never wins a tie", seen)
	}
	r = newDynamo(3, NewIndexerView(3), 7)
	seen = map[int]int{}
	for i := 0; i < 200; i++ {
		seen[r.Route(context.Background(), i, req(512, 1), 0)]++
	}
	if len(seen) != 3 {
		t.Fatalf("choices %v: equal trees, want all three engines", seen)
	}
}

// llm-d's default profile in the bench: 3·prefix + 2·queue + 2·(1 − KV
// usage), the prefix from what this router sent (capped at 8 blocks of
// 512 = 256 of 16), the queue and usage from the engines' scrapes.
func TestLLMD_ScoresItsOwnRoutingHistory(t *testing.T) {
	cfg := FleetConfig{Engines: 3, CacheBlocks: 100}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	f := NewFleet(cfg, "m", "")
	set := func(waiting [3]int, usage [3]float64) {
		for i, e := range f.Engines {
			e.snap = MetricsSnapshot{Waiting: waiting[i], KVUsage: usage[i]}
		}
	}
	r := newLLMD(f, 1)
	q := req(4096, ids(1, 8)...)
	// No history: queues 0, 4, 2 → 1, 0, 0.5; usage 0.2, 0, 0 → scores
	// 2 + 1.6 = 3.6, 0 + 2 = 2, 1 + 2 = 3: engine 0.
	set([3]int{0, 4, 2}, [3]float64{0.2, 0, 0})
	if got := r.Route(context.Background(), 0, q, 0); got != 0 || !closeTo(r.score[0], 3.6) || !closeTo(r.score[2], 3) {
		t.Fatalf("first: scores %v → %d, want [3.6 2 3] → 0", r.score, got)
	}
	// Engine 0 now holds q in the router's view: a request sharing 4 of
	// its 8 blocks scores there 3·0.5 + 2·0 + 2·0.8 = 3.1; queues 4, 0, 2
	// → engine 1 scores 0 + 2 + 2 = 4: engine 1.
	set([3]int{4, 0, 2}, [3]float64{0.2, 0, 0})
	half := req(4096, append(ids(1, 4), ids(50, 4)...)...)
	if got := r.Route(context.Background(), 1, half, 0); got != 1 || !closeTo(r.score[0], 3.1) {
		t.Fatalf("second: scores %v → %d, want engine 0 at 3.1, engine 1 at 4", r.score, got)
	}
	// Equal queues: the whole prefix wins, 3 + 2 + 1.6 = 6.6.
	set([3]int{1, 1, 1}, [3]float64{0.2, 0, 0})
	if got := r.Route(context.Background(), 2, q, 0); got != 0 || !closeTo(r.score[0], 6.6) {
		t.Fatalf("third: scores %v → %d, want engine 0 at 6.6", r.score, got)
	}
}

// SGLang's cache-aware policy in the bench: balance first (max − min > 64
// and max > 1.5·min → least loaded), then the best match of its tree when
// it covers over 0.3 of the prompt, else the smallest tree; the prompt is
// inserted under the chosen worker at the pick, its load released at its
// end.
func TestSGLang_BalanceThenMatchThenSmallestTree(t *testing.T) {
	ctx := context.Background()
	prompt := ids(1, 4) // 2048 tokens
	for _, tc := range []struct {
		name  string
		loads [2]int // requests in flight on engines 0 and 1
		q     *Request
		want  int
	}{
		// 1024 of 2048 tokens match on engine 0 (0.5 > 0.3).
		{"match over 0.3 wins", [2]int{1, 0}, req(2048, 1, 2, 50, 51), 0},
		// 512 of 2048 (0.25): the smallest tree, engine 1 (empty).
		{"match under 0.3: the smallest tree", [2]int{1, 0}, req(2048, 1, 50, 51, 52), 1},
		// 1536 of 5120 is exactly 0.3, not over it.
		{"match of exactly 0.3: the smallest tree", [2]int{1, 0}, req(5120, 1, 2, 3, 50, 51, 52, 53, 54, 55, 56), 1},
		{"imbalanced by more than 64: least loaded", [2]int{65, 0}, req(2048, prompt...), 1},
		{"a difference of 64 is balanced", [2]int{64, 0}, req(2048, prompt...), 0},
		// 66 > 64 but 200 < 1.5 × 134 = 201: balanced.
		{"under 1.5 times the least: balanced", [2]int{200, 134}, req(2048, prompt...), 0},
		{"over 1.5 times the least: least loaded", [2]int{200, 133}, req(2048, prompt...), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSGLang(2)
			r.routed.Add(r.names[0], prompt) // engine 0's tree holds prompt
			for e, n := range tc.loads {
				for k := 0; k < n; k++ {
					r.Routed(nil, e, &Served{FirstTokenAt: 50, DoneAt: 100})
				}
			}
			if got := r.Route(ctx, 0, tc.q, 1); got != tc.want {
				t.Fatalf("routed to %d, want %d (loads %v)", got, tc.want, r.load)
			}
		})
	}
}

func TestSGLang_InsertsAtThePickAndReleasesAtTheEnd(t *testing.T) {
	ctx := context.Background()
	r := newSGLang(2)
	a := req(2048, 1, 2, 3, 4)
	if got := r.Route(ctx, 0, a, 0); got != 0 || r.routed.Size(r.names[0]) != 4 {
		t.Fatalf("first request routed to %d with tree %d, want 0 with its 4 blocks", got, r.routed.Size(r.names[0]))
	}
	r.Routed(a, 0, &Served{FirstTokenAt: 1, DoneAt: 10})
	// A cold prompt: the smallest tree, engine 1.
	if got := r.Route(ctx, 1, req(2048, 70, 71, 72, 73), 2); got != 1 || r.load[0] != 1 {
		t.Fatalf("routed to %d with loads %v, want 1 with [1 0]", got, r.load)
	}
	if r.Route(ctx, 2, req(512, 90), 10); r.load[0] != 0 {
		t.Fatalf("loads %v at a's end, want engine 0 released", r.load)
	}
}

// With --gateways 2 each Dynamo instance counts only the load it routed
// itself, as Dynamo's router does without replica sync.
func TestGateways_EachDynamoInstanceTracksItsOwnLoad(t *testing.T) {
	cfg := FleetConfig{Engines: 2, CacheBlocks: 100}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	f := NewFleet(cfg, "m", "")
	env := &routerEnv{f: f, view: NewIndexerView(2), stats: newLookupStats(), seed: 3}
	g := &gateways{}
	for k := 0; k < 2; k++ {
		r, err := newRouter(StrategyDynamo, env, k)
		if err != nil {
			t.Fatal(err)
		}
		g.rs = append(g.rs, r)
	}
	gw0, gw1 := g.rs[0].(*dynamo), g.rs[1].(*dynamo)
	ctx := context.Background()
	// Request 0 through gateway 0: 10 + 10 on both engines, a tie.
	q0 := req(5120, ids(1, 10)...)
	e0 := g.Route(ctx, 0, q0, 0)
	g.Routed(q0, e0, &Served{FirstTokenAt: 100, DoneAt: 200})
	// Request 1 through gateway 1, which has seen none of it: 1 + 1 on
	// both.
	q1 := req(512, 50)
	e1 := g.Route(ctx, 1, q1, 1)
	if gw1.logits[0] != 2 || gw1.logits[1] != 2 {
		t.Fatalf("gateway 1 logits %v, want [2 2]: it must not see gateway 0's load", gw1.logits)
	}
	g.Routed(q1, e1, &Served{FirstTokenAt: 20, DoneAt: 30})
	// Request 2 is gateway 0's again: (5120 + 512)/512 + 11 = 22 on e0
	// against 2.
	if got := g.Route(ctx, 2, req(512, 60), 4); got == e0 || gw0.logits[e0] != 22 {
		t.Fatalf("gateway 0 routed to %d (logits %v), want away from %d (22 there)", got, gw0.logits, e0)
	}
}

// dynamo-sync's gateway instances pass their routing on to each other
// (Dynamo's replica sync: at zero delay, from the next virtual instant;
// dynamo-sync-nats after a NATS hop); dynamo's each see their own. Two
// engines, two gateways (even requests on the first, odd on the second),
// two cold requests of 2048 tokens (4 blocks), the second 1 ms after the
// first. dynamo-sync: the second sees the first's load ((2048 + 2048)/512
// + 8 = 16 against 8) and takes the other engine, always. dynamo, and
// dynamo-sync-nats whose 1 ms delay delivers the first's routing just
// after the second: equal logits and equal trees (the KV events come at
// the end of the prefill), a tie at random, and some seed puts both on
// one engine.
func TestDynamoSync_SharesRoutedLoadAcrossGateways(t *testing.T) {
	tr := &Trace{Name: "sync", Requests: []Request{
		{Timestamp: 0, InputLength: 2048, OutputLength: 1, HashIDs: ids(1, 4)},
		{Timestamp: 1, InputLength: 2048, OutputLength: 1, HashIDs: ids(10, 4)},
	}}
	together := map[string]int{}
	// Seeds far apart: the first draws of PCGs seeded 1, 2, 3, … agree.
	for seed := uint64(1); seed <= 8; seed++ {
		rep, err := Run(context.Background(), Config{Trace: tr, Gateways: 2, Seed: seed * 0x9e3779b97f4a7c15,
			Strategies: []string{StrategyDynamoSync, StrategyDynamo, StrategyDynamoSyncNATS},
			Fleet:      FleetConfig{Engines: 2, CacheBlocks: 64, PrefillTPS: 1024, DecodeTPS: 40}})
		if err != nil {
			t.Fatal(err)
		}
		if rep.DynamoSyncDelay != DefaultDynamoSyncDelay {
			t.Fatalf("dynamo-sync delay %v, want %v", rep.DynamoSyncDelay, DefaultDynamoSyncDelay)
		}
		sync := rep.Strategies[0]
		if sync.PerEngine[0] != 1 || sync.PerEngine[1] != 1 || !closeTo(sync.TTFTModelP99Ms, 2000) {
			t.Errorf("seed %d: dynamo-sync per engine %v, TTFT p99 %v ms; want [1 1], 2000", seed, sync.PerEngine, sync.TTFTModelP99Ms)
		}
		for _, s := range rep.Strategies[1:] {
			if s.PerEngine[0] == 2 || s.PerEngine[1] == 2 {
				together[s.Name]++
			}
		}
		if !sync.GatewaysShared || rep.Strategies[1].GatewaysShared || !rep.Strategies[2].GatewaysShared {
			t.Errorf("seed %d: gateways shared: dynamo-sync %v, dynamo %v, dynamo-sync-nats %v; want true, false, true", seed,
				sync.GatewaysShared, rep.Strategies[1].GatewaysShared, rep.Strategies[2].GatewaysShared)
		}
	}
	if together[StrategyDynamo] == 0 || together[StrategyDynamoSyncNATS] == 0 {
		t.Errorf("both requests on one engine in 8 seeds: %v; want some for dynamo and dynamo-sync-nats", together)
	}
}

// Replica sync reaches later instants only: an instance routing at the
// same virtual instant as another does not see its request (zero delay),
// one a millisecond later does; with the NATS delay, only after it.
func TestDynamoSync_SameInstantIsConcurrent(t *testing.T) {
	for _, c := range []struct {
		delay        time.Duration
		hidden, seen float64
	}{{0, 1.0, 1.001}, {time.Millisecond, 1.001, 1.0011}} {
		view := NewIndexerView(2)
		s := newDynamoSync(c.delay)
		a, b := newDynamo(2, view, 1), newDynamo(2, view, 2)
		s.join(a)
		s.join(b)
		q := req(1024, 1, 2)
		e := a.Route(context.Background(), 0, q, 1.0)
		a.Routed(q, e, &Served{FirstTokenAt: 5, DoneAt: 9})
		b.Route(context.Background(), 1, req(512, 7), c.hidden)
		if n := b.slots.Active(); n != 0 {
			t.Errorf("delay %v: at %v s the other instance tracks %d requests, want 0", c.delay, c.hidden, n)
		}
		b.Route(context.Background(), 2, req(512, 8), c.seen)
		if blocks, tokens := b.slots.Potential(b.names[e], nil, 0, 0); blocks != 2 || tokens != 1024 {
			t.Errorf("delay %v: at %v s the other instance sees %d blocks, %d prefill tokens on engine %d, want 2 and 1024", c.delay, c.seen, blocks, tokens, e)
		}
	}
}
