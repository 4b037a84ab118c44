package index

import (
	"cmp"
	"slices"
)

// Expiry and the capacity bound (contract §6.7, §6.8). Both are scans over the shards,
// run on the writer goroutine one shard at a time: a lookup waits at most
// for one shard's scan (~1/4,096 of the index), never for the whole pass.

// Expire drops residencies with last_seen older than nowMs − EvictionTTL
// (writer only), then blocks and partitions left empty; returns how many
// residencies were dropped.
func (ix *Index) Expire(nowMs int64) int {
	ix.reclaimViews()
	cutoff := nowMs - ix.pol.Load().ttlMs
	deltas := map[partRep]int64{}
	var dBlk int64
	dropped := 0
	for si := range ix.shards {
		s := &ix.shards[si]
		// A read-only pass first (the writer may read its own data without
		// the lock): most shards have nothing to drop, and need neither the
		// write lock nor an undo log.
		if !s.d.anyOlder(cutoff) {
			continue
		}
		d := ix.lockW(si)
		for bi := range d.blocks {
			b := &d.blocks[bi]
			if b.part == 0 {
				continue
			}
			pe := ix.m.partsByID[b.part]
			for j := 0; j < int(b.resN); {
				r := d.res[b.resOff+uint32(j)]
				if resSeen(r) >= cutoff {
					j++
					continue
				}
				rep := resRep(r)
				d.digest -= residencyDigest(pe.hash, b.hash, ix.m.reps.hashes[rep], resSeen(r))
				d.removeResidentAt(bi, j) // swaps the last one into j: re-check j
				deltas[partRep{b.part, rep}]--
				dropped++
			}
			dBlk -= d.dropIfNoResidents(bi, pe.hash)
		}
		s.mu.Unlock()
	}
	ix.commitDeltas(deltas, dBlk)
	return dropped
}

func (d *shardData) anyOlder(cutoff int64) bool {
	for _, r := range d.res {
		if r != 0 && resSeen(r) < cutoff {
			return true
		}
	}
	return false
}

// evictKey orders residencies for eviction, smallest first: LRU by
// last_seen; LFU by the block's access counter, then last_seen.
func evictKey(lfu bool, access uint32, r uint64) uint64 {
	if lfu {
		return uint64(access)<<44 | uint64(resSeen(r))
	}
	return uint64(resSeen(r))
}

// evictSlack is the eviction batch of a policy whose EvictionBatch is 0:
// a full index evicts 1/64 of MaxResidencies at once. At 1/64 a full index
// applies new blocks ~5× slower than below the bound
// (BenchmarkApplyBatch/new-at-capacity), most of it in this pass; 1/16
// measured 2.3× faster for ~3 % of the bound left unused on average. The
// default stays: which residencies a node evicts is replicated state, so
// a different default in a new binary would make the nodes of a rolling
// upgrade diverge. The policy's EvictionBatch, committed through the log,
// changes it on every node at the same index.
const evictSlack = 64

// enforceCapacity evicts when the index holds more than MaxResidencies.
// It evicts down to MaxResidencies − MaxResidencies/batch at once (batch
// = the policy's EvictionBatch, 0 = evictSlack): the selection costs
// O(residencies), so its amortised cost per inserted residency is batch
// scans of one residency (for bounds under batch it is exact).
// The victims are exactly the k smallest by evictKey, ties broken by
// (partition strings, block hash, replica id): replicated state only, so
// every node evicts the same residencies whatever its internal layout.
func (ix *Index) enforceCapacity() {
	ps := ix.pol.Load()
	max := int64(ps.p.MaxResidencies)
	if max <= 0 || ix.m.totalRes <= max {
		return
	}
	target := max - max/ps.evictBatch
	k := int(ix.m.totalRes - target)
	t, less := ix.evictThreshold(ps.lfu, k)
	deltas := map[partRep]int64{}
	ties, dBlk := ix.evictBelow(ps.lfu, t, deltas)
	need := min(k-less, len(ties))
	if need > 0 {
		dBlk += ix.evictTies(ties, need, deltas)
	}
	ix.commitDeltas(deltas, dBlk)
}

// evictTie is a residency whose eviction key equals the threshold.
type evictTie struct {
	part uint32
	hash uint64
	rep  uint32
}

