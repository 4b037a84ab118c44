package index

import (
	"sync"
	"sync/atomic"
)

// Parallel apply of STORED and REMOVED batches. One writer goroutine
// applying every block caps a node at what one core does (about 2 M
// blocks/s here), while the blocks of a batch mostly touch different
// shards. ApplyEvents therefore splits a large batch by shard over several
// goroutines when that cannot change the result:
//
//   - Every step that is not confined to one shard runs first, on the
//     writer, in event order, exactly as the sequential apply would run it:
//     validation, replica interning and partition creation (both assign
//     ids in order of first use), partition and replica lookups.
//   - Each worker owns the shards s with s % workers == k and applies their
//     blocks shard by shard, each shard's in event order (sortByShard),
//     with the same code (storeBlock, removeBlock), so every shard sees
//     the same sequence of changes as in the sequential apply and ends
//     byte-identical (slot positions, slabs, digest).
//   - Count deltas are collected per event and published after the
//     workers finish, event by event in order, so the counts pass through
//     the same values as in the sequential apply.
//   - Conditions under which the sequential apply would act across shards
//     in the middle of the batch send the batch to it instead: an open
//     View (the undo log is one log for all shards), a batch that could
//     reach MaxResidencies (eviction scans every shard after the event that
//     crosses the bound), a shard that could fill (a failed insert can drop
//     and re-create a partition under a new id), a partition that REMOVED
//     events could empty (it would be dropped mid-batch and re-created
//     under a new id by a later STORED) or that does not exist when the
//     batch starts, and CLEARED events (they scan every shard).
//
// Lookups see the batch's blocks appear and go shard by shard, as they do
// under the sequential apply, and its counts at the end of the batch
// instead of event by event.

// parallelMinBlocks: below this many blocks a batch is applied by the
// writer alone (starting goroutines costs more than it saves).
const parallelMinBlocks = 1024

// SetApplyWorkers sets how many goroutines ApplyEvents may use for a large
// batch of STORED and REMOVED events (writer only); n ≤ 1 keeps the
// writer alone. The
// resulting state never depends on n. New starts with 1.
func (ix *Index) SetApplyWorkers(n int) {
	ix.par.workers = max(n, 1)
}

// ParallelPanic is the value ApplyEvents / ApplyEventSegments panic with
// when a panic happened inside a parallel batch. The index is then in a
// state the sequential apply would not have left (other workers applied
// blocks of later events), so the caller must stop applying rather than
// reject the command and go on (the FSM stops the node).
type ParallelPanic struct{ Value any }

// ParallelBatches is how many ApplyEvents/ApplyEventSegments batches ran
// on several goroutines since the index was made (any goroutine: for
// metrics and tests).
func (ix *Index) ParallelBatches() uint64 { return ix.par.batches.Load() }

// parItem is one block of a STORED event, resolved on the writer.
type parItem struct {
	mx, h    uint64
	seen     int64
	cnt, cum uint32
	ev       int32 // event index in the batch
	removed  bool  // a block of a REMOVED event
}

// partRemoves counts the blocks a batch's REMOVED events name in pe.
type partRemoves struct {
	pe *partEnt
	n  int64
}

// parEvent is what the workers need of a valid STORED event.
type parEvent struct {
	pe   *partEnt
	rep  uint32
	repH uint64
}

// parWorker is one worker's share of a batch and its results per event.
type parWorker struct {
	items      []parItem
	dRes, dBlk []int32
	changed    []bool
	sink       uint64
	panicked   any

	// sorted and starts are sortByShard's scratch.
	sorted []parItem
	starts []uint32
}

// parState is the writer's reusable scratch for parallel batches.
type parState struct {
	workers int
	evs     []parEvent
	w       []parWorker
	removes []partRemoves
	batches atomic.Uint64 // batches applied in parallel (metrics, tests)
}

// applyParallel applies evs with ix.par.workers goroutines, counting
// changed events per segment (ApplyEventSegments), or returns false
// (nothing done) when the batch must be applied sequentially.
func (ix *Index) applyParallel(evs []BlockEvent, ends, changedPerSeg []int) bool {
	ps := &ix.par
	if ps.workers < 2 || ix.views.log != nil {
		return false
	}
	if !ix.parallelSafe(evs) {
		return false
	}
	ps.batches.Add(1)
	ix.resetParWorkers(len(evs))
	ix.distributeBlocks(evs)
	ix.runParWorkers()
	ix.publishParCounts(evs, ends, changedPerSeg)
	clear(ps.evs) // no partition pointers kept past the batch
	return true
}

