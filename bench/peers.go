package bench

import (
	"context"
	"math/rand/v2"
)

// The peers' routers, each written from its project's public defaults
// (no code taken): NVIDIA Dynamo's KV router, llm-d's endpoint picker and
// SGLang's cache-aware gateway policy. Dynamo and llm-d read the engines'
// caches as a perfect KV-event indexer would (IndexerView, with the same
// event delay as the cluster); SGLang sees no events at all. Each gateway
// instance tracks only what it routed itself, as those routers do without
// replica sync.

// IndexerView is a perfect KV-event indexer: each engine's cached blocks
// exactly as the released KV events say (stored added, evicted removed).
type IndexerView struct {
	blocks []map[uint64]struct{}
}

// NewIndexerView returns an empty view of n engines.
func NewIndexerView(n int) *IndexerView {
	v := &IndexerView{blocks: make([]map[uint64]struct{}, n)}
	for i := range v.blocks {
		v.blocks[i] = map[uint64]struct{}{}
	}
	return v
}

// Apply applies one released event of engine.
func (v *IndexerView) Apply(engine int, ev *KVEvent) {
	m := v.blocks[engine]
	for _, h := range ev.Adm.Evicted {
		delete(m, h)
	}
	for _, r := range ev.Adm.Stored {
		for _, h := range ev.Blocks[r.Start:r.End] {
			m[h] = struct{}{}
		}
	}
}

// CachedRun is the leading run of blocks the view holds on engine.
func (v *IndexerView) CachedRun(engine int, blocks []uint64) int {
	m := v.blocks[engine]
	for i, h := range blocks {
		if _, ok := m[h]; !ok {
			return i
		}
	}
	return len(blocks)
}

// release is load a router tracks until a virtual time (a request's
// first or last token).
type release struct {
	engine int
	amount float64
	kind   int
}

// dynamo is Dynamo's KV router with its defaults (overlap credit 1,
// prefill load scale 1, temperature 0): the lowest
//
//	cost = (active_prefill_tokens + ISL − cached_tokens) / block_size + active_decode_blocks
//
// wins, ties at random. active_prefill_tokens are the uncached tokens of
// the requests it routed there and that have not yet produced their first
// token; active_decode_blocks the blocks (ceil(ISL / block_size)) of those
// not yet finished.
//
// dynamo-sync is the same router with --router-replica-sync (off by
// default). Dynamo's router replicas publish every routing event of their
// slot manager (AddRequest with the worker, the request's blocks and its
// overlap; then MarkPrefillCompleted at the first token; Free at the end)
// to the other replicas over NATS, which apply them to their own
// active-sequence tracking, so each replica's active_prefill_tokens and
// active_decode_blocks count every replica's requests. The bench passes
// them on through dynamoSync: at zero delay for dynamo-sync (from the next
// virtual instant, the strongest form of the option) and at NATS's delay
// for dynamo-sync-nats; the cached blocks come from the same indexer as
// before. Sources:
// ai-dynamo/dynamo docs/design_docs/router_design.md ("Inter-Router
// Communication", "Local Active Block Management with Replica Sync") at
// commit 4976d26229810a2220b829bb3e43a22244683586, and
// lib/llm/src/kv_router.rs (KvRouterConfig.router_replica_sync, default
// false, passed to KvScheduler::start; add_request, mark_prefill_completed,
// free).
type dynamo struct {
	view    *IndexerView
	rng     *rand.Rand
	prefill []float64
	decode  []float64
	due     due[release]
	cost    []float64 // of the last Route, per engine
	new     []float64 // uncached tokens of the last Route, per engine
	ties    []int
	sync    *dynamoSync // replica sync (nil = off)
	at      float64     // virtual time of the last Route
}

const (
	releasePrefill = iota
	releaseDecode
	releaseRequest
)

func newDynamo(n int, view *IndexerView, seed uint64) *dynamo {
	return &dynamo{view: view, rng: rand.New(rand.NewPCG(seed, 0x64796e)), prefill: make([]float64, n),
		decode: make([]float64, n), cost: make([]float64, n), new: make([]float64, n)}
}

func (r *dynamo) Route(_ context.Context, _ int, q *Request, t float64) int {
	r.at = t
	r.due.until(t, func(x release) {
		if x.kind == releasePrefill {
			r.prefill[x.engine] -= x.amount
		} else {
			r.decode[x.engine] -= x.amount
		}
	})
	blocks := q.Blocks()
	for e := range r.cost {
		cached := min(r.view.CachedRun(e, blocks)*TraceBlockTokens, q.InputLength)
		r.new[e] = float64(q.InputLength - cached)
		r.cost[e] = (r.prefill[e]+r.new[e])/TraceBlockTokens + r.decode[e]
	}
	return pickMin(r.cost, r.rng, &r.ties)
}

func (r *dynamo) Routed(q *Request, e int, s *Served) {
	d := float64((q.InputLength + TraceBlockTokens - 1) / TraceBlockTokens)
	r.prefill[e] += r.new[e]
	r.decode[e] += d
	r.due.push(s.FirstTokenAt, release{engine: e, amount: r.new[e], kind: releasePrefill})
	r.due.push(s.DoneAt, release{engine: e, amount: d, kind: releaseDecode})
	if r.sync != nil {
		r.sync.routed(r, e, r.new[e], d, r.at, s)
	}
}

