package index

import "github.com/inference-cache/inference-cache/policy"

// This file is the index's public contract, shared by the FSM (writes,
// snapshots) and the API (lookups). Bodies live in the other files.

// Partition is (hash_scheme, model_id, tenant_id, adapter_id) (contract §4.1). Keys
// of different partitions never match each other. Adapter "" is the base
// model.
type Partition struct {
	Scheme  string
	Model   string
	Tenant  string
	Adapter string
}

// EventKind is the kind of a block event (contract §6.1).
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
	// BlockHashes is the chain h_0..h_{k-1} of this event's blocks (contract §3.3).
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

// ReplicaStats is one replica's load report (contract §4.3), ms since epoch.
type ReplicaStats struct {
	ReplicaID     string
	ModelID       string
	HashSchemes   []string
	Pressure      float64            // 0..1, KV memory in use
	TenantHitRate map[string]float64 // tenant_id → 0..1
	ObservedAtMs  int64
	Endpoint      string
	// WaitingRequests and RunningRequests are the engine's queue at
	// ObservedAtMs, in requests: queued and not yet scheduled, and in the
	// running batch. They do not enter the score; every hint carries them
	// while the stats are fresh (contract §5.8), so a gateway can weigh load.
	WaitingRequests uint32
	RunningRequests uint32
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

// LookupRequest is a resolved LookupRoute request (contract §5.1). Key precedence:
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
	// CacheSalt is the hash domain of TokenIDs (vLLM's cache_salt): when
	// non-empty the chain is fingerprint.AppendSaltedBlockHashes, so a
	// salted request matches only blocks stored under the same salt. It
	// does not apply to caller-given BlockHashes or PrefixHash.
	CacheSalt   string
	SLOTTFTMs   uint32 // 0 = no SLO
	MaxReplicas uint32 // 0 = policy MaxReplicas
	NowMs       int64  // the caller's clock, ms since epoch
	// Explain fills Result.Factors and Result.RankingVersion. Off, the
	// lookup stores nothing beyond the hints.
	Explain bool
	// IncludeLoad fills Result.Loads. Off, the lookup reads no stats
	// beyond those of the hints.
	IncludeLoad bool
}

// Load is one serving replica's queue from its fresh stats
// (LookupRequest.IncludeLoad).
type Load struct {
	ReplicaID                        string
	WaitingRequests, RunningRequests uint32
	Pressure                         float64
	AgeMs                            uint64 // NowMs − the stats' ObservedAtMs (0 if in the future)
}

// Factors are the values behind one hint's score (contract §5.8), reported only
// for a lookup with Explain.
//
// For PREFIX_MATCH the score is matched_tokens × Freshness ×
// PressureFactor × SLOBias × DistinguishingPower, computed as
// (matched_tokens × Freshness) × (PressureFactor × SLOBias ×
// DistinguishingPower), so that product reproduces it bit for bit; under
// ranking v1 it is matched_tokens × Freshness and the other three factors
// are reported as 1. MatchingAtDepth and TotalReplicas are
// the terms of distinguishing power (1 − MatchingAtDepth/TotalReplicas,
// 0 when TotalReplicas is 0) under both versions.
//
// For TENANT_HOT the score is TenantHitRate; for AFFINITY_HINT it is 0
// and Rendezvous is true. Neither has a matched run, so Freshness,
// DistinguishingPower and MatchingAtDepth are 0 and SLOBias is 1;
// PressureFactor is the replica's and TotalReplicas the serving set's.
type Factors struct {
	Freshness           float64 // max(0, 1 − age/evictionTTL), 0..1
	PressureFactor      float64 // max(0, 1 − pressureWeight × pressure); 1 when stats are stale or absent
	SLOBias             float64 // 1 + Freshness × sloTightBias for a tight SLO, else 1
	DistinguishingPower float64 // 1 − MatchingAtDepth/TotalReplicas, 0..1
	MatchingAtDepth     uint32  // replicas whose run reaches this hint's depth
	TotalReplicas       uint32  // the serving set of (scheme, model), contract §4.5
	TenantHitRate       float64 // TENANT_HOT: the replica's hit rate for the tenant, 0..1
	Rendezvous          bool    // AFFINITY_HINT: chosen by rendezvous hashing
	StatsFresh          bool    // the replica's stats are within statsFreshness
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
	// WaitingRequests and RunningRequests are the replica's
	// ReplicaStats values when its stats are fresh (the same rule as
	// Pressure), else 0.
	WaitingRequests uint32
	RunningRequests uint32
}

// Result is the index's answer. Hints and Credit alias buffers owned by the
// Result, so a caller may reuse one Result across lookups (Reset) to keep
// the hot path allocation-free.
type Result struct {
	Hints []Hint
	// Factors is parallel to Hints (Factors[i] explains Hints[i]) for a
	// lookup with Explain, else empty: a lookup without Explain never
	// writes it.
	Factors []Factors
	// Loads are the replicas with fresh stats serving the request's
	// (scheme, model), replica id ascending; only with IncludeLoad.
	Loads []Load
	// RankingVersion is the policy's ranking version the lookup used
	// ("v1" or "v2"); set only with Explain.
	RankingVersion policy.RankingVersion
	Reason         Reason
	// Detail says why, in a short constant-ish phrase (no tenant data of
	// other tenants).
	Detail string
	// CreditPartition/CreditHashes are the block hashes to credit for a
	// delivered PREFIX_MATCH under an LFU policy (contract §5), empty otherwise:
	// the index is the one place that decides, with the policy it ranked
	// with; a caller credits what it names and checks nothing else.
	CreditPartition Partition
	CreditHashes    []uint64
	// Chain is the block hashes the lookup resolved its key to, root
	// first: the caller's block_hashes, or its token ids fingerprinted
	// with the model's block size (empty for a key of a prefix hash
	// alone). It aliases the request or the result's scratch: valid
	// until either is reused. Provisional residencies (contract §5.12)
	// are matched against it.
	Chain []uint64

	// Scratch reused across lookups so a reused Result keeps the hot path
	// allocation-free.
	keyBuf []uint64
	cands  []cand
}

// Reset empties r, keeping its buffers.
func (r *Result) Reset() {
	r.Hints = r.Hints[:0]
	r.Loads = r.Loads[:0]
	r.Factors = r.Factors[:0]
	r.RankingVersion = ""
	r.Reason = NoHint
	r.Detail = ""
	r.CreditPartition = Partition{}
	r.CreditHashes = r.CreditHashes[:0]
	r.Chain = nil
}

// Sizes counts what the index holds.
type Sizes struct {
	Partitions  int
	Blocks      int
	Residencies int
	Replicas    int // replicas with residencies or stats
}