// parallelSafe reports whether evs can be applied in parallel with the
// same result as the sequential apply: only STORED and REMOVED events, at
// least parallelMinBlocks blocks, no REMOVED into a partition that does
// not exist or that the batch could empty, no batch that could reach
// MaxResidencies or fill a shard.
func (ix *Index) parallelSafe(evs []BlockEvent) bool {
	ps := &ix.par
	nb := 0
	removes := ps.removes[:0]
	for i := range evs {
		ev := &evs[i]
		switch ev.Kind {
		case Stored:
		case Removed:
			if ev.Partition.Scheme == "" || ev.Partition.Model == "" || ev.ReplicaID == "" {
				break // skipped by either apply
			}
			pe := ix.m.parts[ev.Partition]
			if pe == nil {
				return false
			}
			k := 0
			for k < len(removes) && removes[k].pe != pe {
				k++
			}
			if k == len(removes) {
				removes = append(removes, partRemoves{pe: pe})
			}
			removes[k].n += int64(len(ev.BlockHashes))
		default:
			return false
		}
		nb += len(ev.BlockHashes)
	}
	ps.removes = removes[:0]
	if nb < parallelMinBlocks {
		return false
	}
	for _, r := range removes {
		if r.pe.res <= r.n {
			return false // the batch could empty it
		}
	}
	if mx := int64(ix.pol.Load().p.MaxResidencies); mx > 0 && ix.m.totalRes+int64(nb) > mx {
		return false
	}
	return ix.roomForBlocks(nb)
}

// resetParWorkers sizes the workers' per-event results and the resolved
// events for a batch of n events.
func (ix *Index) resetParWorkers(n int) {
	ps := &ix.par
	if len(ps.w) != ps.workers {
		ps.w = make([]parWorker, ps.workers)
	}
	for k := range ps.w {
		w := &ps.w[k]
		w.items = w.items[:0]
		w.dRes = resize(w.dRes, n)
		w.dBlk = resize(w.dBlk, n)
		w.changed = resize(w.changed, n)
		w.panicked = nil
	}
	ps.evs = resize(ps.evs, n)
}

// distributeBlocks runs, on the writer and in event order, what the
// sequential apply does outside the shards before each event's blocks
// (validation, replica and partition lookup or creation), and hands each
// block to the worker that owns its shard.
func (ix *Index) distributeBlocks(evs []BlockEvent) {
	for i := range evs {
		if evs[i].Kind == Removed {
			ix.distributeRemoved(evs, i)
		} else {
			ix.distributeStored(evs, i)
		}
	}
}

// distributeRemoved resolves REMOVED event evs[i] as applyRemoved does
// before its blocks and queues its blocks.
func (ix *Index) distributeRemoved(evs []BlockEvent, i int) {
	ps := &ix.par
	ev := &evs[i]
	if ev.Partition.Scheme == "" || ev.Partition.Model == "" || ev.ReplicaID == "" {
		return
	}
	pe := ix.m.parts[ev.Partition]
	rep, ok := ix.m.reps.byID[ev.ReplicaID]
	if pe == nil || !ok {
		return
	}
	ps.evs[i] = parEvent{pe: pe, rep: rep, repH: ix.m.reps.hashes[rep]}
	nw := len(ps.w)
	pm := partMix(pe.id)
	for _, h := range ev.BlockHashes {
		mx := keyMixP(pm, h)
		w := &ps.w[shardOf(mx)%nw]
		w.items = append(w.items, parItem{mx: mx, h: h, ev: int32(i), removed: true})
	}
}

// distributeStored resolves STORED event evs[i] as the sequential apply
// does before its blocks (interning its replica, creating its partition)
// and queues its blocks with their cumulative token counts.
func (ix *Index) distributeStored(evs []BlockEvent, i int) {
	ps := &ix.par
	ev := &evs[i]
	if !validStored(ev) {
		return
	}
	rep, ok := ix.writerReplica(ev.ReplicaID)
	if !ok {
		return
	}
	pe := ix.writerPartition(ev.Partition)
	ps.evs[i] = parEvent{pe: pe, rep: rep, repH: ix.m.reps.hashes[rep]}
	nw := len(ps.w)
	seen := clampSeen(ev.ObservedAtMs)
	cum := ev.PrefixTokensBefore
	pm := partMix(pe.id)
	for j, h := range ev.BlockHashes {
		cnt := ev.BlockTokenCounts[j]
		cum = satAdd(cum, cnt)
		mx := keyMixP(pm, h)
		w := &ps.w[shardOf(mx)%nw]
		w.items = append(w.items, parItem{mx: mx, h: h, seen: seen, cnt: cnt, cum: cum, ev: int32(i)})
	}
}

// runParWorkers runs every worker (the first on the writer) and waits for
// them; a panic in any is re-raised on the writer as ParallelPanic.
func (ix *Index) runParWorkers() {
	ps := &ix.par
	var wg sync.WaitGroup
	for k := 1; k < len(ps.w); k++ {
		wg.Add(1)
		go func(w *parWorker) {
			defer wg.Done()
			ix.runParWorker(w)
		}(&ps.w[k])
	}
	ix.runParWorker(&ps.w[0])
	wg.Wait()
	for k := range ps.w {
		if p := ps.w[k].panicked; p != nil {
			// On the writer, marked: the other workers went on past the
			// event that panicked, so the state differs from what the
			// sequential apply leaves at the same panic, and a node
			// with another worker count would diverge.
			panic(ParallelPanic{Value: p})
		}
	}
}

