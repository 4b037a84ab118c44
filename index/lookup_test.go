package index

import (
	"testing"

	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/policy"
)

// Every expected number below is worked out by hand in the comment next to
// it; none is computed by the code under test.

func TestLookup_ChainMatching(t *testing.T) {
	type want struct {
		id             string
		blocks, tokens uint32
		freshness      float64
	}
	cases := []struct {
		name   string
		events []BlockEvent
		req    LookupRequest
		want   []want
	}{
		{
			// b holds blocks 1 and 3 but not 2: its run stops at block 1
			// and block 3 cannot re-admit it.
			name: "LeadingRunNeverReadmits",
			events: []BlockEvent{
				stored("a", vllm, t0, 1, 2, 3),
				stored("b", vllm, t0, 1), stored("b", vllm, t0, 3),
			},
			req:  LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, NowMs: t0},
			want: []want{{"a", 3, 48, 1}, {"b", 1, 16, 1}},
		},
		{
			// counts 10+20+7 = 37 for a; 10+20 = 30 for b.
			name:   "MatchedTokensFromUnevenCounts",
			events: []BlockEvent{stored("a", vllm, t0, 1, 2, 3), stored("b", vllm, t0, 1, 2)},
			req:    LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, BlockTokenCounts: []uint32{10, 20, 7}, NowMs: t0},
			want:   []want{{"a", 3, 37, 1}, {"b", 2, 30, 1}},
		},
		{
			// Oldest last_seen on the run is t0−100 s; TTL 1000 s → 0.9.
			name: "FreshnessIsWeakestLink",
			events: []BlockEvent{
				stored("a", vllm, t0, 1), stored("a", vllm, t0-100_000, 2), stored("a", vllm, t0-50_000, 3),
			},
			req:  LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, NowMs: t0},
			want: []want{{"a", 3, 48, 0.9}},
		},
		{
			// Absent counts: every block counts the model block size (16).
			name:   "AbsentCountsUseModelBlockSize",
			events: []BlockEvent{stored("a", vllm, t0, 1, 2)},
			req:    LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 9}, NowMs: t0},
			want:   []want{{"a", 2, 32, 1}},
		},
		{
			// Prefix hash alone is matched exactly; matched_tokens is the
			// stored cumulative count: 100 before + 16 + 16 = 132.
			name: "PrefixHashAloneMatchesExactly",
			events: []BlockEvent{{Kind: Stored, ReplicaID: "a", Partition: vllm, BlockHashes: []uint64{1, 2},
				BlockTokenCounts: []uint32{16, 16}, PrefixTokensBefore: 100, ObservedAtMs: t0}},
			req:  LookupRequest{Partition: vllm, PrefixHash: 2, HasPrefixHash: true, NowMs: t0},
			want: []want{{"a", 1, 132, 1}},
		},
		{
			// A stored vLLM key never answers an SGLang request.
			name:   "SchemesNeverMatch",
			events: []BlockEvent{stored("a", vllm, t0, 1, 2), stored("b", Partition{"sglang", "m", "t", ""}, t0, 1, 2)},
			req:    LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2}, NowMs: t0},
			want:   []want{{"a", 2, 32, 1}},
		},
		{
			name:   "TenantsIsolated",
			events: []BlockEvent{stored("a", vllm, t0, 1, 2), stored("b", Partition{"vllm", "m", "t2", ""}, t0, 1, 2)},
			req:    LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2}, NowMs: t0},
			want:   []want{{"a", 2, 32, 1}},
		},
		{
			name:   "AdapterNeverMatchesBase",
			events: []BlockEvent{stored("a", vllm, t0, 1, 2), stored("b", Partition{"vllm", "m", "t", "lora"}, t0, 1, 2)},
			req:    LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2}, NowMs: t0},
			want:   []want{{"a", 2, 32, 1}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix := New(testPolicy())
			ix.ApplyEvents(c.events)
			r := lookup(ix, c.req)
			if r.Reason != PrefixMatch {
				t.Fatalf("reason %v (%s), want PREFIX_MATCH", r.Reason, r.Detail)
			}
			if len(r.Hints) != len(c.want) {
				t.Fatalf("hints %v, want %d", hintIDs(r), len(c.want))
			}
			for i, w := range c.want {
				h := r.Hints[i]
				if h.ReplicaID != w.id || h.MatchedBlocks != w.blocks || h.MatchedTokens != w.tokens {
					t.Errorf("hint %d = %s blocks %d tokens %d, want %s %d %d", i, h.ReplicaID, h.MatchedBlocks, h.MatchedTokens, w.id, w.blocks, w.tokens)
				}
				approx(t, "freshness", h.Freshness, w.freshness)
			}
		})
	}
}

