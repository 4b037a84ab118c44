package index

import "github.com/inference-cache/inference-cache/policy"

// TEMPORARY SKELETON: the signatures below are the contract the FSM and API
// code against; the index implementation replaces every body.

// Index is the in-memory prefix index (SPEC 4, 5). One writer goroutine
// (the FSM's apply) calls the write methods; any number of goroutines call
// Lookup concurrently with it.
type Index struct{ p policy.Policy }

// New returns an empty index with policy p.
func New(p policy.Policy) *Index { return &Index{p: p} }

// Policy returns the policy in force (a copy).
func (ix *Index) Policy() policy.Policy { return ix.p.Clone() }

// SetPolicy replaces the policy (writer only).
func (ix *Index) SetPolicy(p policy.Policy) { panic("index: not implemented") }

// ApplyEvents applies block events in order (writer only) and enforces
// MaxResidencies; returns how many events changed state.
func (ix *Index) ApplyEvents(evs []BlockEvent) int { panic("index: not implemented") }

// ApplyStats records replica stats (writer only).
func (ix *Index) ApplyStats(st []ReplicaStats) { panic("index: not implemented") }

// Expire drops residencies with last_seen older than nowMs − EvictionTTL
// (writer only); returns how many were dropped.
func (ix *Index) Expire(nowMs int64) int { panic("index: not implemented") }

// Credit increments the access counters of blocks of partition p (writer
// only); ignored unless the policy is LFU.
func (ix *Index) Credit(p Partition, hashes []uint64) { panic("index: not implemented") }

// Lookup answers req into res (reset first). Safe concurrently with the
// writer.
func (ix *Index) Lookup(req *LookupRequest, res *Result) { panic("index: not implemented") }

// Digest is a 64-bit order-independent digest of the whole state.
func (ix *Index) Digest() uint64 { panic("index: not implemented") }

// Sizes counts partitions, blocks, residencies and replicas.
func (ix *Index) Sizes() Sizes { panic("index: not implemented") }

// View returns a cheap, immutable, consistent point-in-time view for
// snapshots (writer goroutine only; the writer may continue at once).
func (ix *Index) View() *View { panic("index: not implemented") }

// View is an immutable point-in-time view of an Index.
type View struct{}

// Residency is one replica holding one block.
type Residency struct {
	ReplicaID  string
	LastSeenMs int64
}

// BlockRecord is one block of one partition with its residents, as
// exported to and imported from snapshots.
type BlockRecord struct {
	Partition Partition
	Hash      uint64
	Tokens    uint32
	CumTokens uint32
	Access    uint64
	Residents []Residency
}

// Blocks calls fn for every block in a deterministic order.
func (v *View) Blocks(fn func(BlockRecord) error) error { panic("index: not implemented") }

// Stats calls fn for every replica's stats in replica id order.
func (v *View) Stats(fn func(ReplicaStats) error) error { panic("index: not implemented") }

// Policy returns the view's policy.
func (v *View) Policy() policy.Policy { panic("index: not implemented") }

// Digest equals the Digest of the index when the view was taken.
func (v *View) Digest() uint64 { panic("index: not implemented") }

// Sizes of the index when the view was taken.
func (v *View) Sizes() Sizes { panic("index: not implemented") }

// Release lets the index reclaim what the view pinned.
func (v *View) Release() {}

// Builder loads a fresh Index from snapshot records.
type Builder struct{}

// NewBuilder starts a fresh index with policy p.
func NewBuilder(p policy.Policy) *Builder { return &Builder{} }

// AddBlock adds one block record; an error names what is invalid.
func (b *Builder) AddBlock(r BlockRecord) error { panic("index: not implemented") }

// AddStats adds one replica's stats.
func (b *Builder) AddStats(s ReplicaStats) error { panic("index: not implemented") }

// Build returns the loaded index; the builder must not be used after.
func (b *Builder) Build() *Index { panic("index: not implemented") }
