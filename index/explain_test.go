package index

import (
	"testing"

	"github.com/inference-cache/inference-cache/policy"
)

// explainWorld: a and b hold blocks 1, 2, 3 (a since 100 s, freshness
// 0.9), c holds block 1 only. a reports fresh stats (pressure 0.4, queue
// 7 waiting / 3 running, hit rate 0.6 for tenant t); b's stats are 31 s
// old, past statsFreshness (30 s). The serving set is {a, b, c}.
func explainWorld(p policy.Policy) *Index {
	ix := New(p)
	ix.ApplyEvents([]BlockEvent{
		stored("a", vllm, t0-100_000, 1, 2, 3),
		stored("b", vllm, t0, 1, 2, 3),
		stored("c", vllm, t0, 1),
	})
	ix.ApplyStats([]ReplicaStats{
		{ReplicaID: "a", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.4, TenantHitRate: map[string]float64{"t": 0.6},
			ObservedAtMs: t0, WaitingRequests: 7, RunningRequests: 3},
		{ReplicaID: "b", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.9,
			ObservedAtMs: t0 - 31_000, WaitingRequests: 50, RunningRequests: 60},
	})
	return ix
}

// With Explain, Factors[i] explains Hints[i] (after the sort) and the
// factors multiply back to the score. Worked by hand (tight SLO, bias
// 1 + freshness × 0.25; distinguishing power 1 − mad/3):
//
//	b: 48 × 1   × 1   × 1.25  × (1 − 2/3) = 20
//	a: 48 × 0.9 × 0.8 × 1.225 × (1 − 2/3) = 14.112
//	c: 16 × 1   × 1   × 1.25  × (1 − 3/3) = 0
func TestLookup_ExplainFactorsFollowTheirHints(t *testing.T) {
	ix := explainWorld(testPolicy())
	req := LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, SLOTTFTMs: 100, NowMs: t0, Explain: true}
	r := lookup(ix, req)
	if r.Reason != PrefixMatch || len(r.Hints) != 3 || len(r.Factors) != 3 {
		t.Fatalf("got %v hints %v factors %d, want PREFIX_MATCH b, a, c with 3 factors", r.Reason, hintIDs(r), len(r.Factors))
	}
	if r.RankingVersion != policy.RankingV2 {
		t.Errorf("ranking version %q, want v2", r.RankingVersion)
	}
	want := []struct {
		id               string
		score            float64
		f                Factors
		waiting, running uint32
	}{
		{"b", 20, Factors{Freshness: 1, PressureFactor: 1, SLOBias: 1.25, DistinguishingPower: 1.0 / 3, MatchingAtDepth: 2, TotalReplicas: 3}, 0, 0},
		{"a", 14.112, Factors{Freshness: 0.9, PressureFactor: 0.8, SLOBias: 1.225, DistinguishingPower: 1.0 / 3, MatchingAtDepth: 2, TotalReplicas: 3, StatsFresh: true}, 7, 3},
		{"c", 0, Factors{Freshness: 1, PressureFactor: 1, SLOBias: 1.25, DistinguishingPower: 0, MatchingAtDepth: 3, TotalReplicas: 3}, 0, 0},
	}
	for i, w := range want {
		h, f := r.Hints[i], r.Factors[i]
		if h.ReplicaID != w.id {
			t.Fatalf("hint %d is %s, want %s (order %v)", i, h.ReplicaID, w.id, hintIDs(r))
		}
		approx(t, w.id+" score", h.Score, w.score)
		approx(t, w.id+" freshness", f.Freshness, w.f.Freshness)
		approx(t, w.id+" pressure factor", f.PressureFactor, w.f.PressureFactor)
		approx(t, w.id+" slo bias", f.SLOBias, w.f.SLOBias)
		approx(t, w.id+" distinguishing power", f.DistinguishingPower, w.f.DistinguishingPower)
		if f.MatchingAtDepth != w.f.MatchingAtDepth || f.TotalReplicas != w.f.TotalReplicas || f.StatsFresh != w.f.StatsFresh || f.Rendezvous || f.TenantHitRate != 0 {
			t.Errorf("%s factors %+v, want %+v", w.id, f, w.f)
		}
		if h.WaitingRequests != w.waiting || h.RunningRequests != w.running {
			t.Errorf("%s queue %d/%d, want %d/%d", w.id, h.WaitingRequests, h.RunningRequests, w.waiting, w.running)
		}
		if p := float64(h.MatchedTokens) * f.Freshness * (f.PressureFactor * f.SLOBias * f.DistinguishingPower); p != h.Score {
			t.Errorf("%s: factors multiply to %v, score %v", w.id, p, h.Score)
		}
	}

	// The same lookup without Explain: the same hints, no factors.
	req.Explain = false
	off := lookup(ix, req)
	if len(off.Factors) != 0 || off.RankingVersion != "" {
		t.Errorf("explain off: %d factors, ranking version %q; want none", len(off.Factors), off.RankingVersion)
	}
	if len(off.Hints) != len(r.Hints) {
		t.Fatalf("explain off: hints %v, on: %v", hintIDs(off), hintIDs(r))
	}
	for i := range off.Hints {
		if off.Hints[i] != r.Hints[i] {
			t.Errorf("hint %d differs with explain off: %+v vs %+v", i, off.Hints[i], r.Hints[i])
		}
	}
}

