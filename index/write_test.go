package index

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/inference-cache/inference-cache/policy"
)

func holders(ix *Index, p Partition, h uint64, now int64) []string {
	p2 := testPolicy()
	p2.RankingVersion = policy.RankingV1
	cur := ix.pol.Load().p
	p2.EvictionPolicy, p2.MaxResidencies = cur.EvictionPolicy, cur.MaxResidencies
	saved := ix.pol.Load()
	ix.pol.Store(newPolState(p2))
	defer ix.pol.Store(saved)
	r := lookup(ix, LookupRequest{Partition: p, BlockHashes: []uint64{h}, MaxReplicas: 64, NowMs: now})
	if r.Reason != PrefixMatch {
		return nil
	}
	return hintIDs(r)
}

func TestApply_InvalidEventsSkipped(t *testing.T) {
	cases := []struct {
		name string
		ev   BlockEvent
	}{
		{"EmptyScheme", stored("a", Partition{"", "m", "t", ""}, t0, 1)},
		{"EmptyModel", stored("a", Partition{"vllm", "", "t", ""}, t0, 1)},
		{"EmptyReplica", stored("", vllm, t0, 1)},
		{"LengthMismatch", BlockEvent{Kind: Stored, ReplicaID: "a", Partition: vllm, BlockHashes: []uint64{1, 2}, BlockTokenCounts: []uint32{16}}},
		{"ZeroCount", BlockEvent{Kind: Stored, ReplicaID: "a", Partition: vllm, BlockHashes: []uint64{1}, BlockTokenCounts: []uint32{0}}},
		{"UnknownKind", BlockEvent{Kind: 9, ReplicaID: "a", Partition: vllm, BlockHashes: []uint64{1}, BlockTokenCounts: []uint32{16}}},
		{"RemovedOfUnknown", BlockEvent{Kind: Removed, ReplicaID: "a", Partition: vllm, BlockHashes: []uint64{1}}},
		{"ClearedOfUnknown", BlockEvent{Kind: Cleared, ReplicaID: "zz"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix := New(testPolicy())
			empty := ix.Digest()
			if n := ix.ApplyEvents([]BlockEvent{c.ev}); n != 0 {
				t.Fatalf("changed %d events, want 0", n)
			}
			if ix.Digest() != empty || ix.Sizes() != (Sizes{}) {
				t.Fatalf("state changed: %+v", ix.Sizes())
			}
		})
	}
}

func TestApply_StoredIsIdempotentAndKeepsNewestLastSeen(t *testing.T) {
	ix := New(testPolicy())
	ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2)})
	d := ix.Digest()
	// A replay, and an older observation, change nothing.
	if n := ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2), stored("a", vllm, t0-5, 1, 2)}); n != 0 || ix.Digest() != d {
		t.Fatalf("replay changed state (%d events)", n)
	}
	if got := ix.Sizes(); got != (Sizes{Partitions: 1, Blocks: 2, Residencies: 2, Replicas: 1}) {
		t.Fatalf("sizes %+v", got)
	}
}

func TestApply_RemovedAndCleared(t *testing.T) {
	other := Partition{"sglang", "m", "t", ""}
	ix := New(testPolicy())
	ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2), stored("b", vllm, t0, 1), stored("a", other, t0, 5)})
	ix.ApplyEvents([]BlockEvent{{Kind: Removed, ReplicaID: "a", Partition: vllm, BlockHashes: []uint64{2}}})
	// Block 2 had only a: gone. 3 blocks → 2, 4 residencies → 3.
	if got := ix.Sizes(); got != (Sizes{Partitions: 2, Blocks: 2, Residencies: 3, Replicas: 2}) {
		t.Fatalf("after remove: %+v", got)
	}
	ix.ApplyEvents([]BlockEvent{{Kind: Cleared, ReplicaID: "a"}})
	// a gone from every partition: only (b, vllm block 1) remains.
	if got := ix.Sizes(); got != (Sizes{Partitions: 1, Blocks: 1, Residencies: 1, Replicas: 1}) {
		t.Fatalf("after clear: %+v", got)
	}
	if got := holders(ix, vllm, 1, t0); len(got) != 1 || got[0] != "b" {
		t.Fatalf("holders of block 1: %v", got)
	}
}

