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

// dynamoTerms are the terms of Dynamo's cost for one engine, worked out
// by hand in each case.
type dynamoTerms struct {
	activePrefill float64 // uncached tokens of routed requests before their first token
	cached        int     // the request's tokens the indexer says the engine holds
	decodeBlocks  float64 // ceil(ISL/512) of routed requests before their last token
}

// cost is Dynamo's KV router cost with its defaults (overlap weight 1,
// block size 512): (active_prefill_tokens + ISL − cached_tokens) /
// block_size + active_decode_blocks.
func (d dynamoTerms) cost(isl int) float64 {
	return (d.activePrefill+float64(isl-d.cached))/512 + d.decodeBlocks
}

// earlier is a request routed to engine e before the one under test, with
// its first and last tokens at first and done.
type earlier struct {
	q           *Request
	e           int
	first, done float64
}

// Dynamo routes to the lowest (active prefill + new tokens) / 512 +
// active decode blocks. Engine 0's indexer view holds blocks 1..8 (4096
// tokens) of a 9-block request; engine 1 holds nothing.
func TestDynamo_CostIsPrefillBlocksPlusDecodeBlocks(t *testing.T) {
	q := req(4608, ids(1, 9)...)
	held := map[int][]uint64{0: ids(1, 8)}
	// A long cold request on engine 0: 10240 uncached tokens until its
	// first token at 10 s, 20 decode blocks until its end at 20 s.
	long := earlier{req(10240, ids(100, 20)...), 0, 10, 20}
	for _, tc := range []struct {
		name    string
		earlier []earlier
		at      float64
		terms   [2]dynamoTerms
		want    int
	}{
		{"idle engines: the cached prefix wins", nil, 1,
			[2]dynamoTerms{{0, 4096, 0}, {0, 0, 0}}, 0},
		// (10240 + 4608 − 4096)/512 + 20 = 41 against 4608/512 = 9.
		{"a long cached prefix on a busy engine loses", []earlier{long}, 1,
			[2]dynamoTerms{{10240, 4096, 20}, {0, 0, 0}}, 1},
		// (1024 + 512)/512 + 2 = 5 against 9.
		{"a long cached prefix on a lightly loaded engine wins", []earlier{{req(1024, 100, 101), 0, 10, 20}}, 1,
			[2]dynamoTerms{{1024, 4096, 2}, {0, 0, 0}}, 0},
		// 1100 tokens: 1100 new tokens, ceil(1100/512) = 3 decode blocks.
		{"decode blocks round the prompt up", []earlier{{req(1100, 100, 101, 102), 0, 10, 20}}, 1,
			[2]dynamoTerms{{1100, 4096, 3}, {0, 0, 0}}, 0},
		// At its first token (10 s) the long request's prefill is released,
		// its decode blocks are not: 512/512 + 20 = 21.
		{"prefill released at the first token", []earlier{long}, 10,
			[2]dynamoTerms{{0, 4096, 20}, {0, 0, 0}}, 1},
		// At its end (20 s) nothing of it is left.
		{"decode blocks released at the end", []earlier{long}, 20,
			[2]dynamoTerms{{0, 4096, 0}, {0, 0, 0}}, 0},
		// Load on both: engine 1 carries a 2048-token request (prefill
		// 2048, 4 decode blocks): 1 + 20 = 21 on 0 against
		// (2048 + 4608)/512 + 4 = 17 on 1.
		{"load on both engines", []earlier{long, {req(2048, ids(200, 4)...), 1, 30, 40}}, 15,
			[2]dynamoTerms{{0, 4096, 20}, {2048, 0, 4}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newDynamo(2, viewHolding(2, held), 1)
			for i, x := range tc.earlier {
				r.Route(context.Background(), i, x.q, 0)
				r.Routed(x.q, x.e, &Served{FirstTokenAt: x.first, DoneAt: x.done})
			}
			got := r.Route(context.Background(), len(tc.earlier), q, tc.at)
			for e, terms := range tc.terms {
				if want := terms.cost(q.InputLength); !closeTo(r.cost[e], want) {
					t.Errorf("engine %d: cost %v, want %v (%+v)", e, r.cost[e], want, terms)
				}
			}
			if got != tc.want {
				t.Errorf("routed to %d, want %d (costs %v)", got, tc.want, r.cost)
			}
		})
	}
}