// evictThreshold is pass 1 of enforceCapacity: the k-th smallest eviction
// key T over every residency, and how many keys are smaller than T.
func (ix *Index) evictThreshold(lfu bool, k int) (t uint64, less int) {
	keys := make([]uint64, 0, ix.m.totalRes)
	for si := range ix.shards {
		d := ix.shards[si].d
		for bi := range d.blocks {
			b := &d.blocks[bi]
			if b.part == 0 {
				continue
			}
			for _, r := range d.residents(b) {
				keys = append(keys, evictKey(lfu, b.access, r))
			}
		}
	}
	t = quickselect(keys, k-1)
	for _, v := range keys {
		if v < t {
			less++
		}
	}
	return t, less
}

// evictBelow is pass 2 of enforceCapacity: it evicts every residency
// whose key is below t, counting the removals into deltas, and returns the
// residencies whose key equals t and the change in the block count.
func (ix *Index) evictBelow(lfu bool, t uint64, deltas map[partRep]int64) ([]evictTie, int64) {
	var ties []evictTie
	var dBlk int64
	for si := range ix.shards {
		s := &ix.shards[si]
		d := ix.lockW(si)
		for bi := range d.blocks {
			b := &d.blocks[bi]
			if b.part == 0 {
				continue
			}
			pe := ix.m.partsByID[b.part]
			for j := 0; j < int(b.resN); {
				r := d.res[b.resOff+uint32(j)]
				key := evictKey(lfu, b.access, r)
				if key > t {
					j++
					continue
				}
				if key == t {
					ties = append(ties, evictTie{b.part, b.hash, resRep(r)})
					j++
					continue
				}
				rep := resRep(r)
				d.digest -= residencyDigest(pe.hash, b.hash, ix.m.reps.hashes[rep], resSeen(r))
				d.removeResidentAt(bi, j)
				deltas[partRep{b.part, rep}]--
			}
			dBlk -= d.dropIfNoResidents(bi, pe.hash)
		}
		s.mu.Unlock()
	}
	return ties, dBlk
}

// evictTies evicts the first need ties in (partition strings, block hash,
// replica id) order, replicated state only, so every node evicts the same
// ones. It counts the removals into deltas and returns the change in the
// block count.
func (ix *Index) evictTies(ties []evictTie, need int, deltas map[partRep]int64) int64 {
	slices.SortFunc(ties, func(a, b evictTie) int {
		pa, pb := &ix.m.partsByID[a.part].p, &ix.m.partsByID[b.part].p
		if c := comparePartition(pa, pb); c != 0 {
			return c
		}
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return cmp.Compare(ix.m.reps.ids[a.rep], ix.m.reps.ids[b.rep])
	})
	var dBlk int64
	for _, v := range ties[:need] {
		pe := ix.m.partsByID[v.part]
		mx := keyMix(v.part, v.hash)
		si := shardOf(mx)
		s := &ix.shards[si]
		d := ix.lockW(si)
		if bi, _ := d.find(v.part, v.hash, mx); bi >= 0 {
			for j, r := range d.residents(&d.blocks[bi]) {
				if resRep(r) == v.rep {
					d.digest -= residencyDigest(pe.hash, v.hash, ix.m.reps.hashes[v.rep], resSeen(r))
					d.removeResidentAt(bi, j)
					deltas[partRep{v.part, v.rep}]--
					dBlk -= d.dropIfNoResidents(bi, pe.hash)
					break
				}
			}
		}
		s.mu.Unlock()
	}
	return dBlk
}

func comparePartition(a, b *Partition) int {
	if c := cmp.Compare(a.Scheme, b.Scheme); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Model, b.Model); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	return cmp.Compare(a.Adapter, b.Adapter)
}

// quickselect returns the value that would be at index k if a were sorted
// (it reorders a). The value is unique, so the pivot choice cannot make
// nodes disagree.
func quickselect(a []uint64, k int) uint64 {
	lo, hi := 0, len(a)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// median of three as the pivot
		if a[mid] < a[lo] {
			a[mid], a[lo] = a[lo], a[mid]
		}
		if a[hi] < a[lo] {
			a[hi], a[lo] = a[lo], a[hi]
		}
		if a[hi] < a[mid] {
			a[hi], a[mid] = a[mid], a[hi]
		}
		p := a[mid]
		i, j := lo, hi
		for i <= j {
			for a[i] < p {
				i++
			}
			for a[j] > p {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k]
		}
	}
	return a[k]
}
