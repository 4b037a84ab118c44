package index

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/inference-cache/inference-cache/policy"
)

// View is an immutable point-in-time view of an Index, for snapshots
// (SPEC 8, 13: Apply is blocked while FSM.Snapshot runs, so taking the view
// must be cheap and the slow export happens later, in Persist).
//
// Taking a view pins every shard's current data (O(numShards)) and copies
// only the small meta state (partitions, replica ids, stats). The writer
// copies a pinned shard before its next mutation of it, so the view's data
// never changes; Release unpins what the writer has not copied yet.
type View struct {
	shards   [numShards]*shardData
	parts    map[uint32]Partition
	ids      []string
	stats    []ReplicaStats // sorted by replica id
	pol      policy.Policy
	digest   uint64
	sizes    Sizes
	released atomic.Bool
}

// Residency is one replica holding one block.
type Residency struct {
	ReplicaID  string
	LastSeenMs int64
}

// BlockRecord is one block of one partition with its residents, as
// exported to and imported from snapshots. Residents are in replica id
// order.
type BlockRecord struct {
	Partition Partition
	Hash      uint64
	Tokens    uint32 // the block's own token count
	CumTokens uint32 // prefix tokens up to and including the block
	Access    uint64 // LFU access counter
	Residents []Residency
}

// View returns a cheap, immutable, consistent point-in-time view for
// snapshots (writer goroutine only; the writer may continue at once).
func (ix *Index) View() *View {
	v := &View{parts: make(map[uint32]Partition, len(ix.m.partsByID))}
	var digest uint64
	for i := range ix.shards {
		d := ix.shards[i].d
		d.pins.Add(1)
		v.shards[i] = d
		digest += d.digest
	}
	for id, pe := range ix.m.partsByID {
		v.parts[id] = pe.p
	}
	// ids is append-only and its elements never change: sharing the
	// backing array is safe.
	v.ids = ix.m.reps.ids
	v.stats = make([]ReplicaStats, 0, len(ix.m.stats))
	for _, r := range ix.m.stats {
		v.stats = append(v.stats, copyStats(r.s))
	}
	slices.SortFunc(v.stats, func(a, b ReplicaStats) int { return cmp.Compare(a.ReplicaID, b.ReplicaID) })
	ps := ix.pol.Load()
	v.pol = ps.p.Clone()
	v.digest = digest + ix.statsDigestLocked() + ps.digest
	v.sizes = ix.sizesLocked()
	return v
}

// blockRef locates one block of a view for the sorted export.
type blockRef struct {
	rank uint32 // partition rank in (scheme, model, tenant, adapter) order
	loc  uint32 // shard << slotIdxBits | block index
	hash uint64
}

