package index

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
)

// parallelBatch draws a batch like an ingest entry's: mostly STORED events
// of new blocks, re-stored blocks (same replica, newer or older
// last_seen, changed token counts), blocks another replica already holds,
// partitions that appear mid-batch, and invalid events. kinds adds
// REMOVED and CLEARED events (which send the batch to the sequential
// apply).
func parallelBatch(rng *rand.Rand, held *[]uint64, round int, kinds bool) []BlockEvent {
	return parallelBatchRemoving(rng, held, round, kinds, false)
}

// parallelBatchRemoving is parallelBatch with, when removing, about one
// event in six a REMOVED of held blocks (the engine evicting them), which
// the parallel apply takes as long as no partition can empty.
func parallelBatchRemoving(rng *rand.Rand, held *[]uint64, round int, kinds, removing bool) []BlockEvent {
	parts := []Partition{vllm, {Scheme: "vllm", Model: "m2", Tenant: "t"}, {Scheme: "sglang", Model: "m", Adapter: "lora"}}
	if round%3 == 2 { // a partition first seen in the middle of this batch
		parts = append(parts, Partition{Scheme: "vllm", Model: fmt.Sprint("new-", round)})
	}
	n := 200 + rng.IntN(400)
	evs := make([]BlockEvent, 0, n)
	for len(evs) < n {
		rep := fmt.Sprint("r", rng.IntN(24))
		p := parts[rng.IntN(len(parts))]
		if len(evs) < n/3 {
			p = parts[rng.IntN(3)] // the new partition appears only later
		}
		nb := 1 + rng.IntN(8)
		hs := make([]uint64, nb)
		cs := make([]uint32, nb)
		for i := range hs {
			if len(*held) > 0 && rng.IntN(2) == 0 {
				hs[i] = (*held)[rng.IntN(len(*held))]
			} else {
				hs[i] = rng.Uint64()
				*held = append(*held, hs[i])
			}
			cs[i] = 16
			if rng.IntN(20) == 0 {
				cs[i] = uint32(1 + rng.IntN(16)) // a changed count
			}
		}
		ev := BlockEvent{Kind: Stored, ReplicaID: rep, Partition: p, BlockHashes: hs, BlockTokenCounts: cs,
			PrefixTokensBefore: uint32(rng.IntN(64)), ObservedAtMs: t0 + int64(round*1000+rng.IntN(3000))}
		if removing && len(*held) > 0 && rng.IntN(6) == 0 {
			ev.Kind = Removed
			for i := range ev.BlockHashes {
				ev.BlockHashes[i] = (*held)[rng.IntN(len(*held))]
			}
		}
		switch rng.IntN(40) {
		case 0:
			ev.ReplicaID = ""
		case 1:
			ev.BlockTokenCounts = ev.BlockTokenCounts[:len(ev.BlockTokenCounts)-1]
		case 2:
			ev.BlockTokenCounts[0] = 0
		case 3:
			if kinds {
				ev.Kind = Removed
			}
		case 4:
			if kinds {
				ev = BlockEvent{Kind: Cleared, ReplicaID: rep}
			}
		}
		evs = append(evs, ev)
	}
	return evs
}

// sameState fails unless a and b hold byte-identical shards (tables and
// their disp, slabs, free lists, digests) and equal meta state (partition ids,
// interned replicas, every count).
func sameState(t *testing.T, round int, a, b *Index) {
	t.Helper()
	for si := range a.shards {
		da, db := a.shards[si].d, b.shards[si].d
		if !reflect.DeepEqual(da.table, db.table) || !reflect.DeepEqual(da.disp, db.disp) || !reflect.DeepEqual(da.blocks, db.blocks) || !reflect.DeepEqual(da.res, db.res) ||
			!reflect.DeepEqual(da.freeBlocks, db.freeBlocks) || !reflect.DeepEqual(da.free, db.free) ||
			da.nBlocks != db.nBlocks || da.nRes != db.nRes || da.digest != db.digest {
			t.Fatalf("round %d: shard %d differs (blocks %d/%d, residencies %d/%d)", round, si, da.nBlocks, db.nBlocks, da.nRes, db.nRes)
		}
	}
	if !reflect.DeepEqual(a.m, b.m) {
		t.Fatalf("round %d: meta state differs: totals %d/%d residencies, %d/%d blocks, %d/%d partitions (next id %d/%d)", round,
			a.m.totalRes, b.m.totalRes, a.m.totalBlks, b.m.totalBlks, len(a.m.parts), len(b.m.parts), a.m.nextPart, b.m.nextPart)
	}
	if a.Digest() != b.Digest() {
		t.Fatalf("round %d: digests differ", round)
	}
}