func TestExpire_DropsOlderThanTTL(t *testing.T) {
	// TTL 1000 s. Expire(now) drops last_seen < now − 1,000,000.
	cases := []struct {
		name    string
		now     int64
		dropped int
		left    Sizes
	}{
		{"NothingAtTTLBoundary", t0 + 1_000_000, 0, Sizes{1, 2, 3, 2}},
		{"OldestPastTTL", t0 + 1_000_001, 2, Sizes{1, 1, 1, 1}},
		{"AllPastTTL", t0 + 2_000_000, 3, Sizes{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix := New(testPolicy())
			ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2), stored("b", vllm, t0+500_000, 2)})
			if got := ix.Expire(c.now); got != c.dropped {
				t.Fatalf("dropped %d, want %d", got, c.dropped)
			}
			if got := ix.Sizes(); got != c.left {
				t.Fatalf("sizes %+v, want %+v", got, c.left)
			}
		})
	}
}

func TestEvict_CapacityByPolicy(t *testing.T) {
	cases := []struct {
		name    string
		policy  policy.EvictionPolicy
		credits []uint64 // blocks credited before the overflowing insert
		gone    uint64   // the block whose only residency is evicted
	}{
		// Blocks 1,2,3 stored at t0, t0+1, t0+2; block 4 at t0+3
		// overflows a bound of 3.
		{"LRUEvictsOldestLastSeen", policy.LRU, nil, 1},
		// Credits: 1 twice, 2 once → block 3 (access 0, older than 4).
		{"LFUEvictsLeastAccessedThenOldest", policy.LFU, []uint64{1, 1, 2}, 3},
		// Under LRU credits are ignored: still block 1.
		{"LRUIgnoresCredits", policy.LRU, []uint64{1, 1, 2}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := testPolicy()
			p.MaxResidencies = 3
			p.EvictionPolicy = c.policy
			ix := New(p)
			ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1), stored("a", vllm, t0+1, 2), stored("a", vllm, t0+2, 3)})
			ix.Credit(vllm, c.credits)
			ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0+3, 4)})
			if got := ix.Sizes().Residencies; got != 3 {
				t.Fatalf("residencies %d, want 3", got)
			}
			for h := uint64(1); h <= 4; h++ {
				held := len(holders(ix, vllm, h, t0+3)) > 0
				if held == (h == c.gone) {
					t.Errorf("block %d held=%v, want evicted block %d", h, held, c.gone)
				}
			}
		})
	}
}

func TestEvict_TiesBrokenByReplicaID(t *testing.T) {
	// a and b hold block 7 with equal last_seen; c's insert overflows a
	// bound of 2: the tie goes to the smaller replica id, a.
	p := testPolicy()
	p.MaxResidencies = 2
	ix := New(p)
	ix.ApplyEvents([]BlockEvent{stored("b", vllm, t0, 7), stored("a", vllm, t0, 7), stored("c", vllm, t0+5, 8)})
	if got := holders(ix, vllm, 7, t0+5); len(got) != 1 || got[0] != "b" {
		t.Fatalf("holders of 7 = %v, want [b]", got)
	}
}

func TestCredit_OnlyUnderLFU(t *testing.T) {
	for _, c := range []struct {
		name    string
		ep      policy.EvictionPolicy
		credits int // CreditHashes of the lookup
		access  uint64
	}{
		// a's run is blocks 1,2 (top hint): 2 credit hashes; after
		// Credit, block 1's access counter is 1.
		{"LFUCredits", policy.LFU, 2, 1},
		{"LRUNeverCredits", policy.LRU, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testPolicy()
			p.EvictionPolicy = c.ep
			ix := New(p)
			ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2), stored("b", vllm, t0, 5)})
			r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, NowMs: t0})
			if r.Reason != PrefixMatch || len(r.CreditHashes) != c.credits {
				t.Fatalf("got %v credits %v, want %d", r.Reason, r.CreditHashes, c.credits)
			}
			before := ix.Digest()
			ix.Credit(vllm, []uint64{1, 2})
			if (ix.Digest() != before) != (c.ep == policy.LFU) {
				t.Fatalf("digest changed=%v", ix.Digest() != before)
			}
			v := ix.View()
			defer v.Release()
			_ = v.Blocks(func(b BlockRecord) error {
				if b.Hash == 1 && b.Access != c.access {
					t.Errorf("access %d, want %d", b.Access, c.access)
				}
				return nil
			})
		})
	}
}

