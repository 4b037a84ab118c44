package bench

import "github.com/inference-cache/inference-cache/engine"

// Cache is one engine's KV cache (engine.Cache: C blocks, LRU, shared
// with the running requests), the one the engine model keeps.
type Cache = engine.Cache

// Admission is what admitting a request's blocks changed (engine.Admission).
type Admission = engine.Admission

// BlockRun is a half-open range of block positions (engine.BlockRun).
type BlockRun = engine.BlockRun

// NewCache returns an empty cache of capacity blocks (at least 1).
func NewCache(capacity int) *Cache { return engine.NewCache(capacity) }
