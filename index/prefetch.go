package index

// Memory-level parallelism for ApplyEvents. Applying a block is a chain of
// dependent loads into a large index (slot word → block entry → residency
// run), each a likely cache miss, and a block's chain cannot start before
// the previous block's has finished because its lock and probe come first.
// touchAhead walks the next window of blocks first with plain loads that
// do not depend on each other across blocks, so the CPU overlaps their
// misses; the apply that follows then finds its lines in cache.
//
// It only reads, and only on the writer goroutine: the writer is the sole
// mutator of shard data, so reading without the shard locks cannot race
// (lookups read under read locks, which exclude only writes). The loaded
// values are hints and are never trusted: apply re-reads everything under
// the lock. Partitions that do not exist yet are skipped (their ids are
// assigned by apply, in order).

// touchBlocks is the window of blocks touched ahead: enough to overlap
// many misses, small enough (3 lines a block) to stay in L1/L2 until
// apply reaches them.
const touchBlocks = 64

// touchAhead touches the lines apply will need for the STORED and REMOVED
// events evs[from:end] (at least one event, at most about touchBlocks
// blocks) and returns end.
func (ix *Index) touchAhead(evs []BlockEvent, from int) int {
	var slots [touchBlocks]uint64 // keyMix of each touched block
	n, end := 0, from
	var lastPart *Partition
	var pid uint32
	for end < len(evs) && n < touchBlocks {
		ev := &evs[end]
		end++
		if (ev.Kind != Stored && ev.Kind != Removed) || len(ev.BlockHashes) > touchBlocks-n {
			if n == 0 {
				continue // not touched (nothing of it to load, or too big for a window)
			}
			end-- // does not fit the window: it starts the next one
			break
		}
		if lastPart == nil || *lastPart != ev.Partition {
			pe := ix.m.parts[ev.Partition]
			if pe == nil {
				lastPart = nil
				continue
			}
			lastPart, pid = &ev.Partition, pe.id
		}
		for _, h := range ev.BlockHashes {
			slots[n] = keyMix(pid, h)
			n++
		}
	}
	if n > 0 {
		ix.sink += ix.touchSlots(slots[:n])
	}
	return end
}

// touchItems is touchAhead for the blocks of a parallel apply worker
// (parallel.go), which are all of shards that worker owns.
func (ix *Index) touchItems(items []parItem) uint64 {
	var slots [touchBlocks]uint64
	n := 0
	for i := range items[:min(len(items), touchBlocks)] {
		slots[n] = items[i].mx
		n++
	}
	return ix.touchSlots(slots[:n])
}

// touchSlots loads, level by level, the lines applying the blocks with
// these keyMix values will need, and returns a sum of what it loaded (for
// the caller to keep, so the loads are not optimised away).
func (ix *Index) touchSlots(slots []uint64) uint64 {
	n := len(slots)
	// Level 1: each block's home slot word (and its shard's headers).
	var sink uint64
	for _, m := range slots[:n] {
		d := ix.shards[shardOf(m)].d
		sink += uint64(d.table[(m>>shardBits)&uint64(len(d.table)-1)])
	}
	// Level 2: the block entry the slot points at, or, for an empty home
	// slot (a new block), where insertBlock and allocRun will take its
	// entry and residency run from: the tails of the shard's free lists
	// (a churning index reuses what deletes freed) or else of its slabs.
	var runs [touchBlocks]uint32 // residency run offset + 1 of a found block
	var freeEnt, freeRun [touchBlocks]uint32
	for i, m := range slots[:n] {
		d := ix.shards[shardOf(m)].d
		runs[i], freeEnt[i], freeRun[i] = 0, 0, 0
		if e := d.table[(m>>shardBits)&uint64(len(d.table)-1)]; e != 0 {
			b := &d.blocks[(e&slotIdxMask)-1]
			runs[i] = b.resOff + 1
			sink += b.hash
			continue
		}
		if k := len(d.freeBlocks); k > 0 {
			freeEnt[i] = d.freeBlocks[k-1] + 1
		} else if len(d.blocks) > 0 {
			sink += d.blocks[len(d.blocks)-1].hash
		}
		if fl := d.free[0]; len(fl) > 0 {
			freeRun[i] = fl[len(fl)-1] + 1
		} else if len(d.res) > 0 {
			sink += d.res[len(d.res)-1]
		}
	}
	// Level 3: the residency run of a found block; the free entry and run
	// a new block will take.
	for i, m := range slots[:n] {
		d := ix.shards[shardOf(m)].d
		if r := runs[i]; r != 0 {
			sink += d.res[r-1]
			continue
		}
		if f := freeEnt[i]; f != 0 {
			sink += d.blocks[f-1].hash
		}
		if f := freeRun[i]; f != 0 {
			sink += d.res[f-1]
		}
	}
	return sink
}