// randomEvents returns a reproducible mix of events over a few partitions
// and replicas.
func randomEvents(seed uint64, n int) []BlockEvent {
	rng := rand.New(rand.NewPCG(seed, 1))
	parts := []Partition{vllm, {"vllm", "m", "t2", ""}, {"sglang", "m", "t", ""}, {"vllm", "m", "t", "lora"}}
	var evs []BlockEvent
	for i := 0; i < n; i++ {
		p := parts[rng.IntN(len(parts))]
		rep := fmt.Sprintf("r%d", rng.IntN(6))
		k := 1 + rng.IntN(6)
		start := uint64(rng.IntN(40))
		hs := make([]uint64, k)
		for j := range hs {
			hs[j] = start + uint64(j)
		}
		switch x := rng.IntN(20); {
		case x < 15:
			evs = append(evs, stored(rep, p, t0+int64(rng.IntN(100_000)), hs...))
		case x < 19:
			evs = append(evs, BlockEvent{Kind: Removed, ReplicaID: rep, Partition: p, BlockHashes: hs})
		default:
			evs = append(evs, BlockEvent{Kind: Cleared, ReplicaID: rep})
		}
	}
	return evs
}

func TestDigest_IndependentOfOrderAndLayout(t *testing.T) {
	statsA := ReplicaStats{ReplicaID: "r1", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.3,
		TenantHitRate: map[string]float64{"t": 0.5, "t2": 0.1, "u": 0.9}, ObservedAtMs: t0}
	statsB := ReplicaStats{ReplicaID: "r1", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.3,
		TenantHitRate: map[string]float64{"u": 0.9, "t2": 0.1, "t": 0.5}, ObservedAtMs: t0}
	t.Run("SameCallsEqualDigest", func(t *testing.T) {
		a, b := New(testPolicy()), New(testPolicy())
		evs := randomEvents(7, 500)
		a.ApplyEvents(evs)
		for i := range evs { // one call per event instead of one batch
			b.ApplyEvents(evs[i : i+1])
		}
		a.ApplyStats([]ReplicaStats{statsA})
		b.ApplyStats([]ReplicaStats{statsB}) // same stats, other map order
		if a.Digest() != b.Digest() || a.Sizes() != b.Sizes() {
			t.Fatalf("digests %x %x", a.Digest(), b.Digest())
		}
	})
	t.Run("CommutingEventsInOtherOrderEqualDigest", func(t *testing.T) {
		// Different replicas' STORED events commute; interning order and
		// block slots differ between the two indexes.
		a, b := New(testPolicy()), New(testPolicy())
		x, y := stored("x", vllm, t0, 1, 2, 3), stored("y", vllm, t0+1, 2, 3, 4)
		y.PrefixTokensBefore = 16 // block 2 is the second block of both prompts
		z := stored("z", Partition{"sglang", "m", "t", ""}, t0, 1)
		a.ApplyEvents([]BlockEvent{x, y, z})
		b.ApplyEvents([]BlockEvent{z, y, x})
		if a.Digest() != b.Digest() {
			t.Fatalf("digests %x %x", a.Digest(), b.Digest())
		}
	})
	t.Run("DifferentStateDifferentDigest", func(t *testing.T) {
		a, b := New(testPolicy()), New(testPolicy())
		a.ApplyEvents([]BlockEvent{stored("x", vllm, t0, 1)})
		b.ApplyEvents([]BlockEvent{stored("x", vllm, t0+1, 1)})
		if a.Digest() == b.Digest() {
			t.Fatal("different last_seen, equal digests")
		}
	})
}

func TestView_BuilderRoundTripEqualDigest(t *testing.T) {
	ix := New(testPolicy())
	ix.ApplyEvents(randomEvents(3, 800))
	ix.ApplyStats([]ReplicaStats{{ReplicaID: "r2", ModelID: "m", HashSchemes: []string{"vllm", "sglang"}, TenantHitRate: map[string]float64{"t": 0.4}, ObservedAtMs: t0}})
	v := ix.View()
	want, wantSizes := ix.Digest(), ix.Sizes()
	if v.Digest() != want || v.Sizes() != wantSizes {
		t.Fatalf("view digest %x sizes %+v, index %x %+v", v.Digest(), v.Sizes(), want, wantSizes)
	}
	// The writer keeps going: the view must not see it.
	ix.ApplyEvents(randomEvents(4, 300))
	ix.Expire(t0 + 1_050_000)

	b := NewBuilder(v.Policy())
	if err := v.Blocks(b.AddBlock); err != nil {
		t.Fatal(err)
	}
	if err := v.Stats(b.AddStats); err != nil {
		t.Fatal(err)
	}
	v.Release()
	got := b.Build()
	if got.Digest() != want || got.Sizes() != wantSizes {
		t.Fatalf("rebuilt digest %x sizes %+v, want %x %+v", got.Digest(), got.Sizes(), want, wantSizes)
	}
	// A second export of the rebuilt index is identical record by record.
	var first, second []string
	v1, v2 := got.View(), got.View()
	_ = v1.Blocks(func(r BlockRecord) error { first = append(first, fmt.Sprint(r)); return nil })
	_ = v2.Blocks(func(r BlockRecord) error { second = append(second, fmt.Sprint(r)); return nil })
	v1.Release()
	v2.Release()
	if fmt.Sprint(first) != fmt.Sprint(second) || len(first) != wantSizes.Blocks {
		t.Fatalf("exports differ or wrong count (%d vs %d)", len(first), wantSizes.Blocks)
	}
}