// pickMin returns the index of the lowest value, ties uniformly at random.
func pickMin(v []float64, rng *rand.Rand, ties *[]int) int {
	*ties = (*ties)[:0]
	for i, x := range v {
		switch {
		case len(*ties) == 0 || x < v[(*ties)[0]]:
			*ties = append((*ties)[:0], i)
		case x == v[(*ties)[0]]:
			*ties = append(*ties, i)
		}
	}
	return (*ties)[rng.IntN(len(*ties))]
}

// llmd is llm-d's endpoint picker with the scorer weights of its default
// EPP configuration: the highest
//
//	score = 3·prefix + 2·queue + 2·kv_util
//
// wins, ties at random, where prefix = the longest consecutive cached run
// / the request's blocks (KV-event indexer), queue = (max_q − q) /
// (max_q − min_q) over the engines' waiting requests (1 for all when they
// are equal) and kv_util = 1 − KV-cache usage, both as the engines' last
// /metrics scrape reported them.
type llmd struct {
	f     *Fleet
	view  *IndexerView
	rng   *rand.Rand
	score []float64
	ties  []int
}

func newLLMD(f *Fleet, view *IndexerView, seed uint64) *llmd {
	return &llmd{f: f, view: view, rng: rand.New(rand.NewPCG(seed, 0x6c6c6d64)), score: make([]float64, len(f.Engines))}
}

// Scorer weights of llm-d's default endpoint-picker configuration.
const (
	llmdPrefixWeight = 3
	llmdQueueWeight  = 2
	llmdKVWeight     = 2
)

func (r *llmd) Route(_ context.Context, _ int, q *Request, _ float64) int {
	blocks := q.Blocks()
	minQ, maxQ := 0, 0
	for i, e := range r.f.Engines {
		w := e.Metrics().Waiting
		if i == 0 || w < minQ {
			minQ = w
		}
		if i == 0 || w > maxQ {
			maxQ = w
		}
	}
	for i, e := range r.f.Engines {
		m := e.Metrics()
		prefix := 0.0
		if len(blocks) > 0 {
			prefix = float64(r.view.CachedRun(i, blocks)) / float64(len(blocks))
		}
		queue := 1.0
		if maxQ > minQ {
			queue = float64(maxQ-m.Waiting) / float64(maxQ-minQ)
		}
		// Highest score wins: pickMin over the negated scores.
		r.score[i] = -(llmdPrefixWeight*prefix + llmdQueueWeight*queue + llmdKVWeight*(1-m.KVUsage))
	}
	return pickMin(r.score, r.rng, &r.ties)
}

// sglang is SGLang's cache-aware gateway policy with its defaults: when
// the in-flight requests it routed are imbalanced (max − min > 64 and
// max > 1.5 × min) the least loaded worker; otherwise the worker whose
// approximate prefix tree (the requests it routed there; no KV events)
// matches the most of the prompt, when that match is over 0.3 of the
// prompt, else the least loaded. The request is then inserted under the
// chosen worker. The tree is never pruned (SGLang prunes at 2^26 tokens'
// worth per worker, beyond any trace here).
type sglang struct {
	load []int
	tree []map[uint64]struct{}
	due  due[release]
}

// SGLang's cache-aware policy defaults.
const (
	sglangBalanceAbs = 64
	sglangBalanceRel = 1.5
	sglangCacheRatio = 0.3
)

func newSGLang(n int) *sglang {
	r := &sglang{load: make([]int, n), tree: make([]map[uint64]struct{}, n)}
	for i := range r.tree {
		r.tree[i] = map[uint64]struct{}{}
	}
	return r
}

func (r *sglang) leastLoaded() int {
	best := 0
	for i, l := range r.load {
		if l < r.load[best] {
			best = i
		}
	}
	return best
}

func (r *sglang) Route(_ context.Context, _ int, q *Request, t float64) int {
	r.due.until(t, func(x release) { r.load[x.engine]-- })
	lo, hi := r.load[r.leastLoaded()], 0
	for _, l := range r.load {
		hi = max(hi, l)
	}
	if hi-lo > sglangBalanceAbs && float64(hi) > sglangBalanceRel*float64(lo) {
		return r.leastLoaded()
	}
	best, bestRun := 0, -1
	for i, m := range r.tree {
		run := 0
		for _, h := range q.HashIDs {
			if _, ok := m[h]; !ok {
				break
			}
			run++
		}
		if run > bestRun {
			best, bestRun = i, run
		}
	}
	matched := min(bestRun*TraceBlockTokens, q.InputLength)
	if q.InputLength > 0 && float64(matched)/float64(q.InputLength) > sglangCacheRatio {
		return best
	}
	return r.leastLoaded()
}

func (r *sglang) Routed(q *Request, e int, s *Served) {
	for _, h := range q.HashIDs {
		r.tree[e][h] = struct{}{}
	}
	r.load[e]++
	r.due.push(s.DoneAt, release{engine: e, kind: releaseRequest})
}
