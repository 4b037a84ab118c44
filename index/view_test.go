package index

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/policy"
)

// manyShardEvents stores n random single-block events over a few replicas
// and partitions, enough to populate every shard.
func manyShardEvents(seed uint64, n int, seen int64) []BlockEvent {
	rng := rand.New(rand.NewPCG(seed, 7))
	parts := []Partition{vllm, {"vllm", "m", "t2", ""}, {"sglang", "m", "t", "lora"}}
	evs := make([]BlockEvent, 0, n)
	for i := 0; i < n; i++ {
		hs := []uint64{rng.Uint64(), rng.Uint64()}
		evs = append(evs, stored(fmt.Sprintf("r%d", rng.IntN(5)), parts[rng.IntN(len(parts))], seen+int64(rng.IntN(1000)), hs...))
	}
	return evs
}

func exportStrings(t *testing.T, v *View) []string {
	t.Helper()
	var out []string
	if err := v.Blocks(func(r BlockRecord) error {
		out = append(out, fmt.Sprint(r)) // copies Residents (valid only during the call)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// With every shard populated, the export's block locators need more than
// 32 bits (shard << 24 | block index with 12 shard bits): a uint32 locator
// indexed out of range here.
func TestView_BlocksWithEveryShardPopulated(t *testing.T) {
	ix := New(testPolicy())
	ix.ApplyEvents(manyShardEvents(1, 40_000, t0))
	for i := range ix.shards {
		if ix.shards[i].d.nBlocks == 0 {
			t.Fatalf("shard %d empty: the test needs every shard populated", i)
		}
	}
	if numShards <= 256 {
		t.Fatalf("numShards = %d: this test is about more than 8 shard bits", numShards)
	}
	v := ix.View()
	defer v.Release()
	var n, res int
	var prev BlockRecord
	b := NewBuilder(v.Policy())
	err := v.Blocks(func(r BlockRecord) error {
		if n > 0 && comparePartition(&prev.Partition, &r.Partition) == 0 && prev.Hash >= r.Hash {
			t.Fatalf("record %d: hash %#x after %#x in one partition", n, r.Hash, prev.Hash)
		}
		if n > 0 && comparePartition(&prev.Partition, &r.Partition) > 0 {
			t.Fatalf("record %d: partition %+v after %+v", n, r.Partition, prev.Partition)
		}
		for i := 1; i < len(r.Residents); i++ {
			if r.Residents[i-1].ReplicaID >= r.Residents[i].ReplicaID {
				t.Fatalf("residents out of order: %+v", r.Residents)
			}
		}
		prev = r
		n++
		res += len(r.Residents)
		return b.AddBlock(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	if sz := v.Sizes(); n != sz.Blocks || res != sz.Residencies {
		t.Fatalf("exported %d blocks / %d residencies, want %+v", n, res, sz)
	}
	if got := b.Build(); got.Digest() != v.Digest() || got.Sizes() != v.Sizes() {
		t.Fatalf("rebuilt %x %+v, want %x %+v", got.Digest(), got.Sizes(), v.Digest(), v.Sizes())
	}
}

// A view must not change while the writer keeps mutating the shards in
// place (undo log): every kind of write, over every shard, including a
// second view taken and released in between.
func TestView_UnchangedByLaterWrites(t *testing.T) {
	p := testPolicy()
	p.EvictionPolicy = policy.LFU
	ix := New(p)
	ix.ApplyEvents(manyShardEvents(2, 20_000, t0))
	ix.ApplyStats([]ReplicaStats{{ReplicaID: "r1", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.5, ObservedAtMs: t0}})
	v := ix.View()
	defer v.Release()
	want := exportStrings(t, v)
	wantDigest, wantSizes := v.Digest(), v.Sizes()

	// Refresh, extend, remove, clear, credit, expire, evict, new stats.
	ix.ApplyEvents(manyShardEvents(3, 10_000, t0+500_000))
	evs := manyShardEvents(2, 20_000, t0+600_000) // same blocks as the view's
	ix.ApplyEvents(evs[:5000])
	for i := range evs[5000:8000] {
		evs[5000+i].Kind = Removed
	}
	ix.ApplyEvents(evs[5000:8000])
	v2 := ix.View()
	ix.Credit(vllm, evs[9000].BlockHashes)
	ix.ApplyEvents([]BlockEvent{{Kind: Cleared, ReplicaID: "r2"}})
	v2.Release()
	ix.Expire(t0 + int64(time.Second/time.Millisecond)*1000 + 550_000)
	p.MaxResidencies = uint64(ix.Sizes().Residencies / 2)
	ix.SetPolicy(p)
	ix.ApplyStats([]ReplicaStats{{ReplicaID: "r1", ModelID: "m", HashSchemes: []string{"sglang"}, ObservedAtMs: t0 + 1}})
	if ix.Digest() == wantDigest {
		t.Fatal("the writes did not change the index")
	}

	got := exportStrings(t, v)
	if len(got) != len(want) {
		t.Fatalf("view exports %d blocks after the writes, %d before", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("record %d changed:\n%s\n%s", i, want[i], got[i])
		}
	}
	if v.Digest() != wantDigest || v.Sizes() != wantSizes {
		t.Fatal("view digest or sizes changed")
	}
	b := NewBuilder(v.Policy())
	if err := v.Blocks(b.AddBlock); err != nil {
		t.Fatal(err)
	}
	if err := v.Stats(b.AddStats); err != nil {
		t.Fatal(err)
	}
	if got := b.Build(); got.Digest() != wantDigest || got.Sizes() != wantSizes {
		t.Fatalf("rebuilt from the view: %x %+v, want %x %+v", got.Digest(), got.Sizes(), wantDigest, wantSizes)
	}
}

// The builder batches meta counts per partition: rejected records in the
// middle of a partition, stats in between, and a partition created only
// by a rejected record must leave the same state as applying the valid
// records one by one.
func TestBuilder_BatchedCountsWithRejects(t *testing.T) {
	p2 := Partition{Scheme: "vllm", Model: "m", Tenant: "t2"}
	q := Partition{Scheme: "vllm", Model: "m", Tenant: "only-rejected"}
	st := ReplicaStats{ReplicaID: "c", ModelID: "m", HashSchemes: []string{"vllm"}, ObservedAtMs: t0}
	b := NewBuilder(testPolicy())
	steps := []struct {
		r  BlockRecord
		ok bool
	}{
		{BlockRecord{Partition: vllm, Hash: 1, Tokens: 16, CumTokens: 16, Residents: []Residency{{"a", t0}, {"b", t0}}}, true},
		{BlockRecord{Partition: vllm, Hash: 2, Tokens: 16, CumTokens: 32, Residents: []Residency{{"a", t0}}}, true},
		{BlockRecord{Partition: vllm, Hash: 1, Tokens: 16, CumTokens: 16, Residents: []Residency{{"a", t0}}}, false},
		{BlockRecord{Partition: q, Hash: 9, Tokens: 16, Residents: []Residency{{"a", t0}, {"a", t0}}}, false},
		{BlockRecord{Partition: vllm, Hash: 3, Tokens: 16, CumTokens: 48, Residents: []Residency{{"a", t0}, {"b", t0}, {"c", t0}}}, true},
		{BlockRecord{Partition: p2, Hash: 1, Tokens: 16, CumTokens: 16, Residents: []Residency{{"c", t0}}}, true},
	}
	for i, s := range steps {
		if err := b.AddBlock(s.r); (err == nil) != s.ok {
			t.Fatalf("step %d: err %v, want ok=%v", i, err, s.ok)
		}
		if i == 1 {
			if err := b.AddStats(st); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := b.Build()

	want := New(testPolicy())
	at3 := func(rep string) BlockEvent { ev := stored(rep, vllm, t0, 3); ev.PrefixTokensBefore = 32; return ev }
	want.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2, 3), stored("b", vllm, t0, 1), at3("b"), at3("c")})
	want.ApplyStats([]ReplicaStats{st})
	want.ApplyEvents([]BlockEvent{stored("c", p2, t0, 1)})
	if got.Digest() != want.Digest() || got.Sizes() != want.Sizes() {
		t.Fatalf("built %x %+v, want %x %+v", got.Digest(), got.Sizes(), want.Digest(), want.Sizes())
	}
	if _, ok := got.m.parts[q]; ok {
		t.Fatal("a partition only a rejected record named was kept")
	}
	r := lookup(got, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, NowMs: t0})
	if r.Reason != PrefixMatch || len(r.Hints) == 0 || r.Hints[0].ReplicaID != "a" {
		t.Fatalf("lookup on the built index: %v %v", r.Reason, hintIDs(r))
	}
}
