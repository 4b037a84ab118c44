// Package bench is the benchmark gateway of issue 7 (`inference-cache
// bench`): it replays a request trace through a simulated fleet of
// inference engines, asks the cluster for routing hints, routes, and
// measures how much prefill the hints saved compared with other routing
// strategies and with the trace's ideal bound.
//
// The parts, in the order data flows:
//
//	trace.go      Mooncake JSONL loader, ideal bound, distinct blocks
//	generator.go  the built-in deterministic trace generator (chat sessions,
//	              Zipf-shared system prompts, diffuse single-turn traffic)
//	tokens.go     token ids synthesised from hash ids (512 per block)
//	cache.go      an engine's KV cache: C blocks, LRU
//	engine.go     one simulated engine: cache, queue, modelled TTFT,
//	              counters; its /metrics (vLLM names)
//	publish.go    the engine's vLLM-format KV-event publisher (ZMQ PUB with
//	              sequence numbers, ROUTER replay socket, positional or
//	              map msgpack)
//	observe.go    the observation path for a run: the real observe
//	              Subscriber feeding the cluster, plus the visibility
//	              barrier (see below)
//	strategy.go   the seven routing strategies
//	run.go        one run: every strategy on the same trace and fleet
//	              settings, each on a fresh fleet and a reset index
//	report.go     the table and the --json shape of SPEC 12
//	plot.go       --plot with gonum.org/v1/plot
//	demo.go       the demo fleet of `inference-cache dev` (make run)
//	localcluster/ the embedded 3-node cluster used without --addr
//
// The engines are simulated, the rest is real: the hint strategies call a
// real cluster through the client SDK, and the cluster learns what the
// engines cache only from the engines' KV events, published over ZMQ in
// vLLM's wire format and consumed by the observe subscriber, exactly as in
// production.
//
// # Time
//
// The fleet model runs in the trace's virtual time (queues, modelled
// TTFT); the calls to the cluster run as fast as the cluster allows, in
// trace order; KV events are stamped with wall-clock time at publication so
// freshness and TTL stay meaningful. The report states the compression
// (virtual span / wall time of each strategy's replay).
//
// # Visibility of KV events
//
// Events reach the cluster asynchronously (engine → ZMQ → subscriber →
// Raft). With VisibilityTimestamp (the default) the gateway, before it asks
// for the hint of a request whose trace timestamp is later than the
// previous request's, waits until the events of every earlier request are
// acknowledged by the cluster and applied on every node. Requests with the
// same timestamp are concurrent arrivals and never see each other's
// events: the engines hold their events and publish them at the next wait,
// so the outcome does not depend on how fast the observation path
// happened to be. In a real fleet requests a trace tick apart are seconds
// apart and the observation path takes milliseconds, so this is the
// realistic lag; VisibilityRequest waits before every request instead.
//
// # Strategies and the cluster
//
// round-robin, random (seeded), least-loaded (fewest requests in flight,
// then the shorter prefill backlog), consistent-hash (rendezvous hashing
// of the first block's hash id), oracle (every engine's true cache: the
// longest cached leading run, ties by load), lookuproute-v1 and
// lookuproute-v2. The two hint strategies run one after the other against
// the same cluster; before each, the CachePolicy is set with
// SetCachePolicy (v1: rankingVersion v1 with the TENANT_HOT and
// AFFINITY_HINT fallbacks off; v2: the default policy, ranking v2 with
// both fallbacks; both with blockSize 512 for the bench model), and the
// cluster's original policy is restored at the end. The index is reset
// between them through the observation path itself: every hint strategy
// gets a fresh fleet and a fresh subscriber, which clears its replicas
// when it starts. The gateway routes to the first replica of any hint and
// round-robins on NO_HINT.
//
// # TTFT model
//
// TTFT is modelled, not measured: queue wait + uncached prompt tokens /
// prefill speed, each engine prefilling one request at a time (decode runs
// alongside, continuous batching). Everything that reports it labels it
// "modelled".
package bench
