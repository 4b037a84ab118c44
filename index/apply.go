package index

// Write side: events, stats, credits. All of it runs on the single writer
// goroutine and derives every timestamp from its arguments (contract §6.6), so the
// same sequence of calls yields the same state on every node.

// ApplyEvents applies block events in order (writer only) and enforces
// MaxResidencies after each event, so the result does not depend on how a
// caller batches events. Invalid events (empty scheme, model or replica,
// mismatched lengths, zero token counts, unknown kind) are skipped. It
// returns how many events changed state. A large batch of STORED events
// may be applied by several goroutines (SetApplyWorkers, parallel.go), to
// the same result.
func (ix *Index) ApplyEvents(evs []BlockEvent) int {
	var n [1]int
	ix.ApplyEventSegments(evs, []int{len(evs)}, n[:])
	return n[0]
}

// ApplyEventSegments is ApplyEvents over evs cut into segments, segment k
// being evs[ends[k-1]:ends[k]] (ends ascending, the last len(evs)): it
// stores in changed[k] how many events of segment k changed state. The
// state it leaves is ApplyEvents(segment) applied segment after segment;
// one call lets the parallel apply take all segments at once (the FSM
// passes the consecutive ingest commands of a log entry). It panics if
// ends or changed do not fit.
func (ix *Index) ApplyEventSegments(evs []BlockEvent, ends []int, changed []int) {
	if len(ends) == 0 || ends[len(ends)-1] != len(evs) || len(changed) < len(ends) {
		panic("index: ApplyEventSegments: ends must be ascending and end at len(evs), one changed slot per segment")
	}
	clear(changed[:len(ends)])
	ix.reclaimViews()
	for i := range evs {
		if evs[i].Kind == Stored {
			ix.noteObserved(evs[i].ObservedAtMs)
		}
	}
	if ix.applyParallel(evs, ends, changed) {
		return
	}
	next := 0 // evs[:next] are touched (prefetch.go)
	seg := 0
	for i := range evs {
		for i >= ends[seg] {
			seg++
		}
		if i == next {
			next = ix.touchAhead(evs, i)
		}
		ev := &evs[i]
		var ch bool
		switch ev.Kind {
		case Stored:
			ch = ix.applyStored(ev)
		case Removed:
			ch = ix.applyRemoved(ev)
		case Cleared:
			ch = ix.applyCleared(ev.ReplicaID)
		}
		if ch {
			changed[seg]++
			ix.enforceCapacity()
		}
	}
}

// validBlocks reports whether a STORED event is well formed.
func validStored(ev *BlockEvent) bool {
	if ev.Partition.Scheme == "" || ev.Partition.Model == "" || ev.ReplicaID == "" {
		return false
	}
	if len(ev.BlockHashes) == 0 || len(ev.BlockHashes) != len(ev.BlockTokenCounts) {
		return false
	}
	for _, c := range ev.BlockTokenCounts {
		if c == 0 {
			return false
		}
	}
	return true
}

func satAdd(a, b uint32) uint32 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint32(0)
}

// writerPartition returns the partition entry of p, creating it. The
// writer reads meta maps without the lock (it is their only mutator) and
// locks only to change them.
func (ix *Index) writerPartition(p Partition) *partEnt {
	if pe := ix.m.parts[p]; pe != nil {
		return pe
	}
	ix.metaMu.Lock()
	pe := ix.m.partition(p)
	ix.metaMu.Unlock()
	return pe
}

func (ix *Index) writerReplica(id string) (uint32, bool) {
	if r, ok := ix.m.reps.byID[id]; ok {
		return r, true
	}
	ix.metaMu.Lock()
	r, ok := ix.m.replicaIdx(id)
	ix.metaMu.Unlock()
	return r, ok
}

// commitCounts publishes an event's count deltas to the meta state.
func (ix *Index) commitCounts(pe *partEnt, rep uint32, dRes, dBlk int64) {
	if dRes == 0 && dBlk == 0 && pe.res > 0 {
		return
	}
	ix.metaMu.Lock()
	ix.m.totalBlks += dBlk
	ix.m.addRes(pe, rep, dRes)
	ix.m.dropIfEmpty(pe)
	ix.metaMu.Unlock()
}