// The parallel apply must leave exactly the state the writer alone
// leaves, whatever the batch: the shards byte for byte, the ids, the
// counts. Batches it must not take (other kinds, an open view, the
// capacity bound within reach) go to the sequential apply, which the
// comparison covers too.
func TestApplyParallel_SameStateAsSequential(t *testing.T) {
	for _, c := range []struct {
		name     string
		maxRes   uint64
		kinds    bool
		viewOpen bool
	}{
		{"stored only", 0, false, false},
		{"stored and removed", 0, false, false},
		{"with removed and cleared", 0, true, false},
		{"capacity bound reached", 60_000, false, false},
		{"views open", 0, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testPolicy()
			// -short applies 16 of the 40 rounds, with the capacity bound
			// scaled alike so that it is still reached.
			rounds := 40
			if testing.Short() {
				rounds = 16
			}
			if c.maxRes > 0 {
				p.MaxResidencies = c.maxRes * uint64(rounds) / 40
			}
			seq, par := New(p), New(p)
			par.SetApplyWorkers(3)
			rng := rand.New(rand.NewPCG(7, uint64(len(c.name))))
			var held []uint64
			var view *View
			for round := range rounds {
				evs := parallelBatchRemoving(rng, &held, round, c.kinds, c.name == "stored and removed")
				if c.viewOpen && round%10 == 3 {
					seq.View().Release() // keep the epochs alike
					view = par.View()
				}
				before := par.ParallelBatches()
				// par takes the batch in one call, cut into segments (as
				// the FSM passes an entry's commands); seq applies the
				// segments one call each.
				var ends []int
				for e := 0; e < len(evs); {
					e = min(len(evs), e+1+rng.IntN(120))
					ends = append(ends, e)
				}
				got := make([]int, len(ends))
				par.ApplyEventSegments(evs, ends, got)
				from := 0
				for k, end := range ends {
					if want := seq.ApplyEvents(evs[from:end]); got[k] != want {
						t.Fatalf("round %d segment %d: %d events changed applied alone, %d in the batch", round, k, want, got[k])
					}
					from = end
				}
				if view != nil && round%10 == 5 {
					view.Release()
					view = nil
				}
				ran := par.ParallelBatches() > before
				if ran && (c.kinds || view != nil) {
					t.Fatalf("round %d: a batch the parallel apply must not take ran in parallel", round)
				}
				sameState(t, round, seq, par)
			}
			t.Logf("%d of %d batches ran in parallel; %d residencies", par.ParallelBatches(), rounds, par.Sizes().Residencies)
			if !c.kinds && par.ParallelBatches() == 0 {
				t.Fatal("no batch ran in parallel: the test compared nothing")
			}
			if c.maxRes > 0 && par.Sizes().Residencies > int(p.MaxResidencies) {
				t.Fatalf("%d residencies over the bound %d", par.Sizes().Residencies, p.MaxResidencies)
			}
		})
	}
}

// Lookups run while workers apply (run with -race).
func TestApplyParallel_ConcurrentLookups(t *testing.T) {
	ix := New(testPolicy())
	ix.SetApplyWorkers(4)
	rng := rand.New(rand.NewPCG(3, 3))
	var held []uint64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r Result
			for !stop.Load() {
				req := LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2, 3}, NowMs: t0}
				ix.Lookup(&req, &r)
				_ = ix.Sizes()
			}
		}()
	}
	for round := range 20 {
		ix.ApplyEvents(parallelBatch(rng, &held, round, false))
	}
	stop.Store(true)
	wg.Wait()
	if ix.ParallelBatches() == 0 {
		t.Fatal("no batch ran in parallel")
	}
}

// hashesInShard returns n hashes of partition id pid that land in shard.
func hashesInShard(pid uint32, shard int, n int, start uint64) []uint64 {
	var out []uint64
	for h := start; len(out) < n; h++ {
		if shardOf(keyMix(pid, h)) == shard {
			out = append(out, h)
		}
	}
	return out
}

