// Package simengine is a simulated vLLM replica in real time
// (`inference-cache sim-engine`): it serves vLLM's OpenAI-compatible API
// (package openai's shapes), runs the engine model the benchmark's
// engines run (package engine: prefill queue, continuous-batching decode,
// KV capacity with LRU eviction, vLLM's block rules) stepped by its
// clock, publishes vLLM-format KV events over ZMQ (internal/vllmpub) and
// exports vLLM's /metrics names, so a gateway, the observe subscriber or
// the proxy work against it unchanged and against a real vLLM after it.
//
// # Time model
//
// Package engine's, on the clock (Config.Clock) instead of a trace's
// virtual time: one timer stands at the model's next step (a prefill's
// end, a decode step), and each request and cancellation steps the
// model at the clock's time. Beside the model:
//
//   - A request needing more than KVBlocks blocks in all is refused with
//     vLLM's context-length error (max_model_len = KVBlocks × BlockSize).
//   - Generated text is max_tokens filler tokens (" tok"); max_tokens
//     defaults to 16 (vLLM's completions default; its chat default, the
//     rest of the context, would make every chat request fill the cache).
//     finish_reason is "length".
//   - Cancellation: when the client goes away (the request's context
//     ends) the model stops the request where it is (engine.Model.Cancel:
//     the blocks a prefill stored but had not computed are dropped, never
//     announced) and simengine_requests_cancelled_total counts it by
//     stage.
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