// The uncached tokens credited to an engine are those of the request as
// the indexer saw it when it was routed, not the whole prompt.
func TestDynamo_ActivePrefillIsTheRoutedRequestsUncachedTokens(t *testing.T) {
	r := newDynamo(2, viewHolding(2, map[int][]uint64{0: ids(1, 4)}), 1)
	// 2560 tokens, 2048 of them held by engine 0: 512 new tokens there.
	a := req(2560, ids(1, 5)...)
	r.Route(context.Background(), 0, a, 0)
	r.Routed(a, 0, &Served{FirstTokenAt: 5, DoneAt: 9})
	q := req(512, 50)
	r.Route(context.Background(), 1, q, 1)
	// Engine 0: (512 + 512)/512 + ceil(2560/512) = 2 + 5 = 7.
	want := dynamoTerms{activePrefill: 512, decodeBlocks: 5}.cost(512)
	if !closeTo(r.cost[0], want) || !closeTo(r.cost[1], 1) {
		t.Fatalf("costs %v, want [%v 1]", r.cost, want)
	}
}

// Ties go at random among the engines of equal lowest cost only.
func TestDynamo_RandomTiesOnlyAmongEqualCosts(t *testing.T) {
	r := newDynamo(3, NewIndexerView(3), 7)
	busy := req(512, 900)
	r.Route(context.Background(), 0, busy, 0)
	r.Routed(busy, 1, &Served{FirstTokenAt: 1000, DoneAt: 2000})
	// Engines 0 and 2 cost 1, engine 1 costs (512 + 512)/512 + 1 = 3.
	q := req(512, 1)
	seen := map[int]int{}
	for i := 0; i < 200; i++ {
		seen[r.Route(context.Background(), i+1, q, 1)]++
	}
	if seen[1] != 0 || seen[0] == 0 || seen[2] == 0 {
		t.Fatalf("choices %v: want engines 0 and 2 only, both chosen", seen)
	}
	// A strictly lowest cost is never a tie: engine 2 holds the first of
	// two blocks, 1 against 2 on the others.
	r = newDynamo(3, viewHolding(3, map[int][]uint64{2: {1}}), 7)
	for i := 0; i < 50; i++ {
		if got := r.Route(context.Background(), i, req(1024, 1, 2), 0); got != 2 {
			t.Fatalf("routed to %d, want 2 (costs %v)", got, r.cost)
		}
	}
}

// llmdTerms are the terms of llm-d's score for one engine, by hand.
type llmdTerms struct{ prefix, queue, kvFree float64 }

// score is llm-d's default endpoint-picker score: 3·prefix + 2·queue +
// 2·kv_util.
func (s llmdTerms) score() float64 { return 3*s.prefix + 2*s.queue + 2*s.kvFree }

