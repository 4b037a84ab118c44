// Package proxy is `inference-cache proxy`: an OpenAI-compatible reverse
// proxy that routes each request to the engine replica package gateway
// picks for it, so that a vLLM or SGLang fleet is routed by the prefix
// index without a line of Go in the client.
//
// # Requests
//
// POST /v1/completions and /v1/chat/completions: the body (at most
// Options.MaxBodyBytes, else 413) is decoded as vLLM decodes it (package
// openai: malformed JSON, a missing model and any other refused field
// give 400 naming the field); a model no backend serves gives 404, a
// model whose backends are all unhealthy 503. Nothing of such a request
// reaches a backend. The others are decided by the gateway among the
// healthy backends serving the model and forwarded with the client's
// headers, body byte for byte. The answer is relayed as it arrives: a
// stream (text/event-stream) is flushed to the client piece by piece,
// and is read only until its first generated token (the first content
// chunk) to tell the gateway the prefill is over; nothing of it is
// decoded after that.
//
// Every completion response carries X-Inference-Cache-Replica,
// X-Inference-Cache-Reason and X-Inference-Cache-Matched-Tokens (the
// proxy's own error answers with an empty replica and reason NONE).
//
// The client's cancellation reaches the backend: the forwarded request
// lives in the client request's context, so the backend's connection is
// closed when the client goes away. Options.RequestTimeout bounds the
// whole request. A backend that refuses the connection (or any dial
// failure: nothing reached it) or answers 503 before its body is replaced
// once by the decision's next-best fallback (X-Inference-Cache-Retried-From
// names the first); a refusing backend also leaves the candidates at once.
//
// GET /v1/models is the union of the backends' model lists; GET /health
// answers 200 while a backend is healthy (503 otherwise) with each
// backend's state; GET /metrics is the registry of Metrics.
//
// # Backends
//
// A Pool holds the backends (replica id, URL, optional model; from
// --backend flags or a YAML file reloaded on SIGHUP) and checks each one
// every PoolOptions.HealthInterval with GET /health, reading its
// /v1/models when it comes up and now and then after. A backend that
// fails its check leaves the candidates until a check passes again.
//
// # LoRA adapters and disaggregated prefill/decode
//
// A model a backend's /v1/models lists with a parent is a LoRA adapter of
// that base model: its requests are decided on the base model's key and
// partition under the adapter's id, among the backends listing it, with
// their residency from vllm:lora_requests_info (adapters.go). Backends
// with role prefill make their models' requests go the disaggregated way
// of vLLM's NixlConnector proxy: a prefill half, then the decode half
// with the prefill's kv_transfer_params, falling back to the decode
// backend alone (disagg.go).
package proxy
