// Package gateway is the routing core shared by the OpenAI proxy
// (package proxy) and any other front end (an Endpoint Picker): from one
// decoded OpenAI request and the replicas that may serve it, it decides
// where the request goes, and it records what happens to it so that the
// next decisions see the load. It has no HTTP in it and no backend list:
// the caller passes the candidates of each request (the healthy backends
// serving the model, or a subset a gateway was asked to respect), so a
// thin layer can put any transport in front.
//
// One decision (Gateway.Decide):
//
//  1. The prompt: the token ids the engine will prefill (package prompt:
//     the chat template rendered and tokenized exactly as vLLM does). A
//     request without a key (multimodal content, a template that raises,
//     no tokenizer for the model) is still routed, by load; the reason is
//     kept in Decision.NoKey. A completion whose prompt is token ids needs
//     no model files: its ids are the prefill, as given (vLLM adds no
//     special token to them), so it is keyed without Config.Prompts.
//  2. The key: the content fingerprint (contract §3) of those ids at the
//     model's block size (Config.BlockSizes, default 16 as vLLM), in the
//     hash domain of the request's cache_salt.
//  3. The hint: LookupRoute with include_load, bounded by the lookup
//     budget (Config.LookupBudget, default 50 ms). The hint service never
//     fails a request and never delays one beyond the budget: an answer
//     that does not come from a server in time (the SDK's own NO_HINT, an
//     error, a timeout) is a fail-open decision (Decision.FailOpen) made
//     without a hint.
//  4. The pick, by Config.Strategy:
//     - "picker" (the default): client.Picker's cost model over the
//     candidates (queued prefill, other gateways' queues, uncached
//     prefill, a credit for cached tokens), its ties and softmax draw
//     made by the prompt's rendezvous key (client.RendezvousKey), so that
//     every gateway seeing the same state picks the same replica for the
//     same prefix. A request without a key (no full block) that no hint
//     names is picked by load: the lowest cost (the queued work this
//     gateway sent), then the fewest requests in flight, ties taken
//     round robin;
//     - "round-robin" and "least-loaded" (the fewest requests this gateway
//     has in flight, ties round robin): the baselines of the live
//     benchmark, which skip steps 1 to 3;
//     - "dynamo", "llm-d" and "sglang": the peers' routers with their
//     defaults (package peers holds the formulas, shared with the
//     benchmark), each over the state one instance of that router keeps:
//     Dynamo's cost of potential prefill and decode blocks over the
//     hint's matched blocks and the requests this gateway has active;
//     llm-d's Endpoint Picker score of the prefix this gateway routed
//     there, the engine's waiting queue and KV usage (the lookup's
//     loads); SGLang's cache_aware policy over this gateway's requests
//     in flight and routed prompts (no lookup).
//  5. The decision: the replica, the other candidates as ordered
//     fallbacks (best first, for a retry), the reason (the reason code of
//     the hint naming the pick: PREFIX_MATCH, AFFINITY_HINT, TENANT_HOT;
//     LOAD when the pick had no usable hint; ROUND_ROBIN, LEAST_LOADED,
//     DYNAMO, LLM_D or SGLANG for those strategies; their matched tokens
//     are what that router believed cached), the matched tokens and the picker's cost
//     terms.
//
// An adapter's request (Request.Base and Request.Adapter) is keyed on the
// base model's prompt and looked up in its partition under the adapter
// id; the pick charges the adapter's residency (adapters.go).
//
// The caller then reports the request's life on the replica it really
// sent it to (Decision.Start, then Flight.FirstToken and Flight.Done),
// which is the load the picker and least-loaded count.
//
// The lookup and the prompt source are consumer-side interfaces (Lookup,
// Prompts): *client.Client and *prompt.Registry satisfy them, and unit
// tests pass fakes, so no test of this package needs a cluster.
package gateway
