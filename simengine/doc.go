// Package simengine is a simulated vLLM replica in real time
// (`inference-cache sim-engine`): it serves vLLM's OpenAI-compatible API
// (package openai's shapes), keeps a KV cache on the benchmark's engine
// model (internal/kvcache, the cache bench's engines use), publishes
// vLLM-format KV events over ZMQ (internal/vllmpub) and exports vLLM's
// /metrics names, so a gateway, the observe subscriber or the proxy work
// against it unchanged and against a real vLLM after it.
//
// # Time model
//
// The bench's engine model (bench/doc.go), run on a clock instead of a
// trace's virtual time:
//
//   - Prefill: one request at a time, first come first served, the whole
//     prompt in one step (no chunked prefill). It takes uncached prompt
//     tokens / PrefillTPS. The cached tokens are the leading run of the
//     prompt's full blocks found in the cache when the prefill starts,
//     capped as vLLM caps them (the last prompt token is always
//     computed, so a fully cached prompt recomputes its last block); since
//     prefills run in order, every earlier request's blocks are there.
//   - The first output token comes out of the prefill (TTFT = queue wait +
//     prefill); each later one 1/DecodeTPS after the previous, for every
//     running request at once (continuous batching: decoding requests do
//     not slow each other or the prefills down).
//   - KV capacity: KVBlocks blocks of BlockSize tokens, shared. A request
//     pins its prompt's full blocks from its prefill's start to its end and
//     reserves ceil((partial last block + max_tokens) / BlockSize) blocks
//     for its tail and output; cached blocks nobody pins are evicted least
//     recently used first (vLLM's recency: a prefix is evicted from its
//     end). When the head of the queue does not fit beside the running
//     requests it waits, and the queue behind it (vLLM's FCFS scheduler).
//     A request needing more than KVBlocks blocks in all is refused with
//     vLLM's context-length error (max_model_len = KVBlocks × BlockSize).
//   - Generated text is max_tokens filler tokens (" tok"); max_tokens
//     defaults to 16 (vLLM's completions default; its chat default, the
//     rest of the context, would make every chat request fill the cache).
//     finish_reason is "length".
//   - Cancellation: when the client goes away (the request's context
//     ends) the request stops where it is: out of the queue, or its
//     prefill aborted (the blocks it stored but had not computed are
//     dropped, never announced), or its decode stopped; its pins and
//     reservation are released and simengine_requests_cancelled_total
//     counts it by stage.
//
// # KV events
//
// As vLLM publishes them (vllm/distributed/kv_events.py; one batch per
// engine step): a batch with BlockRemoved when a prefill's admission
// evicts blocks (at its start, when they leave the cache), and a batch
// with one BlockStored per run of newly stored blocks when the prefill
// ends, each with its parent block's hash (none for a run at the prompt's
// start), exactly the token ids prefilled, block_size and medium GPU; a
// salted request's first block carries its cache_salt in extra_keys.
// Block hashes are the engine's own chained SHA-256 truncated to 64 bits
// (blocks.go). Output tokens are never cached (vLLM caches the full
// blocks of generated tokens too; the sim's filler would never match a
// later prompt rendered from real text anyway).
//
// # Metrics
//
// vLLM V1's names and labels (model_name, engine="0";
// vllm/v1/metrics/loggers.py): vllm:num_requests_running and
// vllm:num_requests_waiting, vllm:kv_cache_usage_perc (blocks the running
// requests hold over the capacity), vllm:prefix_cache_queries_total and
// vllm:prefix_cache_hits_total (tokens), vllm:prompt_tokens_total,
// vllm:generation_tokens_total, vllm:request_success_total, the
// histograms vllm:time_to_first_token_seconds,
// vllm:time_per_output_token_seconds, vllm:e2e_request_latency_seconds,
// vllm:request_queue_time_seconds, vllm:request_prefill_time_seconds,
// vllm:request_decode_time_seconds, and vllm:cache_config_info; plus
// simengine_requests_cancelled_total and
// simengine_kv_event_publish_errors_total.
//
// # LoRA adapters and disaggregated prefill/decode
//
// Config.LoRA serves adapters as vLLM's --enable-lora does (lora.go: a
// batch of at most MaxLoRAs adapters, an adapter load time, the
// adapter's blocks hashed apart and announced with lora_id and
// lora_name, vllm:lora_requests_info). Config.Disagg plays either part
// of vLLM's NixlConnector disaggregated serving (disagg.go: a prefill
// answers kv_transfer_params, a decode pulls its uncached blocks at a
// transfer time each instead of prefilling them).
package simengine