// The seed's chat example: 4 replicas hold a 64-token system prompt
// (blocks 1..4); r2 also holds the 64-token conversation (5..8).
func TestLookup_SharedSystemPromptScoresZero(t *testing.T) {
	p := policy.Default() // min 64 tokens, floor 0.1, TTL 600 s
	p.AffinityRouting = false
	ix := New(p)
	for _, r := range []string{"r0", "r1", "r2", "r3"} {
		ix.ApplyEvents([]BlockEvent{stored(r, vllm, t0, 1, 2, 3, 4)})
	}
	ix.ApplyEvents([]BlockEvent{{Kind: Stored, ReplicaID: "r2", Partition: vllm, BlockHashes: []uint64{5, 6, 7, 8},
		BlockTokenCounts: []uint32{16, 16, 16, 16}, PrefixTokensBefore: 64, ObservedAtMs: t0}})

	// Whole conversation: r2 = 128 tokens × 1 × 1 × 1 × (1 − 1/4) = 96;
	// the others reach depth 4 where all 4 match: × (1 − 4/4) = 0.
	r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3, 4, 5, 6, 7, 8}, NowMs: t0, Explain: true})
	if r.Reason != PrefixMatch || r.Hints[0].ReplicaID != "r2" {
		t.Fatalf("got %v %v, want PREFIX_MATCH led by r2", r.Reason, hintIDs(r))
	}
	approx(t, "r2 score", r.Hints[0].Score, 96)
	approx(t, "r2 distinguishing power", r.Factors[0].DistinguishingPower, 0.75)
	for _, h := range r.Hints[1:] {
		approx(t, h.ReplicaID+" score", h.Score, 0)
	}
	// System prompt only: every score is 0 < 0.1, the match is dropped.
	r = lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3, 4}, NowMs: t0})
	if r.Reason != NoHint || len(r.Hints) != 0 || r.Detail != detailBelowFloor {
		t.Fatalf("got %v %v %q, want NO_HINT below floor", r.Reason, hintIDs(r), r.Detail)
	}
}

func TestLookup_FloorsAppliedInOrder(t *testing.T) {
	// v1 scores: a = 32 tokens × 1 = 32; b = 64 × 0.1 (age 900 s of
	// 1000 s) = 6.4. minimumMatchedTokens 48 drops a first, so the top
	// score the floor sees is b's 6.4.
	cases := []struct {
		name   string
		floor  string
		reason Reason
		ids    []string
	}{
		{"FloorAboveRemainingTopDropsAll", "10", NoHint, nil},
		{"FloorBelowRemainingTopKeepsB", "5", PrefixMatch, []string{"b"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := testPolicy()
			p.RankingVersion = policy.RankingV1
			p.MinimumMatchedTokens = 48
			p.RoutingFloorScore = c.floor
			p.AffinityRouting = false
			ix := New(p)
			ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2), stored("b", vllm, t0-900_000, 1, 2, 3, 4)})
			r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3, 4}, NowMs: t0})
			if r.Reason != c.reason || len(r.Hints) != len(c.ids) {
				t.Fatalf("got %v %v, want %v %v", r.Reason, hintIDs(r), c.reason, c.ids)
			}
			if c.reason == PrefixMatch {
				approx(t, "b score", r.Hints[0].Score, 6.4)
			}
		})
	}
}

func TestLookup_SLOBiasOnlyBelowThreshold(t *testing.T) {
	// a: 48 tokens, age 100 s → freshness 0.9; b holds another block, so
	// the serving set is {a, b} and a's distinguishing power is 1 − 1/2.
	// Tight (ttft < 200 ms): bias 1 + 0.9 × 0.25 = 1.225,
	// score 48 × 0.9 × 1.225 × 0.5 = 26.46. Otherwise 48 × 0.9 × 0.5 = 21.6.
	cases := []struct {
		name  string
		ttft  uint32
		bias  float64
		score float64
	}{
		{"TightGetsBias", 100, 1.225, 26.46},
		{"AtThresholdNoBias", 200, 1, 21.6},
		{"AboveThresholdNoBias", 500, 1, 21.6},
		{"NoSLONoBias", 0, 1, 21.6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix := New(testPolicy())
			ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0-100_000, 1, 2, 3), stored("b", vllm, t0, 9)})
			r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, SLOTTFTMs: c.ttft, NowMs: t0, Explain: true})
			if r.Reason != PrefixMatch {
				t.Fatalf("reason %v", r.Reason)
			}
			approx(t, "slo bias", r.Factors[0].SLOBias, c.bias)
			approx(t, "score", r.Hints[0].Score, c.score)
		})
	}
}

