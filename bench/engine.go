package bench

import (
	"container/heap"
	"fmt"
	"io"
	"math"
	"sync/atomic"
)

// FleetConfig describes the simulated fleet; the same settings are used
// for every strategy of a run.
type FleetConfig struct {
	// Engines is the number of engines (N).
	Engines int
	// CacheBlocks is each engine's KV cache size in 512-token blocks (C).
	CacheBlocks int
	// PrefillTPS is an engine's prefill speed in prompt tokens per second
	// (default 10,000).
	PrefillTPS float64
	// DecodeTPS is the decode speed of one request in output tokens per
	// second (default 40); decoding runs alongside prefills (continuous
	// batching) and only keeps the request in flight.
	DecodeTPS float64
}

// Defaults of FleetConfig.
const (
	DefaultPrefillTPS = 10000
	DefaultDecodeTPS  = 40
)

func (c *FleetConfig) fill() error {
	if c.Engines < 1 {
		return fmt.Errorf("bench: %d engines: need at least 1", c.Engines)
	}
	if c.CacheBlocks < 1 {
		return fmt.Errorf("bench: cache of %d blocks: need at least 1", c.CacheBlocks)
	}
	if c.PrefillTPS == 0 {
		c.PrefillTPS = DefaultPrefillTPS
	}
	if c.DecodeTPS == 0 {
		c.DecodeTPS = DefaultDecodeTPS
	}
	if !(c.PrefillTPS > 0) || !(c.DecodeTPS > 0) {
		return fmt.Errorf("bench: prefill %v and decode %v tokens/s must be positive", c.PrefillTPS, c.DecodeTPS)
	}
	return nil
}

// inflight is a request admitted to an engine and not finished.
type inflight struct {
	start, done float64 // prefill start, last token (virtual s)
	kvBlocks    int
}

type inflightHeap []inflight

func (h inflightHeap) Len() int           { return len(h) }
func (h inflightHeap) Less(i, j int) bool { return h[i].done < h[j].done }
func (h inflightHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *inflightHeap) Push(x any)        { *h = append(*h, x.(inflight)) }
func (h *inflightHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Served is the outcome of one request on one engine.
type Served struct {
	// CachedTokens is the prompt prefix found in the engine's cache (a
	// whole number of 512-token blocks).
	CachedTokens int
	// WaitS is the modelled queue wait (virtual seconds).
	WaitS float64
	// TTFTS is the modelled time to first token: WaitS + uncached tokens /
	// prefill speed (virtual seconds).
	TTFTS float64
}

// Engine is one simulated inference engine: a KV cache of C blocks (LRU),
// a prefill queue (one prefill at a time, FIFO) and in-flight requests.
// Serve runs on one goroutine; the counters read by the /metrics handler
// are atomic.
type Engine struct {
	// ID is the engine's position in the fleet.
	ID int
	// Cache is the engine's KV cache (read by the oracle).
	Cache *Cache

	cfg           FleetConfig
	prefillFreeAt float64
	inflight      inflightHeap
	adm           Admission
	// OnAdmit, when set, receives every admission (the KV-event
	// publisher); blocks are the request's full blocks.
	onAdmit func(blocks []uint64, a *Admission)

	requests, queryTokens, hitTokens atomic.Int64
	running, waiting                 atomic.Int64
	usage                            atomic.Uint64 // float64 bits, 0..1
}

// NewEngine returns engine id of a fleet with cfg (filled).
func NewEngine(id int, cfg FleetConfig) *Engine {
	return &Engine{ID: id, Cache: NewCache(cfg.CacheBlocks), cfg: cfg}
}

// advance retires the requests finished by virtual time t.
func (e *Engine) advance(t float64) {
	for len(e.inflight) > 0 && e.inflight[0].done <= t {
		heap.Pop(&e.inflight)
	}
}

// Load is the number of requests admitted to the engine and not finished
// at virtual time t (waiting, prefilling or decoding): the least-loaded
// strategy's measure.
func (e *Engine) Load(t float64) int {
	e.advance(t)
	return len(e.inflight)
}

// PrefillBacklog is how long a prefill arriving at t would wait (virtual
// seconds).
func (e *Engine) PrefillBacklog(t float64) float64 { return max(0, e.prefillFreeAt-t) }

// Serve admits request r arriving at virtual time t (seconds): the cached
// tokens are the leading run of its full blocks present in the cache;
// then its blocks are admitted (stored, evictions happen) and published.
func (e *Engine) Serve(r *Request, t float64) Served {
	e.advance(t)
	blocks := r.Blocks()
	run := e.Cache.CachedRun(blocks)
	cached := run * TraceBlockTokens
	uncached := r.InputLength - cached
	start := max(t, e.prefillFreeAt)
	prefill := float64(uncached) / e.cfg.PrefillTPS
	e.prefillFreeAt = start + prefill
	heap.Push(&e.inflight, inflight{start: start, done: start + prefill + float64(r.OutputLength)/e.cfg.DecodeTPS,
		kvBlocks: (r.InputLength + r.OutputLength + TraceBlockTokens - 1) / TraceBlockTokens})
	e.Cache.Admit(blocks, &e.adm)
	if e.onAdmit != nil {
		e.onAdmit(blocks, &e.adm)
	}
	e.requests.Add(1)
	e.queryTokens.Add(int64(r.InputLength))
	e.hitTokens.Add(int64(cached))
	var kv, waiting int
	for _, f := range e.inflight {
		kv += f.kvBlocks
		if f.start > t {
			waiting++
		}
	}
	e.running.Store(int64(len(e.inflight) - waiting))
	e.waiting.Store(int64(waiting))
	e.usage.Store(math.Float64bits(min(1, float64(kv)/float64(e.Cache.Capacity()))))
	return Served{CachedTokens: cached, WaitS: start - t, TTFTS: start - t + prefill}
}

// Requests is the number of requests the engine served.
func (e *Engine) Requests() int64 { return e.requests.Load() }

// WriteMetrics writes the engine's Prometheus text exposition with vLLM's
// metric names: KV cache usage (0..1, the blocks held by in-flight
// requests over C), prefix-cache queries and hits (tokens), running and
// waiting requests. The engine label is the data-parallel rank (0).
func (e *Engine) WriteMetrics(w io.Writer, model string) error {
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
`, lbl, math.Float64frombits(e.usage.Load()), lbl, e.queryTokens.Load(), lbl, e.hitTokens.Load(),
		lbl, e.running.Load(), lbl, e.waiting.Load())
	return err
}
