package index

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// Tests of matchChain's batched walk (lookup.go): it must give exactly what
// the plain block-by-block walk gives, across batch boundaries, tag
// collisions, repeated blocks and a concurrent writer.

// refMatchChain is the plain leading-run walk: one find per block, in
// chain order (the algorithm before the batched walk).
func refMatchChain(ix *Index, pe *partEnt, chain []uint64, counts []uint32, uniform uint32) []cand {
	var cs []cand
	alive := 0
	for i, h := range chain {
		cnt := uniform
		if len(counts) > 0 {
			cnt = counts[i]
		}
		mx := keyMix(pe.id, h)
		d := ix.shards[shardOf(mx)].d
		bi, _ := d.find(pe.id, h, mx)
		if bi < 0 {
			break
		}
		rs := d.residents(&d.blocks[bi])
		if i == 0 {
			for _, r := range rs {
				cs = append(cs, cand{rep: resRep(r), depth: 1, tokens: uint64(cnt), minSeen: resSeen(r), alive: true})
			}
			alive = len(cs)
			continue
		}
		before := uint32(alive)
		for ci := range cs {
			c := &cs[ci]
			if !c.alive {
				continue
			}
			j := slices.IndexFunc(rs, func(r uint64) bool { return resRep(r) == c.rep })
			if j < 0 {
				c.alive, c.mad = false, before
				alive--
				continue
			}
			c.depth++
			c.tokens += uint64(cnt)
			c.minSeen = min(c.minSeen, resSeen(rs[j]))
		}
		if alive == 0 {
			break
		}
	}
	for ci := range cs {
		if cs[ci].alive {
			cs[ci].mad, cs[ci].alive = uint32(alive), false
		}
	}
	return cs
}

func checkWalk(t *testing.T, ix *Index, name string, chain []uint64, counts []uint32) {
	t.Helper()
	pe := ix.m.parts[vllm]
	want := refMatchChain(ix, pe, chain, counts, 16)
	var res Result
	ix.metaMu.RLock()
	n := ix.matchChain(pe, chain, counts, 16, &res)
	ix.metaMu.RUnlock()
	got := res.cands[:n]
	if len(got) != len(want) || (len(want) > 0 && !slices.Equal(got, want)) {
		t.Fatalf("%s: batched walk %+v, plain walk %+v", name, got, want)
	}
}

func TestMatchChain_BatchedEqualsPlainWalk(t *testing.T) {
	ix := New(testPolicy())
	rng := rand.New(rand.NewPCG(7, 7))
	const L = 3*walkBatch + 5
	base := make([]uint64, L)
	for i := range base {
		base[i] = rng.Uint64()
	}
	// Replica i holds base[:lens[i]]: runs end just before, at and after
	// the batch boundaries.
	lens := []int{1, walkBatch - 1, walkBatch, walkBatch + 1, 2 * walkBatch, 2*walkBatch + 1, L}
	for i, n := range lens {
		ev := stored(fmt.Sprintf("r%d", i), vllm, t0+int64(i)*1000, base[:n]...)
		ix.ApplyEvents([]BlockEvent{ev})
	}
	// A replica holding a later part only, and one with a hole at a batch
	// boundary.
	ix.ApplyEvents([]BlockEvent{
		stored("late", vllm, t0, base[walkBatch:]...),
		stored("hole", vllm, t0+5, base...),
		{Kind: Removed, ReplicaID: "hole", Partition: vllm, BlockHashes: []uint64{base[walkBatch]}},
	})
	counts := make([]uint32, L)
	for i := range counts {
		counts[i] = uint32(1 + rng.IntN(100))
	}
	for n := 1; n <= L; n++ {
		checkWalk(t, ix, fmt.Sprintf("prefix %d", n), base[:n], nil)
		checkWalk(t, ix, fmt.Sprintf("prefix %d with counts", n), base[:n], counts[:n])
	}
	for _, at := range []int{0, 1, walkBatch - 1, walkBatch, walkBatch + 1, 2 * walkBatch, L - 1} {
		ch := slices.Clone(base)
		ch[at] = rng.Uint64() // a block nobody holds
		checkWalk(t, ix, fmt.Sprintf("foreign block at %d", at), ch, nil)
	}
	// Repeated blocks: the same shard many times in one batch (its read
	// lock must be taken once).
	rep := []uint64{base[0], base[0], base[1], base[0], base[1], base[1]}
	checkWalk(t, ix, "repeated blocks", rep, nil)
	checkWalk(t, ix, "absent", []uint64{rng.Uint64(), base[0]}, nil)
	// Through Lookup too: the full-length holder wins with all blocks.
	r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: base, NowMs: t0 + 10_000})
	if r.Reason != PrefixMatch || r.Hints[0].MatchedBlocks != L {
		t.Fatalf("lookup: %v %+v", r.Reason, r.Hints)
	}
}