// A reused Result carries no factors from an explained lookup into one
// that did not ask.
func TestLookup_ReusedResultDropsFactorsWithoutExplain(t *testing.T) {
	ix := explainWorld(testPolicy())
	var r Result
	ix.Lookup(&LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, NowMs: t0, Explain: true}, &r)
	if len(r.Factors) != 3 {
		t.Fatalf("explained lookup: %d factors", len(r.Factors))
	}
	ix.Lookup(&LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, NowMs: t0}, &r)
	if len(r.Factors) != 0 || r.RankingVersion != "" {
		t.Fatalf("plain lookup on a reused result: %d factors, version %q", len(r.Factors), r.RankingVersion)
	}
}

// Ranking v1 scores matched_tokens × freshness; explain reports the
// factors it does not apply as 1 and still gives matching/total:
// a = 48 × 0.9 = 43.2, b = 48, c = 16.
func TestLookup_ExplainV1ReportsUnusedFactorsAsOne(t *testing.T) {
	p := testPolicy()
	p.RankingVersion = policy.RankingV1
	r := lookup(explainWorld(p), LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, SLOTTFTMs: 100, NowMs: t0, Explain: true})
	if r.Reason != PrefixMatch || len(r.Factors) != 3 || r.RankingVersion != policy.RankingV1 {
		t.Fatalf("got %v %v, %d factors, version %q", r.Reason, hintIDs(r), len(r.Factors), r.RankingVersion)
	}
	scores := map[string]float64{"a": 43.2, "b": 48, "c": 16}
	mad := map[string]uint32{"a": 2, "b": 2, "c": 3}
	for i, h := range r.Hints {
		f := r.Factors[i]
		approx(t, h.ReplicaID+" score", h.Score, scores[h.ReplicaID])
		if f.PressureFactor != 1 || f.SLOBias != 1 || f.DistinguishingPower != 1 {
			t.Errorf("%s: v1 factors %+v, want pressure, SLO and distinguishing power 1", h.ReplicaID, f)
		}
		if f.MatchingAtDepth != mad[h.ReplicaID] || f.TotalReplicas != 3 {
			t.Errorf("%s: matching %d/%d, want %d/3", h.ReplicaID, f.MatchingAtDepth, f.TotalReplicas, mad[h.ReplicaID])
		}
		if p := float64(h.MatchedTokens) * f.Freshness * (f.PressureFactor * f.SLOBias * f.DistinguishingPower); p != h.Score {
			t.Errorf("%s: factors multiply to %v, score %v", h.ReplicaID, p, h.Score)
		}
	}
}

