// Package kvcache is the KV-cache model of a simulated inference engine:
// a fixed number of blocks with least-recently-used eviction, shared with
// the running requests as vLLM's block pool is (their blocks pinned, their
// output blocks reserved). The benchmark's virtual-time engines (bench) and
// the real-time sim engine (simengine) both use it, so the two simulations
// cache, evict and report alike. It has no clock, no I/O and no goroutines,
// and is not safe for concurrent use.
package kvcache
