// Package engine is the model of one vLLM engine (its prefill queue,
// continuous-batching decode, KV capacity with LRU eviction and vLLM's
// block rules) that both simulations run: the benchmark's engines in
// virtual time (bench) and the real-time sim engine behind
// `inference-cache sim-engine` (simengine). It is pure:
// no goroutines, no clock, no I/O; the caller steps it with the times it
// passes in (bench its virtual clock, simengine its wall clock) and hears
// what happened through the events it emits, so both simulations
// schedule, cache and time requests alike.
//
// # Time model
//
//   - Prefill: one request at a time, first come first served, the whole
//     prompt in one step (no chunked prefill). It takes uncached prompt
//     tokens / PrefillTPS (or, for a disaggregated decode, its uncached
//     blocks at Request.PullPerBlock each). The cached tokens are the
//     leading run of the prompt's full blocks found in the cache when the
//     prefill starts, capped as vLLM caps them: the last prompt token is
//     always computed, so a fully cached prompt recomputes its last block
//     (CachedTokens). Since prefills run in order, every earlier request's
//     blocks are there by then.
//   - Decode: the first output token comes out of the prefill (TTFT =
//     queue wait + prefill); each later one 1/DecodeTPS after the
//     previous, for every running request at once (continuous batching:
//     decoding requests slow neither each other nor the prefills), so a
//     request of n output tokens ends (n − 1)/DecodeTPS after its first.
//   - KV capacity: KVBlocks blocks of BlockSize tokens, shared
//     (cache.go, Cache). A request pins its prompt's full blocks from its
//     prefill's start to its end and reserves ReserveBlocks for its
//     partial last block and its output; cached blocks nobody pins are
//     evicted least recently used first (a prefix from its end). When the
//     head of the queue does not fit beside the running requests it
//     waits, and the queue behind it (vLLM's FCFS scheduler), unless a
//     Gate passes it over. A request needing more than KVBlocks blocks in
//     all is refused (ErrTooLong), as vLLM refuses one longer than
//     max_model_len, or, with Config.ClipOversize, runs with only the
//     leading blocks that fit.
//   - Cancellation (Cancel): a waiting request leaves the queue; a
//     prefilling one stops and the blocks it stored but never computed are
//     dropped; a decoding one stops. Its pins and reservation are
//     released.
//
// # Stepping
//
// Submit and Cancel act at the time given; Advance(t) carries out every
// scheduled step due by t in time order; Next is the time of the next
// one. A request's fate depends only on the requests before it in the
// queue (first come, first served), so a caller that only submits, in
// arrival order, may advance past a later arrival's time before
// submitting it (the bench does, to learn a request's TTFT at its
// arrival): the later request joins the queue at its own arrival and
// cannot have started earlier, since the queue before it was not empty
// until the model's time. A Gate that passes requests over breaks that
// order; its callers step in real time.
package engine