// The fallbacks carry the queue of fresh stats too, and explain says why
// they were picked: TENANT_HOT gives the tenant hit rate (its score),
// AFFINITY_HINT marks the rendezvous pick.
func TestLookup_FallbacksCarryQueueAndExplain(t *testing.T) {
	miss := LookupRequest{Partition: vllm, BlockHashes: []uint64{99}, NowMs: t0, Explain: true}

	r := lookup(explainWorld(testPolicy()), miss)
	if r.Reason != TenantHot || len(r.Hints) != 1 || len(r.Factors) != 1 || r.Hints[0].ReplicaID != "a" {
		t.Fatalf("got %v %v (%d factors), want TENANT_HOT a", r.Reason, hintIDs(r), len(r.Factors))
	}
	h, f := r.Hints[0], r.Factors[0]
	approx(t, "tenant-hot score", h.Score, 0.6)
	approx(t, "tenant hit rate", f.TenantHitRate, 0.6)
	approx(t, "tenant-hot pressure factor", f.PressureFactor, 0.8)
	if h.WaitingRequests != 7 || h.RunningRequests != 3 || !f.StatsFresh || f.TotalReplicas != 3 || f.Rendezvous {
		t.Errorf("tenant-hot hint %+v factors %+v", h, f)
	}

	// Affinity: every replica has fresh stats with its own queue, so
	// whichever the rendezvous hash picks must carry its own numbers.
	p := testPolicy()
	p.EnableTenantHot = false
	ix := explainWorld(p)
	queue := map[string]uint32{"a": 10, "b": 20, "c": 30}
	for id, q := range queue {
		ix.ApplyStats([]ReplicaStats{{ReplicaID: id, ModelID: "m", HashSchemes: []string{"vllm"}, ObservedAtMs: t0, WaitingRequests: q, RunningRequests: q + 1}})
	}
	r = lookup(ix, miss)
	if r.Reason != AffinityHint || len(r.Hints) != 1 || len(r.Factors) != 1 {
		t.Fatalf("got %v %v (%d factors), want one AFFINITY_HINT", r.Reason, hintIDs(r), len(r.Factors))
	}
	h, f = r.Hints[0], r.Factors[0]
	if q := queue[h.ReplicaID]; h.WaitingRequests != q || h.RunningRequests != q+1 {
		t.Errorf("affinity %s queue %d/%d, want %d/%d", h.ReplicaID, h.WaitingRequests, h.RunningRequests, q, q+1)
	}
	if !f.Rendezvous || !f.StatsFresh || f.TotalReplicas != 3 || f.TenantHitRate != 0 {
		t.Errorf("affinity factors %+v", f)
	}
	// 31 s later every report is stale: the same pick carries no queue
	// and no pressure.
	late := miss
	late.NowMs = t0 + 31_000
	late.Explain = false
	r = lookup(ix, late)
	if r.Reason != AffinityHint || len(r.Hints) != 1 || len(r.Factors) != 0 {
		t.Fatalf("stale: got %v %v (%d factors)", r.Reason, hintIDs(r), len(r.Factors))
	}
	if h := r.Hints[0]; h.WaitingRequests != 0 || h.RunningRequests != 0 || h.Pressure != 0 {
		t.Errorf("stale stats leaked into the hint: %+v", h)
	}
}

// A hint carries the queue only while the replica's stats are fresh:
// at the statsFreshness edge (30 s) still, one ms later no more.
func TestLookup_QueueOnlyFromFreshStats(t *testing.T) {
	for _, c := range []struct {
		name             string
		now              int64
		waiting, running uint32
	}{
		{"Fresh", t0 + 10_000, 12, 4},
		{"AtFreshnessEdge", t0 + 30_000, 12, 4},
		{"Stale", t0 + 30_001, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ix := New(testPolicy())
			ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2), stored("b", vllm, t0, 9)})
			ix.ApplyStats([]ReplicaStats{{ReplicaID: "a", ModelID: "m", HashSchemes: []string{"vllm"}, ObservedAtMs: t0, WaitingRequests: 12, RunningRequests: 4}})
			r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2}, NowMs: c.now})
			if r.Reason != PrefixMatch || r.Hints[0].ReplicaID != "a" {
				t.Fatalf("got %v %v", r.Reason, hintIDs(r))
			}
			if h := r.Hints[0]; h.WaitingRequests != c.waiting || h.RunningRequests != c.running {
				t.Errorf("queue %d/%d, want %d/%d", h.WaitingRequests, h.RunningRequests, c.waiting, c.running)
			}
		})
	}
}

// Stats without a queue digest exactly as before the queue fields
// existed (the value below was computed by the release before them), so
// older snapshots and backups still verify; a queue changes the digest.
func TestDigest_StatsWithoutQueueUnchanged(t *testing.T) {
	build := func(waiting, running uint32) *Index {
		ix := New(testPolicy())
		ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2, 3)})
		ix.ApplyStats([]ReplicaStats{{ReplicaID: "a", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.25,
			TenantHitRate: map[string]float64{"t": 0.5}, ObservedAtMs: t0, Endpoint: "http://a:8000/metrics",
			WaitingRequests: waiting, RunningRequests: running}})
		return ix
	}
	const before uint64 = 0xfac7c7835ddf03ba
	if d := build(0, 0).Digest(); d != before {
		t.Fatalf("digest %#x, want %#x (the digest of the same state before the queue fields)", d, before)
	}
	seen := map[uint64]bool{before: true}
	for _, q := range [][2]uint32{{1, 0}, {0, 1}, {1, 1}, {2, 3}, {3, 2}} {
		d := build(q[0], q[1]).Digest()
		if seen[d] {
			t.Errorf("queue %v: digest %#x collides", q, d)
		}
		seen[d] = true
	}
}
