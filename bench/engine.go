package bench

import (
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/inference-cache/inference-cache/engine"
)

// FleetConfig describes the simulated fleet; the same settings are used
// for every strategy of a run.
type FleetConfig struct {
	// Engines is the number of engines (N).
	Engines int
	// CacheBlocks is each engine's KV cache size in 512-token blocks (C).
	CacheBlocks int
	// PrefillTPS is an engine's prefill speed in prompt tokens per second
	// (0 = engine.DefaultPrefillTPS).
	PrefillTPS float64
	// DecodeTPS is the decode speed of one request in output tokens per
	// second (0 = engine.DefaultDecodeTPS); decoding runs alongside
	// prefills (continuous batching) and only keeps the request in flight.
	DecodeTPS float64
	// EventsAtArrival publishes a request's KV events at its arrival
	// instead of its prefill's end (the timestamp and request time
	// models).
	EventsAtArrival bool
}

func (c *FleetConfig) fill() error {
	if c.Engines < 1 {
		return fmt.Errorf("bench: %d engines: need at least 1", c.Engines)
	}
	mc := c.model()
	if err := mc.Fill(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	c.PrefillTPS, c.DecodeTPS = mc.PrefillTPS, mc.DecodeTPS
	return nil
}

// model is an engine's model configuration: blocks of TraceBlockTokens,
// and a request longer than the cache run with the blocks that fit (the
// cache size is a scaled-down knob, not a real engine's memory, so
// nothing is refused).
func (c *FleetConfig) model() engine.Config {
	return engine.Config{BlockSize: TraceBlockTokens, KVBlocks: c.CacheBlocks, PrefillTPS: c.PrefillTPS, DecodeTPS: c.DecodeTPS,
		ClipOversize: true}
}

// inflight is a request admitted to an engine and not finished.
type inflight struct {
	start   float64  // prefill start (virtual s); its last token is its due time
	blocks  []uint64 // its pinned prompt run
	reserve int      // its reserved blocks (partial last block and output)
}

// Served is the outcome of one request on one engine.
type Served struct {
	// CachedTokens is the prompt prefix found in the engine's cache when
	// its prefill started (a whole number of 512-token blocks, the last
	// prompt token never among them).
	CachedTokens int
	// WaitS is the modelled queue wait (virtual seconds).
	WaitS float64
	// TTFTS is the modelled time to first token: WaitS + uncached tokens /
	// prefill speed (virtual seconds).
	TTFTS float64
	// FirstTokenAt and DoneAt are the virtual times of the first and the
	// last token (what a gateway sees of the request's progress).
	FirstTokenAt, DoneAt float64
	// LookupWaitS is the router's wait for its turn at the node (contract
	// §5.13; virtual seconds), set by the router and added to the TTFT.
	// The engine model takes the request at its arrival: the wait, a few
	// ms, is small beside the prefills it would shift.
	LookupWaitS float64
}

// KVEvent is one request's KV-cache events as its engine publishes them:
// the blocks it stored and the blocks their admission evicted, at virtual
// time At (its prefill's end in the delay time model).
type KVEvent struct {
	// At is the virtual publication time (seconds).
	At float64
	// Blocks are the request's admitted blocks (Adm.Stored indexes them).
	Blocks []uint64
	// Adm is what the admission changed.
	Adm Admission
}

// Touches calls fn with every block hash the event stores or evicts.
func (ev *KVEvent) Touches(fn func(h uint64)) {
	for _, r := range ev.Adm.Stored {
		for _, h := range ev.Blocks[r.Start:r.End] {
			fn(h)
		}
	}
	for _, h := range ev.Adm.Evicted {
		fn(h)
	}
}

// MetricsSnapshot is what an engine's /metrics reports: its state at the
// last scrape tick.
type MetricsSnapshot struct {
	// At is the virtual time the snapshot describes (seconds).
	At float64
	// Waiting and Running are the requests queued for prefill and those in
	// the running batch (prefilling or decoding).
	Waiting, Running int
	// KVUsage is the share of the KV cache the running requests hold (0..1).
	KVUsage float64
	// QueryTokens and HitTokens are the prefix cache's cumulative counters.
	QueryTokens, HitTokens int64
}

// Engine is one simulated inference engine: the engine model (package
// engine) on the trace's virtual clock. Serve submits a request and
// steps the model until its prefill starts, so its TTFT is known at its
// arrival (exact: the model is first come, first served); what the
// engine looked like at an earlier virtual time (Load, Scrape) is kept
// from the requests' schedules. Serve runs on one goroutine; the metrics
// snapshot read by the /metrics handler is guarded.
type Engine struct {
	// ID is the engine's position in the fleet.
	ID int
	// Cache is the engine's KV cache once every request admitted so far
	// has started its prefill (read by longest-match and the oracle).
	Cache *Cache

	cfg      FleetConfig
	m        *engine.Model
	started  engine.Event  // the latest Started event, slices cloned
	inflight due[inflight] // by last token; retired at arrival times
	events   []KVEvent     // not yet released, in At order
	next     engine.ID

	usedBlocks                       map[uint64]struct{}
	requests, queryTokens, hitTokens int64

	mu   sync.Mutex
	snap MetricsSnapshot
}

// NewEngine returns engine id of a fleet with cfg (filled).
func NewEngine(id int, cfg FleetConfig) *Engine {
	e := &Engine{ID: id, cfg: cfg, usedBlocks: map[uint64]struct{}{}}
	mc := cfg.model()
	mc.KVBlocks = max(1, mc.KVBlocks)
	m, err := engine.New(mc, e.onEvent)
	if err != nil {
		panic(err) // the speeds are filled or 0 (the defaults)
	}
	e.m, e.Cache = m, m.Cache()
	return e
}

// onEvent keeps the latest request's start (the model's slices are
// reused after the call).
func (e *Engine) onEvent(ev *engine.Event) {
	if ev.Kind != engine.Started {
		return
	}
	e.started = *ev
	e.started.Stored = slices.Clone(ev.Stored)
	e.started.Evicted = slices.Clone(ev.Evicted)
}

// advance retires the requests finished by virtual time t.
func (e *Engine) advance(t float64) {
	e.inflight.until(t, func(inflight) {})
}

// Load is the number of requests admitted to the engine and not finished
// at virtual time t (waiting, prefilling or decoding): the least-loaded
// strategy's measure. Calls must not go back in time.
func (e *Engine) Load(t float64) int {
	e.advance(t)
	return e.inflight.len()
}

// PrefillBacklog is how long a prefill arriving at t would wait for the
// prefills admitted before it (virtual seconds; a wait for KV room
// comes on top).
func (e *Engine) PrefillBacklog(t float64) float64 { return max(0, e.m.PrefillFreeAt()-t) }

// PrefillTPS is the engine's prefill speed (tokens per second).
func (e *Engine) PrefillTPS() float64 { return e.m.Config().PrefillTPS }

// PredictTTFT is the modelled TTFT of request r arriving at t on this
// engine, what Serve would return unless r waits for KV room: the
// oracle's measure.
func (e *Engine) PredictTTFT(r *Request, t float64) float64 {
	mr := modelRequest(r)
	_, first := e.m.Predict(&mr, t)
	return first - t
}

// modelRequest is r for the engine model; an empty prompt (a trace may
// hold one) is served as one token, as an engine has at least one to
// compute.
func modelRequest(r *Request) engine.Request {
	return engine.Request{Blocks: r.Blocks(), PromptTokens: max(1, r.InputLength), OutputTokens: r.OutputLength}
}

// Serve admits request r arriving at virtual time t (seconds; not before
// the previous call's) and steps the engine model until its prefill
// starts: when the earlier prefills are done and its blocks fit beside
// the running requests'. The cached tokens are the leading run of its
// full blocks present in the cache then, the last token always computed
// (engine.CachedTokens). Its KV event is queued for publication at its
// prefill's end (at t with FleetConfig.EventsAtArrival).
func (e *Engine) Serve(r *Request, t float64) Served {
	e.advance(t)
	e.next++
	id := e.next
	if err := e.m.Submit(id, modelRequest(r), t); err != nil {
		panic(fmt.Sprintf("bench: engine %d: %v", e.ID, err)) // a trace request is valid and nothing is refused
	}
	for e.started.ID != id {
		at, ok := e.m.Next()
		if !ok {
			panic(fmt.Sprintf("bench: engine %d: request %d neither started nor waiting on a running one", e.ID, id))
		}
		e.m.Advance(at)
	}
	s := &e.started
	e.inflight.push(s.DoneAt, inflight{start: s.At, blocks: s.Blocks, reserve: s.Reserve})
	at := s.FirstTokenAt
	if e.cfg.EventsAtArrival {
		at = t
	}
	if len(s.Stored) > 0 || len(s.Evicted) > 0 {
		e.events = append(e.events, KVEvent{At: at, Blocks: s.Blocks, Adm: Admission{Evicted: s.Evicted, Stored: s.Stored}})
	}
	e.requests++
	e.queryTokens += int64(r.InputLength)
	e.hitTokens += int64(s.CachedTokens)
	return Served{CachedTokens: s.CachedTokens, WaitS: s.At - t, TTFTS: s.FirstTokenAt - t, FirstTokenAt: s.FirstTokenAt, DoneAt: s.DoneAt}
}

// Release passes every queued KV event for which visible(At) holds to fn,
// oldest first, and drops it; it stops at the first event that is not
// visible (events are queued in At order).
func (e *Engine) Release(visible func(at float64) bool, fn func(ev *KVEvent)) {
	n := 0
	for n < len(e.events) && visible(e.events[n].At) {
		fn(&e.events[n])
		n++
	}
	if n > 0 {
		clear(e.events[:n])
		e.events = e.events[n:]
	}
}

// PendingEvents is the number of KV events not yet released.
func (e *Engine) PendingEvents() int { return len(e.events) }

// Scrape records the engine's metrics as of virtual time at (not before
// the previous call's t, not after the next arrival): what its /metrics
// reports until the next scrape. It reports whether any value other than
// the time changed.
func (e *Engine) Scrape(at float64) bool {
	m := MetricsSnapshot{At: at, QueryTokens: e.queryTokens, HitTokens: e.hitTokens}
	kv := 0
	clear(e.usedBlocks)
	e.inflight.each(func(done float64, f inflight) {
		switch {
		case done <= at:
		case f.start > at:
			m.Waiting++
		default:
			m.Running++
			kv += f.reserve
			for _, h := range f.blocks {
				e.usedBlocks[h] = struct{}{} // a block shared by running requests takes one slot
			}
		}
	})
	kv += len(e.usedBlocks)
	m.KVUsage = min(1, float64(kv)/float64(e.Cache.Capacity()))
	e.mu.Lock()
	old := e.snap
	e.snap = m
	e.mu.Unlock()
	old.At = at
	return old != m
}

// Metrics returns the last scrape's snapshot.
func (e *Engine) Metrics() MetricsSnapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snap
}

// Requests is the number of requests the engine served.
func (e *Engine) Requests() int64 { return e.requests }

// WriteMetrics writes the last scrape's snapshot as a Prometheus text
// exposition with vLLM's metric names: KV cache usage (0..1), prefix-cache
// queries and hits (tokens), running and waiting requests. The engine
// label is the data-parallel rank (0).
func (e *Engine) WriteMetrics(w io.Writer, model string) error {
	m := e.Metrics()
	lbl := fmt.Sprintf(`{engine="0",model_name=%q}`, model)
	_, err := fmt.Fprintf(w, `# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc%s %g
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total%s %d
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total%s %d
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running%s %d
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting%s %d
`, lbl, m.KVUsage, lbl, m.QueryTokens, lbl, m.HitTokens, lbl, m.Running, lbl, m.Waiting)
	return err
}