// llm-d scores prefix (cached run / request blocks, from the indexer),
// queue ((max_q − q)/(max_q − min_q) over the scraped waiting requests, 1
// for all when equal) and kv_util (1 − scraped KV usage); the highest
// wins.
func TestLLMD_ScoreIsPrefixQueueAndKVUtil(t *testing.T) {
	// An 8-block request; engine 0 holds 4 of its blocks, engine 1 all 8,
	// engine 2 none.
	q := req(4096, ids(1, 8)...)
	held := map[int][]uint64{0: ids(1, 4), 1: ids(1, 8)}
	for _, tc := range []struct {
		name    string
		waiting [3]int
		usage   [3]float64
		terms   [3]llmdTerms
		want    int
	}{
		// Queues 0, 4, 2 (min 0, max 4): 1, 0, 0.5. Scores 5.1, 3.2, 3.
		{"queue and free KV beat the full prefix", [3]int{0, 4, 2}, [3]float64{0.2, 0.9, 0},
			[3]llmdTerms{{0.5, 1, 0.8}, {1, 0, 0.1}, {0, 0.5, 1}}, 0},
		// Equal queues: queue 1 for all. Scores 4.5, 6, 3.
		{"equal queues: the longest prefix wins", [3]int{2, 2, 2}, [3]float64{0.5, 0.5, 0.5},
			[3]llmdTerms{{0.5, 1, 0.5}, {1, 1, 0.5}, {0, 1, 0.5}}, 1},
		// Queues 0, 10, 5: 1, 0, 0.5. Scores 1.5+2+2 = 5.5, 3+0+0 = 3,
		// 0+1+2 = 3.
		{"a full engine with the whole prefix loses", [3]int{0, 10, 5}, [3]float64{0, 1, 0},
			[3]llmdTerms{{0.5, 1, 1}, {1, 0, 0}, {0, 0.5, 1}}, 0},
		// Queues 3, 3, 9: 1, 1, 0. Scores 1.5+2+0.2 = 3.7, 3+2+0.2 = 5.2,
		// 0+0+2 = 2.
		{"the prefix decides between equal queues", [3]int{3, 3, 9}, [3]float64{0.9, 0.9, 0},
			[3]llmdTerms{{0.5, 1, 0.1}, {1, 1, 0.1}, {0, 0, 1}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := FleetConfig{Engines: 3, CacheBlocks: 100}
			if err := cfg.fill(); err != nil {
				t.Fatal(err)
			}
			f := NewFleet(cfg, "m", "")
			for i, e := range f.Engines {
				e.snap = MetricsSnapshot{Waiting: tc.waiting[i], KVUsage: tc.usage[i]}
			}
			r := newLLMD(f, viewHolding(3, held), 1)
			got := r.Route(context.Background(), 0, q, 0)
			for e, terms := range tc.terms {
				if want := terms.score(); !closeTo(-r.score[e], want) {
					t.Errorf("engine %d: score %v, want %v (%+v)", e, -r.score[e], want, terms)
				}
			}
			if got != tc.want {
				t.Errorf("routed to %d, want %d", got, tc.want)
			}
		})
	}
}

// SGLang's cache-aware policy: balance first (max − min > 64 and max >
// 1.5·min → least loaded), then the best prefix match when it covers over
// 0.3 of the prompt, else the least loaded; the prompt is inserted under
// the chosen worker and its load released at its end.
func TestSGLang_BalanceThenMatchThenLeastLoaded(t *testing.T) {
	ctx := context.Background()
	prompt := ids(1, 4) // 2048 tokens
	for _, tc := range []struct {
		name  string
		loads [2]int // requests routed to engines 0 and 1 before (each inserting prompt under engine 0)
		q     *Request
		want  int
	}{
		// 1024 of 2048 tokens match on engine 0 (0.5 > 0.3): engine 0
		// although it is the busier.
		{"match over 0.3 wins", [2]int{1, 0}, req(2048, 1, 2, 50, 51), 0},
		// 512 of 2048 (0.25): the least loaded.
		{"match under 0.3: least loaded", [2]int{1, 0}, req(2048, 1, 50, 51, 52), 1},
		// 1536 of 5120 is exactly 0.3, not over it.
		{"match of exactly 0.3: least loaded", [2]int{1, 0}, req(5120, 1, 2, 3, 50, 51, 52, 53, 54, 55, 56), 1},
		// Loads 65 and 0: 65 > 64 and 65 > 0: imbalanced, least loaded
		// despite the full match.
		{"imbalanced by more than 64: least loaded", [2]int{65, 0}, req(2048, prompt...), 1},
		// Loads 64 and 0: 64 is not over 64: the match wins.
		{"a difference of 64 is balanced", [2]int{64, 0}, req(2048, prompt...), 0},
		// Loads 200 and 134: 66 > 64 but 200 < 1.5 × 134 = 201: balanced.
		{"under 1.5 times the least: balanced", [2]int{200, 134}, req(2048, prompt...), 0},
		// Loads 200 and 133: 200 > 199.5: imbalanced.
		{"over 1.5 times the least: least loaded", [2]int{200, 133}, req(2048, prompt...), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSGLang(2)
			// Requests on engine 1 carry a prompt of their own, so only
			// engine 0's tree holds prompt.
			for e, n := range tc.loads {
				for k := 0; k < n; k++ {
					p := req(2048, prompt...)
					if e == 1 {
						p = req(2048, 1000, 1001, 1002, 1003)
					}
					r.Routed(p, e, &Served{FirstTokenAt: 50, DoneAt: 100})
				}
			}
			if got := r.Route(ctx, 0, tc.q, 1); got != tc.want {
				t.Fatalf("routed to %d, want %d (loads %v)", got, tc.want, r.load)
			}
		})
	}
}