func TestLookup_PressureOnlyFromFreshStats(t *testing.T) {
	// Stats at t0 with pressure 0.8; statsFreshness 30 s.
	// Fresh: factor 1 − 0.5 × 0.8 = 0.6. Stale: 1, and Pressure reads 0.
	cases := []struct {
		name     string
		now      int64
		factor   float64
		pressure float64
	}{
		{"FreshStatsDemote", t0 + 10_000, 0.6, 0.8},
		{"StatsAtFreshnessEdgeStillFresh", t0 + 30_000, 0.6, 0.8},
		{"StaleStatsIgnored", t0 + 30_001, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix := New(testPolicy())
			ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2)})
			ix.ApplyStats([]ReplicaStats{{ReplicaID: "a", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.8, ObservedAtMs: t0}})
			r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2}, NowMs: c.now, Explain: true})
			if r.Reason != PrefixMatch {
				t.Fatalf("reason %v", r.Reason)
			}
			approx(t, "pressure factor", r.Factors[0].PressureFactor, c.factor)
			approx(t, "pressure", r.Hints[0].Pressure, c.pressure)
		})
	}
}

func TestLookup_RankingV1IsTokensTimesFreshness(t *testing.T) {
	// a alone holds the chain: v2 would multiply by 1 − 1/1 = 0; v1 is
	// 32 × 0.9 = 28.8.
	p := testPolicy()
	p.RankingVersion = policy.RankingV1
	ix := New(p)
	ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0-100_000, 1, 2)})
	r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2}, NowMs: t0})
	if r.Reason != PrefixMatch {
		t.Fatalf("reason %v", r.Reason)
	}
	approx(t, "score", r.Hints[0].Score, 28.8)
}

func TestLookup_TieOrderAndMaxReplicas(t *testing.T) {
	// Five replicas hold block 1; under v1 each scores 16 × 1 = 16, so
	// replica id ascending decides. The policy caps at 4, a request max of
	// 2 caps at 2.
	p := testPolicy()
	p.RankingVersion = policy.RankingV1
	ix := New(p)
	for _, id := range []string{"e", "c", "a", "d", "b"} {
		ix.ApplyEvents([]BlockEvent{stored(id, vllm, t0, 1)})
	}
	for _, c := range []struct {
		max  uint32
		want []string
	}{{0, []string{"a", "b", "c", "d"}}, {2, []string{"a", "b"}}} {
		r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1}, MaxReplicas: c.max, NowMs: t0})
		got := hintIDs(r)
		if len(got) != len(c.want) {
			t.Fatalf("max %d: got %v, want %v", c.max, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("max %d: got %v, want %v", c.max, got, c.want)
			}
		}
	}
}

func TestLookup_TokenIDsFingerprintedWithModelBlockSize(t *testing.T) {
	p := testPolicy()
	p.BlockSize = map[string]uint32{"m": 4}
	ix := New(p)
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9} // 2 full blocks of 4, tail dropped
	hs, _ := fingerprint.AppendBlockHashes(nil, toks, 4)
	ix.ApplyEvents([]BlockEvent{{Kind: Stored, ReplicaID: "a", Partition: vllm, BlockHashes: hs, BlockTokenCounts: []uint32{4, 4}, ObservedAtMs: t0}})
	r := lookup(ix, LookupRequest{Partition: vllm, TokenIDs: toks, NowMs: t0})
	if r.Reason != PrefixMatch || r.Hints[0].MatchedTokens != 8 || r.Hints[0].MatchedBlocks != 2 {
		t.Fatalf("got %v %+v", r.Reason, r.Hints)
	}
}

