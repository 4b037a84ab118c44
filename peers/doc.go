// Package peers holds the routing formulas of the routers this project is
// measured against, each written from its project's public source (no
// code taken), so that the simulated benchmark (package bench) and the
// live gateway core (package gateway, the proxy's --strategy dynamo,
// llm-d and sglang) run one implementation of each:
//
//   - Dynamo: NVIDIA Dynamo's KV router (DynamoSlots, DynamoLogit,
//     DynamoSelect). Sources: ai-dynamo/dynamo
//     lib/llm/src/kv_router/scheduler.rs at commit db19bd2a659d4cb04998fb4101cd0dbfbbeba9d4
//     (DefaultWorkerSelector: logit = overlap_score_weight ×
//     potential_prefill_tokens / block_size + potential_decode_blocks;
//     softmax_sample; the tree-size tie-break),
//     lib/llm/src/kv_router/sequence.rs at commit 581ee33e434f3f99b84f6ea99fcf0a3fda26a685
//     (ActiveSequences: add_request, mark_prefill_completed, free,
//     potential_blocks_and_tokens, new_blocks, new_tokens) and the
//     defaults of KvRouterConfig (overlap_score_weight 1.0,
//     router_temperature 0.0, router_track_active_blocks true,
//     router_track_output_blocks false, router_replica_sync false).
//   - llm-d: the Endpoint Picker of the Gateway API Inference Extension
//     that llm-d deploys, with the scorers and weights of its default
//     configuration (LLMDScores, RoutedBlocks as its approximate prefix
//     index). Sources: kubernetes-sigs/gateway-api-inference-extension
//     config/charts/inferencepool/templates/epp-config.yaml at commit
//     139eec852f4ab19fb9f246ee9abbdcca3d655d79 (default-plugins.yaml:
//     queue-scorer weight 2, kv-cache-utilization-scorer weight 2,
//     prefix-cache-scorer weight 3), the prefix plugin
//     (pkg/epp/scheduling/framework/plugins/multi/prefix/plugin.go:
//     Score = matched blocks / the request's blocks, 0 without blocks;
//     PreRequest records the request's blocks for the picked endpoint;
//     the same score at commit 4bc4889d121683cc5facdb43d619d5627df2d3d6,
//     whose later versions set DefaultBlockSizeTokens 16,
//     DefaultMaxPrefixBlocks 256 and DefaultLRUCapacityPerServer 31250,
//     the capacity taken from the engine's reported GPU blocks when
//     AutoTune finds them), the queue scorer ((max − q) / (max − min), 1
//     when all are equal) and the KV-cache utilization scorer (1 −
//     usage); the max-score picker breaks ties at random.
//   - SGLang: the SGLang model gateway's cache_aware policy
//     (SGLangPick, RoutedBlocks as its approximate tree). Sources:
//     sgl-project/sglang sgl-router/src/policies/cache_aware.rs at commit
//     026f853ba7ae08a457a2e127b85a26256a29e300 (imbalanced when max −
//     min > balance_abs_threshold and max > min × balance_rel_threshold:
//     the least loaded; else the highest prefix match when its rate is
//     above cache_threshold, else the worker with the smallest tree) and
//     sgl-router/py_src/sglang_router/router_args.py at commit
//     e46dcd87adca58ec70831ad7cb01a3892b2c9e50 (the command line's
//     defaults: cache_threshold 0.3, balance_abs_threshold 64,
//     balance_rel_threshold 1.5, max_tree_size 2^26).
//
// Where a router needs what this project's gateway does not have in the
// same form, the difference is stated on the function: SGLang and the
// llm-d prefix index match characters of the request text, here blocks
// of the prompt's tokens; SGLang prunes its tree every 120 s, here a
// per-replica LRU evicts at insert. Each formula is pure: no clock, no
// I/O; state types are not safe for concurrent use (their callers lock).
// docs/proxy.md ("Peer strategies") and EVALUATION.md describe their use.
package peers