// Two workers each waiting for a shard that a lookup holds, while each
// lookup waits for the shard the other holds (taken in the opposite
// order), would stop the apply for good: a waiting writer blocks new
// readers. Lookups take their shards in ascending order, which rules that
// out; before that, this hung within the first batches. Since a worker
// takes each shard's lock once per batch the interleaving is rare here,
// so TestLookup_ReadLocksShardsInAscendingOrder checks the order itself.
func TestApplyParallel_NoDeadlockWithMultiShardLookups(t *testing.T) {
	ix := New(testPolicy())
	ix.SetApplyWorkers(2)
	ix.ApplyEvents([]BlockEvent{stored("r0", vllm, t0, 1)})
	pid := ix.m.parts[vllm].id
	a, b := 10, 11 // owned by workers 0 and 1
	ha := hashesInShard(pid, a, 700, 1000)
	hb := hashesInShard(pid, b, 700, 1000)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		chain := []uint64{ha[0], hb[0]}
		if g%2 == 1 {
			chain = []uint64{hb[0], ha[0]}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r Result
			req := LookupRequest{Partition: vllm, BlockHashes: chain, NowMs: t0}
			for !stop.Load() {
				ix.Lookup(&req, &r)
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for round := 0; round < 300; round++ {
			evs := make([]BlockEvent, 0, 700)
			for i := 0; i < 700; i++ {
				evs = append(evs, stored("r1", vllm, t0+int64(round), ha[i], hb[i]))
			}
			ix.ApplyEvents(evs)
		}
	}()
	select {
	case <-done:
		stop.Store(true)
		wg.Wait()
	case <-time.After(60 * time.Second):
		// The deadlocked goroutines cannot be stopped: fail without
		// waiting for them.
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
		t.Fatalf("apply stuck: deadlock between parallel workers and lookups (%d parallel batches)", ix.ParallelBatches())
	}
	if ix.ParallelBatches() != 300 {
		t.Fatalf("%d of 300 batches ran in parallel", ix.ParallelBatches())
	}
}

// A lookup whose chain names a higher shard before a lower one still
// read-locks the lower one first: with a writer holding the higher shard,
// the lookup waits there holding the lower one, never the other way round
// (the order the deadlock-freedom argument of shardLocks rests on).
func TestLookup_ReadLocksShardsInAscendingOrder(t *testing.T) {
	ix := New(testPolicy())
	ix.ApplyEvents([]BlockEvent{stored("r0", vllm, t0, 1)})
	pid := ix.m.parts[vllm].id
	lo, hi := 10, 11
	hl := hashesInShard(pid, lo, 1, 1000)[0]
	hh := hashesInShard(pid, hi, 1, 1000)[0]
	ix.ApplyEvents([]BlockEvent{stored("r1", vllm, t0, hh, hl)})

	ix.shards[hi].mu.Lock() // a worker applying shard hi
	done := make(chan struct{})
	go func() {
		defer close(done)
		var r Result
		ix.Lookup(&LookupRequest{Partition: vllm, BlockHashes: []uint64{hh, hl}, NowMs: t0}, &r)
	}()
	// Wait until the lookup holds shard lo (a write TryLock fails).
	if err := poll.Until(context.Background(), 5*time.Second, time.Millisecond, func() (bool, string) {
		if !ix.shards[lo].mu.TryLock() {
			return true, ""
		}
		ix.shards[lo].mu.Unlock()
		return false, "the lookup waited for the higher shard without holding the lower one: it locks in chain order"
	}); err != nil {
		ix.shards[hi].mu.Unlock()
		<-done
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Fatal("the lookup finished while a writer held one of its shards")
	default:
	}
	ix.shards[hi].mu.Unlock()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the lookup did not finish after the writer released its shard")
	}
}

// twoWorkersAndBatch is an empty index with 2 apply workers and a first
// batch (from seed) large enough for the parallel apply.
func twoWorkersAndBatch(seed uint64) (*Index, []BlockEvent) {
	ix := New(testPolicy())
	ix.SetApplyWorkers(2)
	var held []uint64
	return ix, parallelBatch(rand.New(rand.NewPCG(seed, seed)), &held, 0, false)
}

// A panic in a worker reaches the writer (where the FSM turns it into a
// rejected command) instead of killing the process.
func TestApplyParallel_WorkerPanicReachesWriter(t *testing.T) {
	ix, evs := twoWorkersAndBatch(4)
	// A nil table makes the first touch of any shard index out of range.
	for si := range ix.shards {
		ix.shards[si].d.table = nil
	}
	defer func() {
		if _, ok := recover().(ParallelPanic); !ok {
			t.Fatal("no ParallelPanic reached the writer")
		}
	}()
	ix.ApplyEvents(evs)
}

// A worker that panics while it holds a shard's write lock releases it:
// lookups, snapshots and the node's shutdown must not hang on that shard
// after the FSM has stopped applying.
func TestApplyParallel_PanicReleasesShardLock(t *testing.T) {
	ix, evs := twoWorkersAndBatch(5)
	var calls atomic.Int32
	testLockedHook = func() {
		if calls.Add(1) == 10 {
			panic("injected")
		}
	}
	defer func() { testLockedHook = nil }()
	func() {
		defer func() {
			if p, ok := recover().(ParallelPanic); !ok || p.Value != "injected" {
				t.Fatalf("recovered %v, want the injected ParallelPanic", p)
			}
		}()
		ix.ApplyEvents(evs)
	}()
	if calls.Load() < 10 {
		t.Fatalf("hook ran %d times: the panic was not injected under a lock", calls.Load())
	}
	for si := range ix.shards {
		if !ix.shards[si].mu.TryLock() {
			t.Fatalf("shard %d is still write-locked after the worker panicked", si)
		}
		ix.shards[si].mu.Unlock()
	}
}