func (ix *Index) applyStored(ev *BlockEvent) bool {
	if !validStored(ev) {
		return false
	}
	rep, ok := ix.writerReplica(ev.ReplicaID)
	if !ok {
		return false
	}
	pe := ix.writerPartition(ev.Partition)
	repH := ix.m.reps.hashes[rep]
	seen := clampSeen(ev.ObservedAtMs)
	cum := ev.PrefixTokensBefore
	var dRes, dBlk int64
	changed := false
	for i, h := range ev.BlockHashes {
		cnt := ev.BlockTokenCounts[i]
		cum = satAdd(cum, cnt)
		mx := keyMix(pe.id, h)
		si := shardOf(mx)
		d := ix.lockW(si)
		r, b, c := d.storeBlock(pe, rep, repH, h, mx, seen, cnt, cum)
		ix.shards[si].mu.Unlock()
		dRes, dBlk, changed = dRes+r, dBlk+b, changed || c
	}
	ix.commitCounts(pe, rep, dRes, dBlk)
	return changed
}

// storeBlock stores one block of a STORED event for replica rep (shard
// write-locked by the caller): inserts the block or updates its token
// counts, adds the residency or moves its last_seen forward. It returns
// the residency and block count deltas and whether anything changed. The
// sequential and the parallel apply (parallel.go) both call it, so they
// change a shard alike.
func (d *shardData) storeBlock(pe *partEnt, rep uint32, repH, h, mx uint64, seen int64, cnt, cum uint32) (dRes, dBlk int64, changed bool) {
	bi, slot := d.find(pe.id, h, mx)
	if bi < 0 {
		if bi = d.insertBlock(pe.id, h, mx, slot, cnt, cum); bi < 0 {
			return 0, 0, false // shard full: the block is not indexed
		}
		d.digest += blockDigest(pe.hash, h, cnt, cum, 0)
		dBlk++
		changed = true
	} else if b := &d.blocks[bi]; b.tokens != cnt || b.cum != cum {
		// The newest report of a block's counts wins.
		d.pre(bi)
		d.digest -= blockDigest(pe.hash, h, b.tokens, b.cum, b.access)
		b.tokens, b.cum = cnt, cum
		d.digest += blockDigest(pe.hash, h, b.tokens, b.cum, b.access)
		changed = true
	}
	rs := d.residents(&d.blocks[bi])
	for j, r := range rs {
		if resRep(r) != rep {
			continue
		}
		// last_seen only moves forward, so replays are idempotent.
		if old := resSeen(r); seen > old {
			d.pre(bi)
			d.digest -= residencyDigest(pe.hash, h, repH, old)
			rs[j] = packRes(rep, seen)
			d.digest += residencyDigest(pe.hash, h, repH, seen)
			changed = true
		}
		return dRes, dBlk, changed
	}
	if d.addResident(bi, packRes(rep, seen)) {
		d.digest += residencyDigest(pe.hash, h, repH, seen)
		dRes++
		changed = true
	}
	return dRes, dBlk, changed
}

func (ix *Index) applyRemoved(ev *BlockEvent) bool {
	if ev.Partition.Scheme == "" || ev.Partition.Model == "" || ev.ReplicaID == "" {
		return false
	}
	pe := ix.m.parts[ev.Partition]
	rep, ok := ix.m.reps.byID[ev.ReplicaID]
	if pe == nil || !ok {
		return false
	}
	repH := ix.m.reps.hashes[rep]
	var dRes, dBlk int64
	for _, h := range ev.BlockHashes {
		mx := keyMix(pe.id, h)
		si := shardOf(mx)
		d := ix.lockW(si)
		r, b := d.removeBlock(pe, rep, repH, h, mx)
		ix.shards[si].mu.Unlock()
		dRes, dBlk = dRes+r, dBlk+b
	}
	if dRes == 0 {
		return false
	}
	ix.commitCounts(pe, rep, dRes, dBlk)
	return true
}

// removeBlock drops replica rep's residency of one block of a REMOVED
// event (shard write-locked by the caller), and the block with its last
// resident. It returns the (≤ 0) residency and block count deltas. Shared
// by the sequential and the parallel apply, like storeBlock.
func (d *shardData) removeBlock(pe *partEnt, rep uint32, repH, h, mx uint64) (dRes, dBlk int64) {
	bi, _ := d.find(pe.id, h, mx)
	if bi < 0 {
		return 0, 0
	}
	for j, r := range d.residents(&d.blocks[bi]) {
		if resRep(r) == rep {
			d.digest -= residencyDigest(pe.hash, h, repH, resSeen(r))
			d.removeResidentAt(bi, j)
			return -1, -d.dropIfNoResidents(bi, pe.hash)
		}
	}
	return 0, 0
}

