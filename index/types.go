package index

// This file is the index's public contract, shared by the FSM (writes,
// snapshots) and the API (lookups). Bodies live in the other files.

// Partition is (hash_scheme, model_id, tenant_id, adapter_id) (SPEC 4). Keys
// of different partitions never match each other. Adapter "" is the base
// model.
type Partition struct {
	Scheme  string
	Model   string
	Tenant  string
	Adapter string
}

// EventKind is the kind of a block event (SPEC 6).
type EventKind uint8

const (
	// Stored: the replica now holds the event's blocks.
	Stored EventKind = 1
	// Removed: the replica no longer holds the event's blocks.
	Removed EventKind = 2
	// Cleared: every block of the replica is gone, in every partition.
	Cleared EventKind = 3
)

// BlockEvent is one validated observation of a replica's KV cache. The API
// layer validates and fingerprints (token_ids → BlockHashes) before the event
// reaches the log; apply still tolerates anything (it never panics) because
// a log written by an older binary may hold odd values.
type BlockEvent struct {
	Kind      EventKind
	ReplicaID string
	Partition Partition
	// BlockHashes is the chain h_0..h_{k-1} of this event's blocks (SPEC 3).
	BlockHashes []uint64
	// BlockTokenCounts[i] is block i's own token count; same length as
	// BlockHashes (empty for Cleared).
	BlockTokenCounts []uint32
	// PrefixTokensBefore is the tokens before BlockHashes[0] in the prompt,
	// so the cumulative prefix tokens of block i is PrefixTokensBefore +
	// sum(BlockTokenCounts[0..i]).
	PrefixTokensBefore uint32
	// ObservedAtMs is when the engine saw the event, ms since the Unix
	// epoch; it becomes the residency's last_seen.
	ObservedAtMs int64
}

// ReplicaStats is one replica's load report (SPEC 4), ms since epoch.
type ReplicaStats struct {
	ReplicaID     string
	ModelID       string
	HashSchemes   []string
	Pressure      float64            // 0..1, KV memory in use
	TenantHitRate map[string]float64 // tenant_id → 0..1
	ObservedAtMs  int64
	Endpoint      string
}

// Reason mirrors inferencecache.v1.ReasonCode (same numeric values).
type Reason int32

const (
	NoHint         Reason = 0
	PrefixMatch    Reason = 1
	TenantHot      Reason = 2
	AffinityHint   Reason = 3
	UnknownScheme  Reason = 4
	UnknownModel   Reason = 5
	UnknownTenant  Reason = 6
	UnknownAdapter Reason = 7
)

// LookupRequest is a resolved LookupRoute request (SPEC 5). Key precedence:
// BlockHashes and/or PrefixHash (HasPrefixHash); else TokenIDs, fingerprinted
// with the policy block size of Partition.Model. Prompt text is tokenized by
// the API layer into TokenIDs before it gets here.
type LookupRequest struct {
	Partition        Partition
	PrefixHash       uint64
	HasPrefixHash    bool
	BlockHashes      []uint64
	BlockTokenCounts []uint32 // optional; len must equal len(BlockHashes)
	TokenIDs         []uint32
	SLOTTFTMs        uint32 // 0 = no SLO
	MaxReplicas      uint32 // 0 = policy MaxReplicas
	NowMs            int64  // the caller's clock, ms since epoch
}

// Factors are the per-factor values behind a hint's score (SPEC 5), for
// explanation.
type Factors struct {
	Freshness           float64
	PressureFactor      float64
	SLOBias             float64
	DistinguishingPower float64
	MatchingAtDepth     uint32
	TotalReplicas       uint32
	StatsFresh          bool
}

// Hint is one ranked replica.
type Hint struct {
	ReplicaID     string
	Score         float64
	MatchedTokens uint32
	MatchedBlocks uint32
	Freshness     float64
	AgeMs         uint64
	Pressure      float64 // 0 when stats are stale or absent
	Factors       Factors
}

// Result is the index's answer. Hints and Credit alias buffers owned by the
// Result, so a caller may reuse one Result across lookups (Reset) to keep
// the hot path allocation-free.
type Result struct {
	Hints  []Hint
	Reason Reason
	// Detail says why, in a short constant-ish phrase (no tenant data of
	// other tenants).
	Detail string
	// CreditPartition/CreditHashes are the block hashes an LFU policy
	// should credit for a delivered PREFIX_MATCH (empty otherwise).
	CreditPartition Partition
	CreditHashes    []uint64

	// Scratch reused across lookups so a reused Result keeps the hot path
	// allocation-free.
	keyBuf []uint64
	cands  []cand
}

// Reset empties r, keeping its buffers.
func (r *Result) Reset() {
	r.Hints = r.Hints[:0]
	r.Reason = NoHint
	r.Detail = ""
	r.CreditPartition = Partition{}
	r.CreditHashes = r.CreditHashes[:0]
}

// Sizes counts what the index holds.
type Sizes struct {
	Partitions  int
	Blocks      int
	Residencies int
	Replicas    int // replicas with residencies or stats
}
