package index

import (
	"cmp"
	"sync"
	"sync/atomic"

	"github.com/inference-cache/inference-cache/policy"
)

// Index is the in-memory prefix index (contract §4, §5). One writer goroutine
// (the FSM's apply) calls the write methods (SetPolicy, ApplyEvents,
// ApplyStats, Expire, Credit, View); any number of goroutines call Lookup,
// Digest and Sizes concurrently with it. See DESIGN.md for the layout and
// the locking scheme.
type Index struct {
	shards [numShards]shard

	// metaMu guards m's maps and counters (not the shards). Lookups hold
	// the read lock for their whole run; the writer holds the write lock
	// only for short O(1) updates, never while it holds a shard lock, so
	// the lock order is always metaMu before shard.
	metaMu sync.RWMutex
	m      *meta

	// pol is replaced whole by SetPolicy, so a lookup sees one consistent
	// policy without a lock.
	pol atomic.Pointer[polState]

	// views tracks open Views for the shards' undo logs (undo.go).
	views viewSet

	// sink keeps touchAhead's loads alive (writer only; prefetch.go).
	sink uint64

	// par is the parallel apply's settings and scratch (writer only;
	// parallel.go).
	par parState

	// newest is NewestObservedMs (newest.go): written by the writer,
	// read by the leader's expire loop.
	newest atomic.Int64
}

// polState is a policy plus the values lookups derive from it, computed
// once per SetPolicy instead of once per lookup.
type polState struct {
	p       policy.Policy
	ttlMs   int64
	freshMs int64
	sloMs   int64
	floor   float64
	lfu     bool
	digest  uint64
	// evictBatch: a full index evicts MaxResidencies/evictBatch at once.
	evictBatch int64
}

func newPolState(p policy.Policy) *polState {
	p = p.Clone()
	return &polState{
		p:       p,
		ttlMs:   p.EvictionTTL.Milliseconds(),
		freshMs: p.StatsFreshness.Milliseconds(),
		sloMs:   p.SLOTightThreshold.Milliseconds(),
		floor:   p.FloorScore(),
		lfu:     p.EvictionPolicy == policy.LFU,
		digest:  policyDigest(&p),
		// 0 keeps what releases before the knob did (evict.go).
		evictBatch: cmp.Or(int64(p.EvictionBatch), evictSlack),
	}
}

// New returns an empty index with policy p.
func New(p policy.Policy) *Index {
	ix := &Index{m: newMeta()}
	for i := range ix.shards {
		ix.shards[i].d = newShardData()
	}
	ix.pol.Store(newPolState(p))
	ix.par.workers = 1
	return ix
}

// Policy returns the policy in force (a copy).
func (ix *Index) Policy() policy.Policy { return ix.pol.Load().p.Clone() }

// SetPolicy replaces the policy (writer only). A lowered MaxResidencies is
// enforced at once; a shorter EvictionTTL takes effect at the next Expire.
func (ix *Index) SetPolicy(p policy.Policy) {
	ix.reclaimViews()
	ix.pol.Store(newPolState(p))
	ix.enforceCapacity()
}

// Sizes counts partitions, blocks, residencies and replicas. Safe
// concurrently with the writer (a momentary, not transactional, reading).
func (ix *Index) Sizes() Sizes {
	ix.metaMu.RLock()
	defer ix.metaMu.RUnlock()
	return ix.sizesLocked()
}

func (ix *Index) sizesLocked() Sizes {
	return Sizes{
		Partitions:  len(ix.m.parts),
		Blocks:      int(ix.m.totalBlks),
		Residencies: int(ix.m.totalRes),
		Replicas:    ix.m.liveReps,
	}
}

// Digest is a 64-bit order-independent digest of the whole state: blocks
// (partition, hash, token counts, access counter), residencies (partition,
// hash, replica, last_seen), replica stats and the policy. Two indexes that
// applied the same calls have equal digests whatever their internal layout
// (contract §8 "FSM digest"). Call it on the writer goroutine (or use
// View().Digest()) for a value consistent with an applied index.
func (ix *Index) Digest() uint64 {
	var h uint64
	for i := range ix.shards {
		s := &ix.shards[i]
		s.mu.RLock()
		h += s.d.digest
		s.mu.RUnlock()
	}
	ix.metaMu.RLock()
	h += ix.statsDigestLocked()
	ix.metaMu.RUnlock()
	return h + ix.pol.Load().digest
}

func (ix *Index) statsDigestLocked() uint64 {
	var h uint64
	for _, r := range ix.m.stats {
		h += statsDigest(&r.s)
	}
	return h
}

// lockW locks shard si for writing and returns its data, which the writer
// mutates in place. While a view is open it points the shard's undo state
// at the newest view's log: every change of a block then saves the
// block's pre-image first (shardData.pre), so the cost of a write after
// View is bounded by the blocks it changes, never by the size of a shard.
//
// Invariant: a writer (the apply goroutine, or one of the parallel
// apply's workers) never holds (or waits for) a shard lock while it holds
// another one. Lookups hold the read locks of several shards at once
// (matchChain), taken in ascending shard order; with several writers
// both rules are needed for that to be deadlock-free (shardLocks).
func (ix *Index) lockW(si int) *shardData {
	s := &ix.shards[si]
	s.mu.Lock()
	d := s.d
	if lg := ix.views.log; lg != nil {
		d.beginUndo(si, lg)
	}
	return d
}
