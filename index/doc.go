// Package index is the in-memory prefix-cache index of inference-cache
// (contract §4, §5, §6, §7): which replicas hold which KV blocks, per partition
// (hash_scheme, model_id, tenant_id, adapter_id), and the LookupRoute
// decision made from it: chain matching with leading-run semantics,
// ranking v1/v2, the two filters, miss classification (UNKNOWN_*),
// TENANT_HOT, AFFINITY_HINT (rendezvous hashing) and NO_HINT.
//
// Hints carry the replica's queue (requests waiting and running) from
// fresh stats. A lookup with LookupRequest.Explain also returns each
// hint's score factors in Result.Factors, parallel to Result.Hints,
// derived after the sort and the cap for the hints returned only; a
// lookup without Explain computes, stores and allocates nothing for them.
//
// The package is pure: no clock (callers pass now in ms), no I/O, and no
// goroutine outlives a call (ApplyEvents may split a large batch over
// SetApplyWorkers goroutines and waits for them, with a result identical
// to the sequential apply). Every write method is deterministic in its arguments, so the
// Raft FSM can replay the same commands on every node and obtain the same
// state and the same Digest.
//
// Concurrency: exactly one writer goroutine calls SetPolicy, ApplyEvents,
// ApplyStats, Expire, Credit and View; any number of goroutines call Lookup,
// Digest and Sizes at the same time. Blocks live in 4,096 shards of flat
// slices, each behind its own RWMutex; the writer holds a shard's lock for
// one block update (or one shard's part of a scan), never two shard locks
// at once, so a lookup never waits for a whole batch, an expiry pass or an
// eviction pass. A lookup read-locks the shards of up to 32 chain blocks
// together and resolves those blocks in overlapping passes (so their cache
// misses overlap); the writer waits at most for one such batch (~1–2 µs).
// View copies only the small meta state and opens an epoch: the writer
// keeps mutating in place and, before its first change of a block since
// the newest open view, appends that block's pre-image to the view's undo
// log, which the view's export substitutes for the live block. So the
// first write after a snapshot costs a copy of each block it changes,
// never a copy of a shard or of the index (see DESIGN.md).
//
// A lookup is consistent within each 32-block batch but not across
// batches: a long chain may see a write that lands between two batches.
// That is within the contract: the answer is a stale-tolerant hint (contract §1.3).
//
// See DESIGN.md for the layout, the costs and the trade-offs.
package index
