// Package bench is the benchmark gateway (`inference-cache bench`, contract
// §12): it replays a request trace through a simulated fleet of inference
// engines, routes each request with one strategy after another, and
// measures what the routing did to the prefix-cache hit rate and to the
// modelled time to first token, against the peers' routers, a greedy
// oracle and the trace's ideal bound.
//
// The parts, in the order data flows:
//
//	trace.go      Mooncake JSONL loader, ideal bound, distinct blocks
//	generator.go  the built-in deterministic trace generator (chat sessions,
//	              Zipf-shared system prompts, diffuse single-turn traffic)
//	tokens.go     token ids synthesised from hash ids (512 per block)
//	cache.go      an engine's KV cache (engine.Cache, the engine model's):
//	              C blocks, LRU, shared with the running requests (pinned
//	              blocks, reserved output blocks)
//	engine.go     one simulated engine: the engine model (package engine,
//	              the one sim-engine runs) on the virtual clock, its KV
//	              events queued until their publication time, its /metrics
//	              (vLLM names) as of the last scrape tick
//	publish.go    an engine's admissions as vLLM KV-event batches on its
//	              internal/vllmpub publisher (ZMQ PUB with sequence
//	              numbers, ROUTER replay socket, positional or map msgpack)
//	observe.go    the observation path for a run: the real observe
//	              Subscriber feeding the cluster, plus the visibility
//	              barrier (see below)
//	strategy.go   the strategies without a model of their own: round-robin,
//	              random, least-loaded, consistent-hash, the hint routers,
//	              longest-match and the oracle; the gateway split
//	peers.go      the peers' routers from their public defaults: dynamo
//	              (and dynamo-sync), llm-d, sglang; the perfect KV-event
//	              indexer they read
//	gatewaycore.go lookuproute-sdk(-local), picker-indexer: the real
//	              gateway core per gateway on the virtual clock
//	sharedstate.go the cluster's shared soft state (load, provisional
//	              picks, turns) on the virtual clock, fed by each
//	              gateway's two senders, one call in flight each
//	sharedelay.go the share delay: fixed, or drawn per push from the
//	              live system's measured delays
//	dynamosync.go dynamo-sync(-nats): Dynamo's replica sync with its delay
//	indexerhints.go picker-indexer's hints from the perfect indexer
//	run.go        one run: every strategy on the same trace and fleet
//	              settings, each on a fresh fleet and a reset index
//	report.go     the table and the --json shape of contract §12.7
//	plot.go       --plot with gonum.org/v1/plot
//	demo.go       the demo fleet of `inference-cache dev` (make run)
//	localcluster/ the embedded 3-node cluster used without --addr
//
// The engines are simulated, the rest is real: the hint strategies call a
// real cluster through the client SDK, and the cluster learns what the
// engines cache only from the engines' KV events, published over ZMQ in
// vLLM's wire format and consumed by the observe subscriber, and what they
// carry from the subscriber's scrapes of their /metrics, exactly as in
// production.
//
// # Time model
//
// The fleet runs in the trace's virtual time. Each engine is package
// engine's model, the one the real-time sim engine runs, with blocks of
// 512 tokens: one prefill at a time, first come first served; a request's
// TTFT is its queue wait plus its uncached tokens / prefill speed
// (modelled, never measured). Its cached tokens are the leading run of
// its full blocks in the engine's cache when its prefill starts, its last
// block recomputed when the whole prompt is cached (vLLM always computes
// the last prompt token); since prefills are FIFO, every earlier
// request's blocks are there by then. Decode runs alongside (continuous
// batching), a token every 1/DecodeTPS after the first, and keeps the
// request's blocks pinned and its partial last block and output blocks
// reserved: a loaded engine has less room for cached prefixes, and a
// request that does not fit beside the running ones waits for room. A
// request longer than the whole cache runs with the leading blocks that
// fit (the cache size is a scaled-down knob, not an engine's memory).
// Serve steps the model until the request's prefill starts, so each
// request's TTFT is known at its arrival, for the strategies that track
// it.
//
// With the default time model (VisibilityDelay) an engine publishes a
// request's KV events (stored blocks, evictions) when its prefill ends,
// and a lookup at virtual time t sees exactly the events published before
// t − d (--event-delay, default 50 ms), applied on every node: before the
// lookup the bench publishes the events whose time has come and, when one
// of them touched the prompt's blocks (or a replica joined), waits until
// the cluster acknowledged them and every node applied them. The index's
// answer for a chain depends only on its blocks' entries and the serving
// set (contract §5.4), so skipping the wait otherwise changes no answer. The
// peer that reads KV events (dynamo) reads a perfect indexer with the
// same rule; llm-d's default prefix scorer and sglang read none, only
// what they routed. VisibilityTimestamp and VisibilityRequest are the older
// models: events published at arrival, visible to later timestamps or to
// every later request.
//
// Engine metrics change at scrape ticks of virtual time (--scrape-interval,
// default 50 ms, llm-d's default refresh): llm-d reads them there; for
// lookuproute-sdk the cluster's subscriber scrapes the engines that changed
// at each tick before the next lookup (whatever the number of gateways), so
// the picker reads them as fresh as llm-d does; for the other hint
// strategies it scrapes every --subscriber-scrape of wall time, so what the
// cluster reports of them lags by the replay's compression.
//
// # Gateways
//
// --gateways N splits the requests round robin over N gateway instances of
// the strategy, each with its own state: round-robin counters, the hint
// routers' fallbacks, dynamo's and sglang's tracked load, and for
// lookuproute-sdk a whole gateway core (package gateway) with its picker
// and its own provisional table. lookuproute-sdk's gateways share the
// cluster's soft state (sharedstate.go): the real pickerload and
// provisional stores on the virtual clock, fed by each gateway's pushes
// on every change (a pick, a first token, an end) and its full state every
// ReportInterval, each push visible ShareDelay later; each lookup then
// carries the others' load in ReplicaLoad.others_* and the picks as
// provisional PREFIX_MATCH hints (provisional.Merge, the nodes' rule).
// A pick's push carries the gateway's load report, and each lookup takes
// a turn at the node (the real turns.Table, contract §5.13), waiting at
// most TurnWait for the other gateways' turns, which their picks' pushes
// settle (turnwait.go): a lookup that waits joins the table's waiters as
// a node's does (turns.Waiter), the replay goes on with later arrivals,
// and after each event of the shared state the waiters try again in the
// order they came; a request is decided, and reaches its engine, when its
// wait ends, and the wait is part of its TTFT. ShareDelay 0 draws each
// push's delay from MeasuredShareDelay (sharedelay.go), a gateway's
// pushes arriving in the order it sent them. lookuproute-sdk-local does
// without the shared state. dynamo-sync's
// instances pass their routing events to each other (dynamosync.go) at
// zero delay, dynamo-sync-nats's after DynamoSyncDelay (a NATS hop).
// Every sync reaches later virtual instants only, so requests of one
// instant are concurrent for every strategy: none sees another gateway's
// request of the same instant. least-loaded, longest-match and the oracle
// read the fleet itself and are one instance for every gateway. One
// cluster serves them all.
//
// # Strategies and the cluster
//
// The three hint strategies run one after the other against the same
// cluster; before each, the CachePolicy is set with SetCachePolicy (v1:
// rankingVersion v1 with the TENANT_HOT and AFFINITY_HINT fallbacks off;
// v2 and sdk: the default policy; all with blockSize 512 for the bench
// model), and the cluster's original policy is restored at the end. Every
// run gets a fresh fleet and a fresh subscriber, and the fleet's replicas
// are cleared in the cluster (a CLEARED event each, applied on every node)
// before its first lookup: the engines restarted, and no run sees an
// earlier run's blocks. The subscriber would clear each replica only at
// its engine's first batch. lookuproute-v1 and -v2 route to the first
// replica of any hint and round-robin on NO_HINT; lookuproute-sdk asks for
// every replica's hint and lets client.Picker choose.
package bench