func TestSGLang_InsertsUnderTheChosenWorkerAndReleasesAtTheEnd(t *testing.T) {
	ctx := context.Background()
	r := newSGLang(2)
	// Empty trees, equal loads: the least loaded, the lower id.
	a := req(2048, 1, 2, 3, 4)
	if got := r.Route(ctx, 0, a, 0); got != 0 {
		t.Fatalf("first request routed to %d, want 0", got)
	}
	// The gateway sent it to engine 1 (a tracker is told where it went).
	r.Routed(a, 1, &Served{FirstTokenAt: 1, DoneAt: 10})
	// Its prefix is now under engine 1, which wins although loaded.
	b := req(2048, 1, 2, 3, 60)
	if got := r.Route(ctx, 1, b, 2); got != 1 {
		t.Fatalf("second request routed to %d, want 1 (its prefix is under engine 1)", got)
	}
	// Without a match the least loaded: engine 0 while a runs…
	c := req(2048, 70, 71, 72, 73)
	if got := r.Route(ctx, 2, c, 9.9); got != 0 || r.load[1] != 1 {
		t.Fatalf("routed to %d with loads %v, want 0 with [0 1]", got, r.load)
	}
	// …and from a's end (10 s) engine 1's load is released.
	if r.Route(ctx, 3, c, 10); r.load[1] != 0 {
		t.Fatalf("loads %v at a's end, want engine 1 released", r.load)
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
	// Request 0 goes through gateway 0, which records its 5120 tokens on
	// the engine it picked (both cost 10: a random tie).
	q0 := req(5120, ids(1, 10)...)
	e0 := g.Route(ctx, 0, q0, 0)
	g.Routed(q0, e0, &Served{FirstTokenAt: 100, DoneAt: 200})
	if gw0.prefill[e0] != 5120 || gw0.decode[e0] != 10 || gw1.prefill[e0] != 0 || gw1.decode[e0] != 0 {
		t.Fatalf("after request 0 on engine %d: gateway 0 prefill %v decode %v, gateway 1 prefill %v decode %v",
			e0, gw0.prefill, gw0.decode, gw1.prefill, gw1.decode)
	}
	// Request 1 goes through gateway 1, which has seen none of it: equal
	// costs 1 on both engines.
	q1 := req(512, 50)
	e1 := g.Route(ctx, 1, q1, 1)
	if gw1.cost[0] != 1 || gw1.cost[1] != 1 {
		t.Fatalf("gateway 1 costs %v, want [1 1]: it must not see gateway 0's load", gw1.cost)
	}
	g.Routed(q1, e1, &Served{FirstTokenAt: 20, DoneAt: 30})
	if gw0.prefill[0]+gw0.prefill[1] != 5120 || gw1.prefill[e1] != 512 || gw1.prefill[1-e1] != 0 {
		t.Fatalf("prefill: gateway 0 %v, gateway 1 %v; want request 1's 512 tokens on gateway 1 only", gw0.prefill, gw1.prefill)
	}
	// Request 2 is gateway 0's again: it sees its own request 0 and
	// avoids engine e0: (5120 + 512)/512 + 10 = 21 against 1.
	if got := g.Route(ctx, 2, req(512, 60), 4); got == e0 {
		t.Fatalf("gateway 0 routed to %d, the engine it loaded (costs %v)", got, gw0.cost)
	}
	if want := (5120.0+512)/512 + 10; gw0.cost[e0] != want {
		t.Fatalf("gateway 0 cost of engine %d = %v, want %v", e0, gw0.cost[e0], want)
	}
}

// dynamo-sync's gateway instances pass their routing on to each other
// (Dynamo's replica sync: at zero delay, from the next virtual instant;
// dynamo-sync-nats after a NATS hop); dynamo's each see their own.
// Two engines of 1,024 tokens/s, two gateways (even requests on the
// first, odd on the second), every request one output token:
//
//	t=0       r0 (gw0) blocks 1..4, ISL 2048
//	t=1ms     r1 (gw1) blocks 10..13, ISL 2048
//	t=10s     r2 (gw0) blocks 1..4,20, ISL 2560
//	t=10.001s r3 (gw1) blocks 1..4,21, ISL 2560
//
// dynamo-sync: r0 ties (cost 4 each) and goes to some engine a; r1, a
// millisecond later, sees r0's load there ((2048 + 2048)/512 + 4 = 12
// against 4) and goes to the other, b. At 10 s both are done and their
// blocks visible: r2 costs (2560 − 2048)/512 = 1 on a, 5 on b → a; r3
// sees r2 on a ((512 + 512)/512 + 5 decode blocks = 7 against 5) → b,
// cold. Cached tokens 2048 (r2's), two requests per engine; TTFTs 2, 2,
// 0.5 and 2.5 s.
// dynamo, and dynamo-sync-nats whose 1 ms delay delivers r2's routing to
// gw1 only after r3: r3 does not see r2 and both go to the engine holding
// blocks 1..4 (cost 1 against 5 in gw1's view): cached tokens 2 × 2048 =
// 4096.
func TestDynamoSync_SharesRoutedLoadAcrossGateways(t *testing.T) {
	tr := &Trace{Name: "sync", Requests: []Request{
		{Timestamp: 0, InputLength: 2048, OutputLength: 1, HashIDs: ids(1, 4)},
		{Timestamp: 1, InputLength: 2048, OutputLength: 1, HashIDs: ids(10, 4)},
		{Timestamp: 10000, InputLength: 2560, OutputLength: 1, HashIDs: append(ids(1, 4), 20)},
		{Timestamp: 10001, InputLength: 2560, OutputLength: 1, HashIDs: append(ids(1, 4), 21)},
	}}
	for seed := uint64(1); seed <= 4; seed++ {
		rep, err := Run(context.Background(), Config{Trace: tr, Gateways: 2, Seed: seed,
			Strategies: []string{StrategyDynamoSync, StrategyDynamo, StrategyDynamoSyncNATS},
			Fleet:      FleetConfig{Engines: 2, CacheBlocks: 64, PrefillTPS: 1024, DecodeTPS: 40}})
		if err != nil {
			t.Fatal(err)
		}
		sync, own, nats := rep.Strategies[0], rep.Strategies[1], rep.Strategies[2]
		if nats.CachedTokens != 4096 || !nats.GatewaysShared || rep.DynamoSyncDelay != DefaultDynamoSyncDelay {
			t.Errorf("seed %d: dynamo-sync-nats cached %d tokens (shared %v, delay %v), want 4096 (true, %v)", seed,
				nats.CachedTokens, nats.GatewaysShared, rep.DynamoSyncDelay, DefaultDynamoSyncDelay)
		}
		if sync.CachedTokens != 2048 || sync.PerEngine[0] != 2 || sync.PerEngine[1] != 2 {
			t.Errorf("seed %d: dynamo-sync cached %d tokens, per engine %v; want 2048 and [2 2]", seed, sync.CachedTokens, sync.PerEngine)
		}
		if !closeTo(sync.TTFTModelP50Ms, 2000) || !closeTo(sync.TTFTModelP99Ms, 2500) || !closeTo(sync.TTFTModelMeanMs, 1750) {
			t.Errorf("seed %d: dynamo-sync TTFT p50 %v, p99 %v, mean %v ms; want 2000, 2500, 1750", seed,
				sync.TTFTModelP50Ms, sync.TTFTModelP99Ms, sync.TTFTModelMeanMs)
		}
		if own.CachedTokens != 4096 {
			t.Errorf("seed %d: dynamo cached %d tokens, want 4096", seed, own.CachedTokens)
		}
		if !sync.GatewaysShared || own.GatewaysShared {
			t.Errorf("seed %d: gateways shared: dynamo-sync %v, dynamo %v; want true, false", seed, sync.GatewaysShared, own.GatewaysShared)
		}
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
		if b.prefill[e] != 0 {
			t.Errorf("delay %v: at %v s the other instance sees %v prefill tokens on engine %d, want 0", c.delay, c.hidden, b.prefill[e], e)
		}
		b.Route(context.Background(), 2, req(512, 8), c.seen)
		if b.prefill[e] != 1024 || b.decode[e] != 2 {
			t.Errorf("delay %v: at %v s the other instance sees prefill %v, decode %v on engine %d, want 1024 and 2", c.delay, c.seen, b.prefill[e], b.decode[e], e)
		}
	}
}