// A salted engine store (vLLM cache_salt) matches only lookups with the
// same salt: another salt or none is another hash domain.
func TestLookup_CacheSaltSeparatesHashDomains(t *testing.T) {
	p := testPolicy()
	p.BlockSize = map[string]uint32{"m": 4}
	ix := New(p)
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	salted, _ := fingerprint.AppendSaltedBlockHashes(nil, toks, 4, "team-a")
	plain, _ := fingerprint.AppendBlockHashes(nil, toks, 4)
	ix.ApplyEvents([]BlockEvent{
		{Kind: Stored, ReplicaID: "salted", Partition: vllm, BlockHashes: salted, BlockTokenCounts: []uint32{4, 4}, ObservedAtMs: t0},
		{Kind: Stored, ReplicaID: "plain", Partition: vllm, BlockHashes: plain, BlockTokenCounts: []uint32{4, 4}, ObservedAtMs: t0},
	})
	for _, c := range []struct{ salt, want string }{{"team-a", "salted"}, {"", "plain"}} {
		r := lookup(ix, LookupRequest{Partition: vllm, TokenIDs: toks, CacheSalt: c.salt, NowMs: t0})
		if got := hintIDs(r); r.Reason != PrefixMatch || len(got) != 1 || got[0] != c.want || r.Hints[0].MatchedTokens != 8 {
			t.Fatalf("salt %q: got %v %v, want only %q", c.salt, r.Reason, got, c.want)
		}
	}
	r := lookup(ix, LookupRequest{Partition: vllm, TokenIDs: toks, CacheSalt: "team-b", NowMs: t0})
	for _, h := range r.Hints {
		if h.MatchedTokens > 0 {
			t.Fatalf("salt team-b matched %+v; it must match nothing", h)
		}
	}
}

func TestLookup_ChainMatchingOffMatchesPrefixExactly(t *testing.T) {
	// b holds only the first block: with chain matching off it does not
	// match at all; a matches with its stored cumulative 32 tokens.
	p := testPolicy()
	p.ChainMatching = false
	p.RankingVersion = policy.RankingV1
	ix := New(p)
	ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2), stored("b", vllm, t0, 1)})
	r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2}, NowMs: t0})
	if got := hintIDs(r); r.Reason != PrefixMatch || len(got) != 1 || got[0] != "a" || r.Hints[0].MatchedTokens != 32 {
		t.Fatalf("got %v %v", r.Reason, r.Hints)
	}
}

func TestLookup_NoHintCases(t *testing.T) {
	ix := New(testPolicy())
	ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2)})
	cases := []struct {
		name   string
		req    LookupRequest
		detail string
	}{
		{"EmptySchemeIsNoHint", LookupRequest{Partition: Partition{Model: "m", Tenant: "t"}, BlockHashes: []uint64{1}, NowMs: t0}, DetailNoScheme},
		{"EmptyKeyIsNoHint", LookupRequest{Partition: vllm, NowMs: t0}, DetailNoKey},
		{"TooFewTokensIsNoHint", LookupRequest{Partition: vllm, TokenIDs: []uint32{1, 2, 3}, NowMs: t0}, DetailTooFewTokens},
		{"CountsLengthMismatchIsNoHint", LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2}, BlockTokenCounts: []uint32{16}, NowMs: t0}, DetailCountsMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := lookup(ix, c.req)
			if r.Reason != NoHint || len(r.Hints) != 0 || r.Detail != c.detail {
				t.Fatalf("got %v %v %q, want NO_HINT %q", r.Reason, hintIDs(r), r.Detail, c.detail)
			}
		})
	}
}

func TestLookup_ZeroAllocsWithReusedResult(t *testing.T) {
	ix := New(testPolicy())
	ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2, 3), stored("b", vllm, t0, 1, 2)})
	hit := LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, NowMs: t0}
	miss := LookupRequest{Partition: vllm, BlockHashes: []uint64{7, 8, 9}, NowMs: t0}
	explained := hit
	explained.Explain = true
	var r Result
	ix.Lookup(&hit, &r)
	ix.Lookup(&miss, &r)
	ix.Lookup(&explained, &r)
	for name, req := range map[string]*LookupRequest{"hit": &hit, "miss": &miss, "explained hit": &explained} {
		if n := testing.AllocsPerRun(100, func() { ix.Lookup(req, &r) }); n != 0 {
			t.Errorf("%s path: %v allocs per lookup, want 0", name, n)
		}
	}
}