func TestBuilder_RejectsInvalidRecords(t *testing.T) {
	ok := BlockRecord{Partition: vllm, Hash: 1, Tokens: 16, CumTokens: 16, Residents: []Residency{{"a", t0}}}
	cases := []struct {
		name string
		r    BlockRecord
	}{
		{"EmptyScheme", BlockRecord{Partition: Partition{Model: "m"}, Hash: 1, Tokens: 16, Residents: []Residency{{"a", t0}}}},
		{"ZeroTokens", BlockRecord{Partition: vllm, Hash: 2, Residents: []Residency{{"a", t0}}}},
		{"NoResidents", BlockRecord{Partition: vllm, Hash: 3, Tokens: 16}},
		{"EmptyReplica", BlockRecord{Partition: vllm, Hash: 4, Tokens: 16, Residents: []Residency{{"", t0}}}},
		{"DuplicateReplica", BlockRecord{Partition: vllm, Hash: 5, Tokens: 16, Residents: []Residency{{"a", t0}, {"a", t0}}}},
		{"DuplicateBlock", ok},
	}
	b := NewBuilder(testPolicy())
	if err := b.AddBlock(ok); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := b.AddBlock(c.r); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestLookup_ConcurrentWithWriter(t *testing.T) {
	ix := New(testPolicy())
	ix.ApplyEvents(randomEvents(1, 200))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			var r Result
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := uint64(rng.IntN(40))
				req := LookupRequest{Partition: vllm, BlockHashes: []uint64{s, s + 1, s + 2}, NowMs: t0 + 50_000}
				ix.Lookup(&req, &r)
				if r.Detail == detailPanic {
					t.Error("lookup panicked")
					return
				}
				_ = ix.Sizes()
			}
		}(g)
	}
	for i := uint64(0); i < 30; i++ {
		ix.ApplyEvents(randomEvents(100+i, 100))
		v := ix.View()
		ix.ApplyEvents(randomEvents(200+i, 50))
		_ = v.Blocks(func(BlockRecord) error { return nil })
		v.Release()
		ix.ApplyStats([]ReplicaStats{{ReplicaID: "r1", ModelID: "m", HashSchemes: []string{"vllm"}, ObservedAtMs: t0 + int64(i)}})
		ix.Expire(t0 + 1_000_000 + int64(i)*1000)
		_ = ix.Digest()
	}
	close(stop)
	wg.Wait()
}

// The policy's EvictionBatch sets how far a full index evicts at once:
// 0 keeps the 1/64 of earlier releases (a cluster upgraded without
// setting it evicts exactly as before), 16 evicts 1/16; the victims are
// the oldest either way.
func TestEvict_BatchFromPolicy(t *testing.T) {
	cases := []struct {
		batch uint32
		after int // residencies once the 129th is stored into a bound of 128
	}{
		{0, 128 - 128/64},
		{16, 128 - 128/16},
		{4, 128 - 128/4},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.batch), func(t *testing.T) {
			p := testPolicy()
			p.MaxResidencies = 128
			p.EvictionBatch = c.batch
			ix := New(p)
			for h := uint64(1); h <= 129; h++ {
				ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0+int64(h), h)})
			}
			if got := ix.Sizes().Residencies; got != c.after {
				t.Fatalf("residencies %d, want %d", got, c.after)
			}
			gone := 129 - c.after // the oldest blocks, 1..gone
			for h := uint64(1); h <= 129; h++ {
				if held := len(holders(ix, vllm, h, t0+200)) > 0; held != (h > uint64(gone)) {
					t.Fatalf("block %d held=%v; want the %d oldest evicted", h, held, gone)
				}
			}
		})
	}
	// The knob is replicated state: it is in the digest, but only when set.
	p := testPolicy()
	d0 := New(p).Digest()
	p.EvictionBatch = 16
	if New(p).Digest() == d0 {
		t.Fatal("EvictionBatch does not change the digest")
	}
}