// publishParCounts publishes the workers' count deltas event by event, in
// order: the same deltas in the same order as the sequential apply's
// commitCounts, so the counts pass through the same values (no partition
// reaches zero: parallelSafe checked). It counts changed events per
// segment of ends into changedPerSeg.
func (ix *Index) publishParCounts(evs []BlockEvent, ends, changedPerSeg []int) {
	ps := &ix.par
	ix.metaMu.Lock()
	seg := 0
	for i := range evs {
		for i >= ends[seg] {
			seg++
		}
		e := &ps.evs[i]
		if e.pe == nil {
			continue
		}
		var dRes, dBlk int64
		changed := false
		for k := range ps.w {
			w := &ps.w[k]
			dRes += int64(w.dRes[i])
			dBlk += int64(w.dBlk[i])
			changed = changed || w.changed[i]
		}
		ix.m.totalBlks += dBlk
		ix.m.addRes(e.pe, e.rep, dRes)
		if changed {
			changedPerSeg[seg]++
		}
	}
	ix.metaMu.Unlock()
	for k := range ps.w {
		ix.sink += ps.w[k].sink
	}
}

// runParWorker applies w's blocks shard by shard, each shard's in event
// order, touching each window of blocks ahead (prefetch.go) like the
// sequential apply. It holds one shard lock at a time (lookups rely on
// that: shardLocks), taken once per shard per batch. A panic is kept for
// the writer to re-raise.
func (ix *Index) runParWorker(w *parWorker) {
	held := -1 // the shard whose write lock this worker holds
	defer func() {
		if held >= 0 {
			ix.shards[held].mu.Unlock()
		}
		if p := recover(); p != nil {
			w.panicked = p
		}
	}()
	w.sortByShard()
	ps := &ix.par
	var d *shardData
	for from := 0; from < len(w.items); from += touchBlocks {
		win := w.items[from:min(from+touchBlocks, len(w.items))]
		w.sink += ix.touchItems(win)
		for i := range win {
			it := &win[i]
			e := &ps.evs[it.ev]
			if si := shardOf(it.mx); si != held {
				if held >= 0 {
					ix.shards[held].mu.Unlock()
					held = -1
				}
				d = ix.lockW(si)
				held = si
				if testLockedHook != nil {
					testLockedHook()
				}
			}
			var r, b int64
			var c bool
			if it.removed {
				r, b = d.removeBlock(e.pe, e.rep, e.repH, it.h, it.mx)
				c = r != 0
			} else {
				r, b, c = d.storeBlock(e.pe, e.rep, e.repH, it.h, it.mx, it.seen, it.cnt, it.cum)
			}
			w.dRes[it.ev] += int32(r)
			w.dBlk[it.ev] += int32(b)
			w.changed[it.ev] = w.changed[it.ev] || c
		}
	}
}

// testLockedHook, when set by a test, runs each time a worker has taken a
// shard's write lock.
var testLockedHook func()

// sortByShard orders w.items by shard and, within a shard, keeps their
// (event) order: a counting sort, stable, so every shard still sees its
// blocks in the order the sequential apply gives them. Taking each shard's
// lock once per batch instead of once per block, in shard order, saves
// the lock's atomics on every block (BenchmarkApplyParallel).
func (w *parWorker) sortByShard() {
	if len(w.items) < 2 {
		return
	}
	if cap(w.starts) < numShards+1 {
		w.starts = make([]uint32, numShards+1)
	}
	starts := w.starts[:numShards+1]
	clear(starts)
	for i := range w.items {
		starts[shardOf(w.items[i].mx)+1]++
	}
	for s := 1; s <= numShards; s++ {
		starts[s] += starts[s-1]
	}
	if cap(w.sorted) < len(w.items) {
		w.sorted = make([]parItem, len(w.items))
	}
	out := w.sorted[:len(w.items)]
	for i := range w.items {
		s := shardOf(w.items[i].mx)
		out[starts[s]] = w.items[i]
		starts[s]++
	}
	w.items, w.sorted = out, w.items
}

// roomForBlocks reports whether nb more blocks fit in every shard, so no
// insert of the batch can fail (writer only).
func (ix *Index) roomForBlocks(nb int) bool {
	if ix.m.totalBlks+int64(nb) < maxShardBlocks {
		return true
	}
	for si := range ix.shards {
		if len(ix.shards[si].d.blocks)+nb >= maxShardBlocks {
			return false
		}
	}
	return true
}

// resize returns s with length n and every element zero, reusing its
// storage.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}