// BenchmarkApplyParallel applies entry-sized batches (3,200 STORED events
// of 4 blocks, what one group-commit entry holds) into a 1 M index with 1
// and 2 apply workers: wall time per block, the writer's apply throughput.
func BenchmarkApplyParallel(b *testing.B) {
	const events, perEvent = 3200, 4
	counts := []uint32{16, 16, 16, 16}
	// new: every block is new (the index grows); refresh: every block is
	// already held; churn: half the events store new blocks and half are
	// REMOVED of the oldest held ones, as on a fleet whose caches are full
	// (the index keeps its size; deletes dominate the table work).
	for _, mode := range []string{"new", "refresh", "churn"} {
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/workers=%d", mode, workers), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(7, 7))
				ix := New(benchPolicy())
				ix.SetApplyWorkers(workers)
				var held []uint64
				var heldRep []int // the replica of each group of perEvent held blocks
				now := t0
				for ix.Sizes().Residencies < 1_000_000 {
					now++
					ch := make([]uint64, 4096)
					for j := range ch {
						ch[j] = rng.Uint64()
					}
					evs := make([]BlockEvent, 0, len(ch)/perEvent)
					for j := 0; j < len(ch); j += perEvent {
						evs = append(evs, storeEvent(j%benchReplicas, ch[j:j+perEvent], counts, now))
						heldRep = append(heldRep, j%benchReplicas)
					}
					ix.ApplyEvents(evs)
					held = append(held, ch...)
				}
				evs := make([]BlockEvent, events)
				hs := make([]uint64, events*perEvent)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					now++
					for j := range hs {
						switch {
						case mode == "new" || mode == "churn" && j < len(hs)/2:
							hs[j] = rng.Uint64()
						case mode == "churn":
							hs[j] = held[j-len(hs)/2] // the oldest held blocks
						default:
							hs[j] = held[rng.IntN(len(held))]
						}
					}
					for e := range evs {
						evs[e] = storeEvent(e%benchReplicas, hs[e*perEvent:(e+1)*perEvent], counts, now)
						if mode == "churn" && e >= events/2 {
							evs[e].Kind, evs[e].ReplicaID = Removed, replicaName(heldRep[e-events/2])
						}
					}
					if mode == "churn" {
						// Removed blocks leave the front; new ones join the
						// back with the replica that stored them.
						held = append(held[len(hs)/2:], hs[:len(hs)/2]...)
						heldRep = heldRep[events/2:]
						for e := range events / 2 {
							heldRep = append(heldRep, e%benchReplicas)
						}
					}
					b.StartTimer()
					ix.ApplyEvents(evs)
				}
				if mode == "churn" {
					if r := ix.Sizes().Residencies; r != len(held) {
						b.Fatalf("%d residencies for %d held blocks: a REMOVED event missed", r, len(held))
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events*perEvent), "ns/block")
			})
		}
	}
}

// A batch whose REMOVED events could empty a partition goes to the
// sequential apply: there the partition is dropped at that event and a
// later STORED re-creates it under a new id, which places its blocks in
// other shards.
func TestApplyParallel_PartitionThatCouldEmptyIsSequential(t *testing.T) {
	small := Partition{Scheme: "vllm", Model: "small"}
	seq, par := New(testPolicy()), New(testPolicy())
	par.SetApplyWorkers(2)
	for _, ix := range []*Index{seq, par} {
		ix.ApplyEvents([]BlockEvent{stored("r1", small, t0, 1, 2)})
	}
	var evs []BlockEvent
	evs = append(evs, BlockEvent{Kind: Removed, ReplicaID: "r1", Partition: small, BlockHashes: []uint64{1, 2}})
	for i := 0; i < 300; i++ { // enough blocks for a parallel batch
		evs = append(evs, stored("r2", small, t0+1, uint64(100+4*i), uint64(101+4*i), uint64(102+4*i), uint64(103+4*i)))
	}
	idBefore := par.m.parts[small].id
	seq.ApplyEvents(evs)
	par.ApplyEvents(evs)
	if par.ParallelBatches() != 0 {
		t.Fatal("a batch that could empty a partition ran in parallel")
	}
	if par.m.parts[small].id == idBefore {
		t.Fatal("the partition was not re-created: the case does not test the drop")
	}
	sameState(t, 0, seq, par)
	// Without that REMOVED the same STORED events do run in parallel.
	seq.ApplyEvents(evs[1:])
	par.ApplyEvents(evs[1:])
	if par.ParallelBatches() != 1 {
		t.Fatalf("%d parallel batches, want 1", par.ParallelBatches())
	}
	sameState(t, 1, seq, par)
}