// dropIfNoResidents deletes block bi when its last resident is gone and
// returns 1 if it did.
func (d *shardData) dropIfNoResidents(bi int, partH uint64) int64 {
	b := &d.blocks[bi]
	if b.resN > 0 {
		return 0
	}
	d.digest -= blockDigest(partH, b.hash, b.tokens, b.cum, b.access)
	d.deleteBlock(bi)
	return 1
}

// partDelta accumulates count changes of a scan (Cleared, Expire,
// eviction) per (partition id, replica) to publish them in one meta update.
type partRep struct{ part, rep uint32 }

func (ix *Index) applyCleared(replicaID string) bool {
	rep, ok := ix.m.reps.byID[replicaID]
	if !ok || ix.m.reps.res[rep] == 0 {
		return false
	}
	repH := ix.m.reps.hashes[rep]
	deltas := map[partRep]int64{}
	blkDeltas := int64(0)
	for si := range ix.shards {
		s := &ix.shards[si]
		// Skip shards without this replica before paying for a lock.
		if !s.d.holds(rep) {
			continue
		}
		d := ix.lockW(si)
		for bi := range d.blocks {
			b := &d.blocks[bi]
			if b.part == 0 {
				continue
			}
			for j, r := range d.residents(b) {
				if resRep(r) != rep {
					continue
				}
				pe := ix.m.partsByID[b.part]
				d.digest -= residencyDigest(pe.hash, b.hash, repH, resSeen(r))
				d.removeResidentAt(bi, j)
				deltas[partRep{b.part, rep}]--
				blkDeltas -= d.dropIfNoResidents(bi, pe.hash)
				break
			}
		}
		s.mu.Unlock()
	}
	ix.commitDeltas(deltas, blkDeltas)
	return len(deltas) > 0
}

// holds reports whether any block of d has a resident rep (writer only).
func (d *shardData) holds(rep uint32) bool {
	for _, r := range d.res {
		if r != 0 && resRep(r) == rep {
			return true
		}
	}
	return false
}

// commitDeltas publishes scan deltas; iteration order does not matter
// because every update is a commutative count change.
func (ix *Index) commitDeltas(deltas map[partRep]int64, dBlk int64) {
	if len(deltas) == 0 && dBlk == 0 {
		return
	}
	ix.metaMu.Lock()
	ix.m.totalBlks += dBlk
	for k, v := range deltas {
		if pe := ix.m.partsByID[k.part]; pe != nil {
			ix.m.addRes(pe, k.rep, v)
		}
	}
	ix.metaMu.Unlock()
}

// ApplyStats records replica stats (writer only). A report older than the
// replica's current one is ignored, so replays and reordered reports
// converge on the newest; stats without a replica id are skipped.
func (ix *Index) ApplyStats(st []ReplicaStats) {
	ix.reclaimViews()
	for i := range st {
		s := &st[i]
		if s.ReplicaID == "" {
			continue
		}
		ix.noteObserved(s.ObservedAtMs)
		rep, ok := ix.writerReplica(s.ReplicaID)
		if !ok {
			continue
		}
		if old := ix.m.stats[rep]; old != nil && old.s.ObservedAtMs > s.ObservedAtMs {
			continue
		}
		ix.metaMu.Lock()
		ix.m.setStats(rep, *s)
		ix.metaMu.Unlock()
	}
}

// maxAccess saturates access counters at what the LFU eviction key packs.
const maxAccess = 1<<20 - 1

// Credit increments the access counters of blocks of partition p (writer
// only); ignored unless the policy is LFU (contract §5.9: only a delivered
// PREFIX_MATCH under LFU credits).
func (ix *Index) Credit(p Partition, hashes []uint64) {
	ix.reclaimViews()
	if !ix.pol.Load().lfu {
		return
	}
	pe := ix.m.parts[p]
	if pe == nil {
		return
	}
	for _, h := range hashes {
		mx := keyMix(pe.id, h)
		si := shardOf(mx)
		s := &ix.shards[si]
		d := ix.lockW(si)
		if bi, _ := d.find(pe.id, h, mx); bi >= 0 {
			b := &d.blocks[bi]
			if b.access < maxAccess {
				d.pre(bi)
				d.digest -= blockDigest(pe.hash, h, b.tokens, b.cum, b.access)
				b.access++
				d.digest += blockDigest(pe.hash, h, b.tokens, b.cum, b.access)
			}
		}
		s.mu.Unlock()
	}
}
