// Package epp is an Endpoint Picker (EPP) for the Gateway API Inference
// Extension: an Envoy external processor (envoy.service.ext_proc.v3) that
// picks, for each inference request an Envoy-based gateway (Envoy
// Gateway, kgateway, Istio, GKE) routes to an InferencePool, the model
// server endpoint that holds the request's prompt prefix, over the gateway
// core (package gateway) and the replicated prefix index (contract §14).
//
// It follows the Endpoint Picker Protocol of
// kubernetes-sigs/gateway-api-inference-extension v1.6.0
// (docs/proposals/004-endpoint-picker-protocol) and answers as its
// reference picker does (pkg/lwepp/handlers):
//
//   - in: the request headers (:path says completions or chat), the
//     subset hint (filter metadata envoy.lb.subset_hint /
//     x-gateway-destination-endpoint-subset), the body (FULL_DUPLEX_STREAMED
//     or BUFFERED, see BodyMode);
//   - out, after the body's end of stream: the header
//     x-gateway-destination-endpoint and the dynamic metadata envoy.lb /
//     x-gateway-destination-endpoint, the same value: the pick's ip:port,
//     then its fallbacks, comma separated, best first; clear_route_cache;
//   - an ImmediateResponse 503 when the subset is empty or no endpoint is
//     eligible (in the subset, serving the request's model), 413 for a body
//     over the limit;
//   - the response phase: the served endpoint
//     (x-gateway-destination-endpoint-served in metadata_context) gets the
//     request's load, the first generated token is spotted in the
//     response body (openai.FirstTokenSpotter), and the end of the body,
//     its trailers or the stream's end end the request; the response gets
//     x-inference-cache-replica, -reason and -matched-tokens.
//
// The pick is the gateway core's: render and tokenize the prompt exactly
// as the engine will, fingerprint it, look it up within the budget, pick
// with the cost model. The cluster unreachable or slow never fails a
// request nor delays it beyond the lookup budget (the pick is then by
// load). There is no leader: every picker replica is ready and serving,
// each reading the replicated index from any cluster node.
//
// Endpoints come from a Table, set by a static list (ParseEndpointFlag,
// LoadEndpoints) or by an InferencePool watch. An endpoint's replica id
// must be the replica_id the subscriber reports for that engine.
package epp