// TestMatchChain_TagCollision forces three keys with the same shard, home
// slot and 8-bit tag: the walk's candidate is then a foreign entry and it
// must probe on (present key) or prove absence (absent key).
func TestMatchChain_TagCollision(t *testing.T) {
	ix := New(testPolicy())
	ix.ApplyEvents([]BlockEvent{stored("x", vllm, t0, 1)}) // creates the partition
	pid := ix.m.parts[vllm].id
	type key struct {
		shard int
		tag   uint64
		home  uint64
	}
	seen := map[key][]uint64{}
	var hs []uint64
	for h := uint64(1000); hs == nil; h++ {
		m := keyMix(pid, h)
		k := key{shardOf(m), m >> 56, (m >> shardBits) & (minTableSize - 1)}
		if seen[k] = append(seen[k], h); len(seen[k]) == 3 {
			hs = seen[k]
		}
	}
	if d := ix.shards[shardOf(keyMix(pid, hs[0]))].d; len(d.table) != minTableSize {
		t.Fatalf("table size %d, want %d", len(d.table), minTableSize)
	}
	ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, hs[0]), stored("b", vllm, t0, hs[1])})
	for _, c := range []struct {
		chain []uint64
		want  []string
	}{
		{[]uint64{hs[0]}, []string{"a"}},
		{[]uint64{hs[1]}, []string{"b"}},
		{[]uint64{hs[2]}, nil},
		{[]uint64{hs[1], hs[2]}, []string{"b"}},
	} {
		checkWalk(t, ix, fmt.Sprint(c.chain), c.chain, nil)
		r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: c.chain, NowMs: t0})
		if got := hintIDs(r); (c.want == nil && r.Reason == PrefixMatch) || (c.want != nil && !slices.Equal(got, c.want)) {
			t.Fatalf("chain %v: got %v %v, want %v", c.chain, r.Reason, got, c.want)
		}
	}
}

// TestMatchChain_ConcurrentWriterMovesTables runs long-chain lookups
// (several batches, repeated blocks) while the writer grows and shrinks
// tables (inserts, backward-shift deletes), moves residency runs between
// size classes, saves pre-images for open views and expires. A chain held by
// "stable" and never written must always match in full.
func TestMatchChain_ConcurrentWriterMovesTables(t *testing.T) {
	ix := New(testPolicy())
	rng := rand.New(rand.NewPCG(3, 3))
	const L = 2*walkBatch + 7
	stable := make([]uint64, L)
	for i := range stable {
		stable[i] = rng.Uint64()
	}
	ix.ApplyEvents([]BlockEvent{stored("stable", vllm, t0+1_000_000, stable...)})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r Result
			rep := append(slices.Clone(stable[:walkBatch]), stable[:walkBatch]...) // every shard twice
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				req := LookupRequest{Partition: vllm, BlockHashes: stable, NowMs: t0 + 1_000_000}
				ix.Lookup(&req, &r)
				i := slices.IndexFunc(r.Hints, func(h Hint) bool { return h.ReplicaID == "stable" })
				if r.Reason != PrefixMatch || i < 0 || r.Hints[i].MatchedBlocks != L {
					t.Errorf("reader %d: stable chain: %v %s %+v", g, r.Reason, r.Detail, r.Hints)
					return
				}
				req.BlockHashes = rep
				ix.Lookup(&req, &r)
				if r.Detail == detailPanic {
					t.Errorf("reader %d: lookup panicked", g)
					return
				}
			}
		}()
	}
	for round := range 40 {
		var evs []BlockEvent
		var fresh []uint64
		for i := range 300 {
			h := rng.Uint64()
			fresh = append(fresh, h)
			seen := t0 + int64(round*1000+i)
			evs = append(evs, stored(fmt.Sprintf("w%d", i%12), vllm, seen, h, rng.Uint64()))
			// Other replicas on the stable blocks: their residency runs
			// grow into larger classes and move.
			a := rng.IntN(L)
			evs = append(evs, stored(fmt.Sprintf("w%d", i%12), vllm, seen, stable[a:min(L, a+3)]...))
		}
		ix.ApplyEvents(evs)
		v := ix.View()
		ix.ApplyEvents([]BlockEvent{{Kind: Removed, ReplicaID: "w1", Partition: vllm, BlockHashes: fresh}})
		v.Release()
		for i := range 12 {
			ix.ApplyEvents([]BlockEvent{{Kind: Removed, ReplicaID: fmt.Sprintf("w%d", i), Partition: vllm, BlockHashes: stable}})
		}
		ix.Expire(t0 + 1_000_000 + int64(round)*1000) // drops the older writes, not "stable"
	}
	close(stop)
	wg.Wait()
}
