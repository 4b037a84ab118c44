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
// (contract §8.2, §13.3: Apply is blocked while FSM.Snapshot runs, so taking the view
// must be cheap and the slow export happens later, in Persist).
//
// Taking a view copies only the small meta state (partitions, replica ids,
// stats, policy, digest, sizes) and opens an epoch; block data is neither
// copied nor pinned. The writer keeps mutating the shards in place and,
// before its first change of a block since the view, saves the block's
// pre-image in the shard's undo log; the view's export reads the live
// shards and substitutes those pre-images (undo.go). Release lets the
// writer free the pre-images no open view needs any more.
type View struct {
	ix    *Index
	epoch uint64
	// lens[si] is shard si's block slab length at the view: entries at or
	// past it were born after the view (the slab never shrinks), so the
	// writer saves no pre-image for them and the export skips them.
	lens     [numShards]uint32
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
//
// Ownership: in a record passed to View.Blocks' callback, Residents is
// valid only during that call (Blocks reuses its backing array for the
// next record), so a callback that keeps it must copy it. Builder.AddBlock
// does not keep r.Residents either (it copies what it stores), so callers
// may reuse it after the call (snapshot.Read does).
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
	ix.reclaimViews()
	v := &View{ix: ix, parts: make(map[uint32]Partition, len(ix.m.partsByID))}
	v.epoch = ix.openView()
	var digest uint64
	for i := range ix.shards {
		// The writer reads its own data without the lock.
		d := ix.shards[i].d
		digest += d.digest
		v.lens[i] = uint32(len(d.blocks))
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
	hash uint64
	loc  uint64 // rank << 48 | shard << slotIdxBits | block index
}

// A blockRef's loc packs the partition rank above the shard and the block
// index (36 bits with 4,096 shards): 2^28 partitions, far more than a view
// can hold in memory.
const (
	refRankShift = shardBits + slotIdxBits
	refLocMask   = 1<<refRankShift - 1
)

// Blocks calls fn for every block in a deterministic order: partitions by
// (scheme, model, tenant, adapter), then block hash; residents by replica
// id. The order depends only on the content, so two nodes with equal
// digests export byte-identical snapshots. It stops at fn's first error.
// It runs concurrently with the writer (and other exports): the records
// are the index as it was at View, whatever was written since. No lock is
// held while fn runs. Cost: one sort of all blocks (16 bytes each,
// transient), a shard read lock per block read from live data, and a
// private index of the pre-images the view needs.
func (v *View) Blocks(fn func(BlockRecord) error) error {
	if v.released.Load() {
		return errors.New("index: view used after Release")
	}
	parts, ranks, err := v.partitionRanks()
	if err != nil {
		return err
	}
	xs := &viewIdx{epoch: v.epoch, lens: &v.lens, shards: make([]*viewShard, numShards), saves: make([]uint64, numShards)}
	refs := v.blockRefs(xs, &ranks)
	// Pass 2, in export order. resBuf is reused for every record (see
	// BlockRecord: Residents is valid only during fn).
	var resBuf []Residency
	for i, r := range refs {
		if i&4095 == 4095 && v.released.Load() {
			return errors.New("index: view released during export")
		}
		var b blockEnt
		b, resBuf = v.readBlock(xs, r.loc&refLocMask, resBuf[:0])
		if len(resBuf) > 1 {
			slices.SortFunc(resBuf, func(a, b Residency) int { return cmp.Compare(a.ReplicaID, b.ReplicaID) })
		}
		rec := BlockRecord{
			Partition: parts[r.loc>>refRankShift],
			Hash:      b.hash,
			Tokens:    b.tokens,
			CumTokens: b.cum,
			Access:    uint64(b.access),
			Residents: resBuf[:len(resBuf):len(resBuf)],
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	return nil
}

// partRanks maps a partition id of a view to its rank in export order,
// shifted into a blockRef's loc.
type partRanks struct {
	slice []uint64
	m     map[uint32]uint64
}

func (pr *partRanks) of(id uint32) uint64 {
	if pr.slice != nil {
		return pr.slice[id]
	}
	return pr.m[id]
}

// partitionRanks orders the view's partitions by (scheme, model, tenant,
// adapter): parts[rank] is the partition of that rank. It fails when there
// are more partitions than a blockRef's loc can rank.
func (v *View) partitionRanks() ([]Partition, partRanks, error) {
	ids := make([]uint32, 0, len(v.parts))
	maxID := uint32(0)
	for id := range v.parts {
		ids = append(ids, id)
		maxID = max(maxID, id)
	}
	slices.SortFunc(ids, func(a, b uint32) int {
		pa, pb := v.parts[a], v.parts[b]
		return comparePartition(&pa, &pb)
	})
	if uint64(len(ids)) > 1<<(64-refRankShift) {
		return nil, partRanks{}, fmt.Errorf("index: %d partitions in a view, more than the export supports", len(ids))
	}
	// A slice indexed by partition id replaces a map lookup per block.
	// Ids are never reused, so after heavy partition churn they can be
	// sparse: then fall back to the map.
	var ranks partRanks
	if int(maxID) <= 4*len(ids)+4096 {
		ranks.slice = make([]uint64, maxID+1)
	} else {
		ranks.m = make(map[uint32]uint64, len(ids))
	}
	parts := make([]Partition, len(ids))
	for i, id := range ids {
		if ranks.slice != nil {
			ranks.slice[id] = uint64(i) << refRankShift
		} else {
			ranks.m[id] = uint64(i) << refRankShift
		}
		parts[i] = v.parts[id]
	}
	return parts, ranks, nil
}

// blockRefs is pass 1 of Blocks, shard by shard under its read lock: the
// blocks of the view are the live ones without a pre-image plus the
// pre-images of blocks (part != 0); xs is this export's private index of
// the pre-images. The refs come back in export order.
func (v *View) blockRefs(xs *viewIdx, ranks *partRanks) []blockRef {
	ix := v.ix
	refs := make([]blockRef, 0, v.sizes.Blocks)
	for si := range ix.shards {
		s := &ix.shards[si]
		s.mu.RLock()
		d := s.d
		xs.syncShard(&ix.views, si, d)
		x := xs.shards[si]
		for bi := range d.blocks[:v.lens[si]] {
			b := &d.blocks[bi]
			if b.part == 0 || x.has(uint32(bi)) {
				continue
			}
			refs = append(refs, blockRef{hash: b.hash, loc: ranks.of(b.part) | uint64(si)<<slotIdxBits | uint64(bi)})
		}
		s.mu.RUnlock()
		// The shard's pre-images indexed so far; any indexed later belong
		// to blocks this scan already read live (unchanged until then).
		if x == nil {
			continue
		}
		for bi, e := range x.pre {
			if e.b.part != 0 {
				refs = append(refs, blockRef{hash: e.b.hash, loc: ranks.of(e.b.part) | uint64(si)<<slotIdxBits | uint64(bi)})
			}
		}
	}
	// Rank order first (the high bits of loc), then hash; (rank, hash) is
	// unique, so the shard and block bits never decide.
	slices.SortFunc(refs, func(a, b blockRef) int {
		if c := cmp.Compare(a.loc>>refRankShift, b.loc>>refRankShift); c != 0 {
			return c
		}
		return cmp.Compare(a.hash, b.hash)
	})
	return refs
}

// readBlock reads the block at loc (shard << slotIdxBits | block index) as
// it was at View, appending its residents to resBuf. A block with a
// pre-image is read from it (immutable: no lock). Any other block is read
// live under its shard's read lock, after indexing the pre-images saved
// since pass 1: if the writer has changed the block since, its pre-image
// is there.
func (v *View) readBlock(xs *viewIdx, loc uint64, resBuf []Residency) (blockEnt, []Residency) {
	si, bi := int(loc>>slotIdxBits), uint32(loc&slotIdxMask)
	if x := xs.shards[si]; x.has(bi) {
		e := x.pre[bi]
		return e.b, v.appendResidents(resBuf, e.res)
	}
	ix := v.ix
	s := &ix.shards[si]
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.d
	xs.syncShard(&ix.views, si, d)
	if x := xs.shards[si]; x.has(bi) {
		e := x.pre[bi]
		return e.b, v.appendResidents(resBuf, e.res)
	}
	b := d.blocks[bi]
	return b, v.appendResidents(resBuf, d.residents(&b))
}

func (v *View) appendResidents(out []Residency, rs []uint64) []Residency {
	for _, w := range rs {
		out = append(out, Residency{ReplicaID: v.ids[resRep(w)], LastSeenMs: resSeen(w)})
	}
	return out
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

// Release lets the index free the pre-images only this view needed (the
// writer does it at its next call); the view must not be used after.
// Safe from any goroutine, and idempotent.
func (v *View) Release() {
	if v.released.Swap(true) || v.ix == nil {
		return
	}
	v.ix.closeView(v.epoch)
}

// Builder loads a fresh Index from snapshot records (contract §8.2 restore).
//
// The index under construction is not visible to any other goroutine until
// Build, so the builder writes it without taking the shard and meta locks,
// and batches the meta count updates of consecutive records of one
// partition (records arrive grouped by partition): they are flushed when the
// partition changes, before a rejected record's cleanup, before AddStats and
// in Build.
type Builder struct {
	ix *Index

	reps []uint32 // the current record's interned replicas (reused)
	// repCache maps a caller's replica id string to its interned index
	// without hashing it: snapshot readers pass the same few strings
	// again and again, and comparing equal strings that share their bytes
	// is one pointer comparison.
	repCache [64]struct {
		id  string
		rep uint32
	}
	// Pending residency counts of partition pendPE, per replica.
	pendPE   *partEnt
	pend     []int64
	pendReps []uint32
	pendBlks int64
}

// NewBuilder starts a fresh index with policy p.
func NewBuilder(p policy.Policy) *Builder { return &Builder{ix: New(p)} }

// ErrBuilderUsed is returned by a Builder after Build.
var ErrBuilderUsed = errors.New("index: builder used after Build")

// replica interns id through the cache.
func (b *Builder) replica(id string) (uint32, bool) {
	c := &b.repCache[(uint(len(id))*31+uint(id[0])*7+uint(id[len(id)-1]))&63]
	if c.id == id && c.id != "" {
		return c.rep, true
	}
	rep, ok := b.ix.m.replicaIdx(id)
	if ok {
		c.id, c.rep = id, rep
	}
	return rep, ok
}

// flush publishes the pending meta counts.
func (b *Builder) flush() {
	m := b.ix.m
	m.totalBlks += b.pendBlks
	b.pendBlks = 0
	for _, rep := range b.pendReps {
		m.addRes(b.pendPE, rep, b.pend[rep])
		b.pend[rep] = 0
	}
	b.pendReps = b.pendReps[:0]
}

// AddBlock adds one block record; an error names what is invalid (empty
// scheme, model or replica id, zero tokens, a duplicate block or resident,
// no residents). It does not keep r.Residents (see BlockRecord).
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
	if len(r.Residents) > maxResident {
		return fmt.Errorf("index: block %#x: more than %d residents", r.Hash, maxResident)
	}
	ix := b.ix
	for i := range r.Residents {
		ix.noteObserved(r.Residents[i].LastSeenMs)
	}
	m := ix.m
	pe := b.pendPE
	if pe == nil || pe.p != r.Partition {
		if pe = m.parts[r.Partition]; pe == nil {
			pe = m.partition(r.Partition)
		}
	}
	mx := keyMix(pe.id, r.Hash)
	d := ix.shards[shardOf(mx)].d
	bi, slot := d.find(pe.id, r.Hash, mx)
	if bi >= 0 {
		return b.reject(pe, fmt.Errorf("index: block %#x of %+v: duplicate record", r.Hash, r.Partition))
	}
	reps := b.reps[:0]
	for i := range r.Residents {
		id := r.Residents[i].ReplicaID
		if id == "" {
			return b.reject(pe, fmt.Errorf("index: block %#x of %+v: empty replica id", r.Hash, r.Partition))
		}
		rep, ok := b.replica(id)
		if !ok {
			return b.reject(pe, fmt.Errorf("index: block %#x: more than %d replicas", r.Hash, maxReplicas))
		}
		if slices.Contains(reps, rep) {
			return b.reject(pe, fmt.Errorf("index: block %#x of %+v: replica %q listed twice", r.Hash, r.Partition, id))
		}
		reps = append(reps, rep)
	}
	b.reps = reps
	access := uint32(min(r.Access, maxAccess))
	if bi = d.insertBlockN(pe.id, r.Hash, mx, slot, r.Tokens, r.CumTokens, len(reps)); bi < 0 {
		return b.reject(pe, fmt.Errorf("index: block %#x: shard full", r.Hash))
	}
	blk := &d.blocks[bi]
	blk.access = access
	dg := blockDigest(pe.hash, r.Hash, r.Tokens, r.CumTokens, access)
	run := d.res[blk.resOff : blk.resOff+uint32(len(reps))]
	for i, rep := range reps {
		seen := clampSeen(r.Residents[i].LastSeenMs)
		run[i] = packRes(rep, seen)
		dg += residencyDigest(pe.hash, r.Hash, m.reps.hashes[rep], seen)
	}
	blk.resN = uint16(len(reps))
	d.nRes += len(reps)
	d.digest += dg

	if pe != b.pendPE {
		b.flush()
		b.pendPE = pe
	}
	b.pendBlks++
	for _, rep := range reps {
		if int(rep) >= len(b.pend) {
			b.pend = append(b.pend, make([]int64, int(rep)+1-len(b.pend))...)
		}
		if b.pend[rep] == 0 {
			b.pendReps = append(b.pendReps, rep)
		}
		b.pend[rep]++
	}
	return nil
}

// reject cleans up after an invalid record: a partition the record created
// must not stay behind empty.
func (b *Builder) reject(pe *partEnt, err error) error {
	b.flush()
	b.ix.m.dropIfEmpty(pe)
	if pe == b.pendPE && b.ix.m.parts[pe.p] != pe {
		b.pendPE = nil
	}
	return err
}

// AddStats adds one replica's stats.
func (b *Builder) AddStats(s ReplicaStats) error {
	if b.ix == nil {
		return ErrBuilderUsed
	}
	if s.ReplicaID == "" {
		return errors.New("index: stats with empty replica id")
	}
	b.flush()
	b.ix.ApplyStats([]ReplicaStats{s})
	return nil
}

// Build returns the loaded index; the builder must not be used after.
func (b *Builder) Build() *Index {
	if b.ix != nil {
		b.flush()
	}
	ix := b.ix
	b.ix = nil
	return ix
}
