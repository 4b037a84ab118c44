package bench

import "github.com/inference-cache/inference-cache/internal/kvcache"

// Cache is one engine's KV cache model (kvcache.Cache: C blocks, LRU,
// shared with the running requests). The real-time sim engine uses the
// same model, so both live in internal/kvcache.
type Cache = kvcache.Cache

// Admission is what admitting a request's blocks changed (kvcache.Admission).
type Admission = kvcache.Admission

// BlockRun is a half-open range of block positions (kvcache.BlockRun).
type BlockRun = kvcache.BlockRun

// NewCache returns an empty cache of capacity blocks (at least 1).
func NewCache(capacity int) *Cache { return kvcache.New(capacity) }