// Blocks calls fn for every block in a deterministic order: partitions by
// (scheme, model, tenant, adapter), then block hash; residents by replica
// id. The order depends only on the content, so two nodes with equal
// digests export byte-identical snapshots. It stops at fn's first error.
// Cost: one sort of all blocks (16 bytes each, transient).
func (v *View) Blocks(fn func(BlockRecord) error) error {
	if v.released.Load() {
		return errors.New("index: view used after Release")
	}
	ids := make([]uint32, 0, len(v.parts))
	for id := range v.parts {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b uint32) int {
		pa, pb := v.parts[a], v.parts[b]
		return comparePartition(&pa, &pb)
	})
	rank := make(map[uint32]uint32, len(ids))
	for i, id := range ids {
		rank[id] = uint32(i)
	}
	refs := make([]blockRef, 0, v.sizes.Blocks)
	for si, d := range v.shards {
		for bi := range d.blocks {
			b := &d.blocks[bi]
			if b.part == 0 {
				continue
			}
			refs = append(refs, blockRef{rank: rank[b.part], loc: uint32(si)<<slotIdxBits | uint32(bi), hash: b.hash})
		}
	}
	slices.SortFunc(refs, func(a, b blockRef) int {
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		return cmp.Compare(a.hash, b.hash)
	})
	var resBuf []Residency
	for _, r := range refs {
		d := v.shards[r.loc>>slotIdxBits]
		b := &d.blocks[r.loc&slotIdxMask]
		resBuf = resBuf[:0]
		for _, w := range d.residents(b) {
			resBuf = append(resBuf, Residency{ReplicaID: v.ids[resRep(w)], LastSeenMs: resSeen(w)})
		}
		slices.SortFunc(resBuf, func(a, b Residency) int { return cmp.Compare(a.ReplicaID, b.ReplicaID) })
		rec := BlockRecord{
			Partition: v.parts[b.part],
			Hash:      b.hash,
			Tokens:    b.tokens,
			CumTokens: b.cum,
			Access:    uint64(b.access),
			Residents: slices.Clone(resBuf),
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	return nil
}

// Stats calls fn for every replica's stats in replica id order.
func (v *View) Stats(fn func(ReplicaStats) error) error {
	for _, s := range v.stats {
		if err := fn(copyStats(s)); err != nil {
			return err
		}
	}
	return nil
}

// Policy returns the view's policy.
func (v *View) Policy() policy.Policy { return v.pol.Clone() }

// Digest equals the Digest of the index when the view was taken.
func (v *View) Digest() uint64 { return v.digest }

// Sizes of the index when the view was taken.
func (v *View) Sizes() Sizes { return v.sizes }

// Release lets the index reclaim what the view pinned; the view must not
// be used after. Safe from any goroutine, and idempotent.
func (v *View) Release() {
	if v.released.Swap(true) {
		return
	}
	for _, d := range v.shards {
		if d != nil {
			d.pins.Add(-1)
		}
	}
}

// Builder loads a fresh Index from snapshot records (SPEC 8 restore).
type Builder struct {
	ix  *Index
	err error
}

// NewBuilder starts a fresh index with policy p.
func NewBuilder(p policy.Policy) *Builder { return &Builder{ix: New(p)} }

// ErrBuilderUsed is returned by a Builder after Build.
var ErrBuilderUsed = errors.New("index: builder used after Build")

// AddBlock adds one block record; an error names what is invalid (empty
// scheme, model or replica id, zero tokens, a duplicate block or resident,
// no residents).
func (b *Builder) AddBlock(r BlockRecord) error {
	if b.ix == nil {
		return ErrBuilderUsed
	}
	if r.Partition.Scheme == "" || r.Partition.Model == "" {
		return fmt.Errorf("index: block %#x: empty hash scheme or model in partition %+v", r.Hash, r.Partition)
	}
	if r.Tokens == 0 {
		return fmt.Errorf("index: block %#x of %+v: zero token count", r.Hash, r.Partition)
	}
	if len(r.Residents) == 0 {
		return fmt.Errorf("index: block %#x of %+v: no residents", r.Hash, r.Partition)
	}
	ix := b.ix
	pe := ix.writerPartition(r.Partition)
	mx := keyMix(pe.id, r.Hash)
	s := &ix.shards[shardOf(mx)]
	d := s.d
	bi, slot := d.find(pe.id, r.Hash, mx)
	// A rejected record must not leave an empty partition behind.
	defer ix.m.dropIfEmpty(pe)
	if bi >= 0 {
		return fmt.Errorf("index: block %#x of %+v: duplicate record", r.Hash, r.Partition)
	}
	reps := make([]uint32, len(r.Residents))
	for i, rs := range r.Residents {
		if rs.ReplicaID == "" {
			return fmt.Errorf("index: block %#x of %+v: empty replica id", r.Hash, r.Partition)
		}
		rep, ok := ix.writerReplica(rs.ReplicaID)
		if !ok {
			return fmt.Errorf("index: block %#x: more than %d replicas", r.Hash, maxReplicas)
		}
		if slices.Contains(reps[:i], rep) {
			return fmt.Errorf("index: block %#x of %+v: replica %q listed twice", r.Hash, r.Partition, rs.ReplicaID)
		}
		reps[i] = rep
	}
	if len(reps) > maxResident {
		return fmt.Errorf("index: block %#x: more than %d residents", r.Hash, maxResident)
	}
	access := uint32(min(r.Access, maxAccess))
	s.mu.Lock()
	bi = d.insertBlock(pe.id, r.Hash, mx, slot, r.Tokens, r.CumTokens)
	if bi < 0 {
		s.mu.Unlock()
		return fmt.Errorf("index: block %#x: shard full", r.Hash)
	}
	d.blocks[bi].access = access
	d.digest += blockDigest(pe.hash, r.Hash, r.Tokens, r.CumTokens, access)
	for i, rs := range r.Residents {
		seen := clampSeen(rs.LastSeenMs)
		d.addResident(bi, packRes(reps[i], seen))
		d.digest += residencyDigest(pe.hash, r.Hash, ix.m.reps.hashes[reps[i]], seen)
	}
	s.mu.Unlock()
	ix.metaMu.Lock()
	ix.m.totalBlks++
	for _, rep := range reps {
		ix.m.addRes(pe, rep, 1)
	}
	ix.metaMu.Unlock()
	return nil
}

// AddStats adds one replica's stats.
func (b *Builder) AddStats(s ReplicaStats) error {
	if b.ix == nil {
		return ErrBuilderUsed
	}
	if s.ReplicaID == "" {
		return errors.New("index: stats with empty replica id")
	}
	b.ix.ApplyStats([]ReplicaStats{s})
	return nil
}

// Build returns the loaded index; the builder must not be used after.
func (b *Builder) Build() *Index {
	ix := b.ix
	b.ix = nil
	return ix
}
