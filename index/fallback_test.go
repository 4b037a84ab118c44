package index

import (
	"testing"
)

func TestLookup_Classification(t *testing.T) {
	p := testPolicy()
	p.AffinityRouting = false
	p.EnableTenantHot = false
	ix := New(p)
	ix.ApplyEvents([]BlockEvent{
		stored("a", vllm, t0, 1, 2),
		stored("a", Partition{"vllm", "m", "t", "lora1"}, t0, 1, 2),
	})
	// Stats alone make tenant t3 of vllm/m seen.
	ix.ApplyStats([]ReplicaStats{{ReplicaID: "s", ModelID: "m", HashSchemes: []string{"vllm"}, TenantHitRate: map[string]float64{"t3": 0}, ObservedAtMs: t0}})
	miss := []uint64{77}
	cases := []struct {
		name string
		p    Partition
		now  int64
		want Reason
	}{
		{"UnknownScheme", Partition{"vllm-v1", "m", "t", ""}, t0, UnknownScheme},
		{"UnknownModel", Partition{"vllm", "m2", "t", ""}, t0, UnknownModel},
		{"UnknownTenant", Partition{"vllm", "m", "default", ""}, t0, UnknownTenant},
		{"UnknownAdapter", Partition{"vllm", "m", "t", "lora2"}, t0, UnknownAdapter},
		{"KnownAdapterNovelPrefixIsNoHint", Partition{"vllm", "m", "t", "lora1"}, t0, NoHint},
		{"KnownEverythingNovelPrefixIsNoHint", vllm, t0, NoHint},
		{"EmptyModelNotClassified", Partition{"vllm", "", "t", ""}, t0, NoHint},
		{"EmptyTenantNotClassified", Partition{"vllm", "m", "", "lora9"}, t0, NoHint},
		{"FreshStatsMakeTenantSeen", Partition{"vllm", "m", "t3", ""}, t0 + 30_000, NoHint},
		{"StaleStatsDoNotMakeTenantSeen", Partition{"vllm", "m", "t3", ""}, t0 + 30_001, UnknownTenant},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := lookup(ix, LookupRequest{Partition: c.p, BlockHashes: miss, NowMs: c.now})
			if r.Reason != c.want || len(r.Hints) != 0 {
				t.Fatalf("got %v %v (%s), want %v", r.Reason, hintIDs(r), r.Detail, c.want)
			}
		})
	}
}

func TestLookup_ColdStartIsNoHint(t *testing.T) {
	ix := New(testPolicy())
	r := lookup(ix, LookupRequest{Partition: Partition{"never", "m", "t", ""}, BlockHashes: []uint64{1}, NowMs: t0})
	if r.Reason != NoHint || r.Detail != detailColdStart {
		t.Fatalf("got %v %q, want NO_HINT cold start", r.Reason, r.Detail)
	}
	// Only stale stats: still cold.
	ix.ApplyStats([]ReplicaStats{{ReplicaID: "s", ModelID: "m", HashSchemes: []string{"vllm"}, ObservedAtMs: t0 - 60_000}})
	r = lookup(ix, LookupRequest{Partition: Partition{"never", "m", "t", ""}, BlockHashes: []uint64{1}, NowMs: t0})
	if r.Reason != NoHint || r.Detail != detailColdStart {
		t.Fatalf("got %v %q, want NO_HINT cold start", r.Reason, r.Detail)
	}
}

func TestLookup_TenantHot(t *testing.T) {
	stats := func(id string, at int64, hit float64, schemes ...string) ReplicaStats {
		return ReplicaStats{ReplicaID: id, ModelID: "m", HashSchemes: schemes, TenantHitRate: map[string]float64{"t": hit}, ObservedAtMs: at}
	}
	cases := []struct {
		name    string
		enabled bool
		stats   []ReplicaStats
		want    []string
	}{
		{"FreshAboveFloorIsHot", true, []ReplicaStats{stats("h", t0, 0.5, "vllm")}, []string{"h"}},
		{"HitRateAtFloorIsHot", true, []ReplicaStats{stats("h", t0, 0.2, "vllm")}, []string{"h"}},
		{"HitRateBelowFloorIsNot", true, []ReplicaStats{stats("h", t0, 0.19, "vllm")}, nil},
		{"StaleStatsAreNot", true, []ReplicaStats{stats("h", t0-30_001, 0.9, "vllm")}, nil},
		{"OtherSchemeIsNot", true, []ReplicaStats{stats("h", t0, 0.9, "sglang")}, nil},
		{"DisabledIsNot", false, []ReplicaStats{stats("h", t0, 0.9, "vllm")}, nil},
		{"BestHitRateFirstThenID", true, []ReplicaStats{stats("y", t0, 0.3, "vllm"), stats("x", t0, 0.3, "vllm"), stats("z", t0, 0.6, "vllm")}, []string{"z", "x", "y"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := testPolicy()
			p.EnableTenantHot = c.enabled
			p.AffinityRouting = false
			ix := New(p)
			ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1)}) // makes vllm/m/t seen
			ix.ApplyStats(c.stats)
			r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{99}, NowMs: t0})
			got := hintIDs(r)
			if len(c.want) == 0 {
				if r.Reason != NoHint {
					t.Fatalf("got %v %v, want NO_HINT", r.Reason, got)
				}
				return
			}
			if r.Reason != TenantHot || len(got) != len(c.want) {
				t.Fatalf("got %v %v, want TENANT_HOT %v", r.Reason, got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] || r.Hints[i].MatchedTokens != 0 {
					t.Fatalf("got %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestLookup_AffinityStableAndMovesAboutOneOverN(t *testing.T) {
	p := testPolicy()
	p.EnableTenantHot = false
	ix := New(p)
	var st []ReplicaStats
	for i := 0; i < 8; i++ {
		st = append(st, ReplicaStats{ReplicaID: string(rune('a' + i)), ModelID: "m", HashSchemes: []string{"vllm"}, TenantHitRate: map[string]float64{"t": 0}, ObservedAtMs: t0})
	}
	ix.ApplyStats(st)
	const keys = 10_000
	before := make([]string, keys)
	var r Result
	for k := range keys {
		req := LookupRequest{Partition: vllm, PrefixHash: uint64(k)*0x9e3779b97f4a7c15 + 1, HasPrefixHash: true, NowMs: t0}
		ix.Lookup(&req, &r)
		if r.Reason != AffinityHint || len(r.Hints) != 1 {
			t.Fatalf("key %d: got %v %v", k, r.Reason, hintIDs(r))
		}
		before[k] = r.Hints[0].ReplicaID
		ix.Lookup(&req, &r)
		if r.Hints[0].ReplicaID != before[k] {
			t.Fatalf("key %d not stable", k)
		}
	}
	ix.ApplyStats([]ReplicaStats{{ReplicaID: "new", ModelID: "m", HashSchemes: []string{"vllm"}, ObservedAtMs: t0}})
	moved := 0
	for k := range keys {
		req := LookupRequest{Partition: vllm, PrefixHash: uint64(k)*0x9e3779b97f4a7c15 + 1, HasPrefixHash: true, NowMs: t0}
		ix.Lookup(&req, &r)
		if got := r.Hints[0].ReplicaID; got != before[k] {
			moved++
			if got != "new" {
				t.Fatalf("key %d moved %s → %s, not to the joining replica", k, before[k], got)
			}
		}
	}
	// Expected 10,000/9 ≈ 1,111; allow ±20 %.
	if moved < 889 || moved > 1333 {
		t.Fatalf("moved %d of %d keys, want about 1111", moved, keys)
	}
}
