package bench

import (
	"context"
	"math/rand/v2"
	"strconv"

	"github.com/inference-cache/inference-cache/peers"
)

// The peers' routers: NVIDIA Dynamo's KV router, llm-d's Endpoint Picker
// and SGLang's cache-aware gateway policy, their formulas and defaults
// those of package peers (shared with the proxy's --strategy dynamo,
// llm-d and sglang; sources cited there). Dynamo reads the engines'
// caches as its KV-event indexer does (IndexerView, with the same event
// delay as the cluster); llm-d's default prefix scorer and SGLang see no
// events at all, only the blocks they routed. Each gateway instance
// tracks only what it routed itself, as those routers do without replica
// sync.

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

// release is a routed request's next state change a router applies once
// its clock reaches it: its first token (prefill done) or its end.
type release struct {
	engine int
	id     uint64
	kind   int
	// q and overlap are a replica-synced request's, for releaseAdd.
	q       *Request
	overlap int
}

const (
	releasePrefill = iota
	releaseDone
	// releaseAdd applies another instance's AddRequest (replica sync).
	releaseAdd
)

// workerNames are the peers' worker keys of n engines ("0", "1", …).
func workerNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// dynamo is Dynamo's KV router with its defaults (peers.DynamoSlots,
// DynamoLogit, DynamoSelect at overlap weight 1, temperature 0, block
// size TraceBlockTokens): the lowest
//
//	logit = (active_prefill_tokens + ISL − overlap × block_size) / block_size
//	        + (active distinct blocks + the request's blocks not among them)
//
// wins; ties go to the engine whose indexer tree is smaller, then at
// random. active_prefill_tokens are the uncached tokens of the requests
// it routed there that have not yet produced their first token; the
// active blocks those of the requests not yet finished.
//
// dynamo-sync is the same router with --router-replica-sync (off by
// default). Dynamo's router replicas publish every routing event of their
// slot manager (AddRequest with the worker, the request's blocks and its
// overlap; then MarkPrefillCompleted at the first token; Free at the end)
// to the other replicas over NATS, which apply them to their own
// active-sequence tracking. The bench passes them on through dynamoSync:
// at zero delay for dynamo-sync (from the next virtual instant, the
// strongest form of the option) and at NATS's delay for
// dynamo-sync-nats; the cached blocks come from the same indexer as
// before. Sources: ai-dynamo/dynamo
// docs/design_docs/router_design.md ("Inter-Router Communication",
// "Local Active Block Management with Replica Sync") at commit
// 4976d26229810a2220b829bb3e43a22244683586, and
// lib/llm/src/kv_router/kv_router.rs (KvRouterConfig.router_replica_sync,
// default false).
type dynamo struct {
	view    *IndexerView
	rng     *rand.Rand
	cfg     peers.DynamoConfig
	slots   *peers.DynamoSlots
	names   []string
	due     due[release]
	logits  []float64
	trees   []int
	overlap []int // of the last Route, per engine
	nextID  uint64
	sync    *dynamoSync // replica sync (nil = off)
	at      float64     // virtual time of the last Route
}

func newDynamo(n int, view *IndexerView, seed uint64) *dynamo {
	return &dynamo{view: view, rng: rand.New(rand.NewPCG(seed, 0x64796e)), cfg: peers.DefaultDynamoConfig(TraceBlockTokens),
		slots: peers.NewDynamoSlots(TraceBlockTokens), names: workerNames(n), logits: make([]float64, n), trees: make([]int, n),
		overlap: make([]int, n)}
}

func (r *dynamo) Route(_ context.Context, _ int, q *Request, t float64) int {
	r.at = t
	r.due.until(t, func(x release) {
		switch x.kind {
		case releaseAdd:
			r.slots.Add(x.id, r.names[x.engine], x.q.Blocks(), x.q.InputLength, x.overlap)
		case releasePrefill:
			r.slots.PrefillDone(x.id)
		default:
			r.slots.Free(x.id)
		}
	})
	blocks := q.Blocks()
	for e := range r.logits {
		r.overlap[e] = r.view.CachedRun(e, blocks)
		r.trees[e] = len(r.view.blocks[e])
		nb, nt := r.slots.Potential(r.names[e], blocks, q.InputLength, r.overlap[e])
		r.logits[e] = peers.DynamoLogit(r.cfg, nb, nt)
	}
	return peers.DynamoSelect(r.cfg, r.logits, r.trees, r.rng)
}

func (r *dynamo) Routed(q *Request, e int, s *Served) {
	id := r.newID()
	r.slots.Add(id, r.names[e], q.Blocks(), q.InputLength, r.overlap[e])
	r.due.push(s.FirstTokenAt, release{engine: e, id: id, kind: releasePrefill})
	r.due.push(s.DoneAt, release{engine: e, id: id, kind: releaseDone})
	if r.sync != nil {
		r.sync.routed(r, release{engine: e, id: id, kind: releaseAdd, q: q, overlap: r.overlap[e]}, r.at, s)
	}
}

// newID is a request id unique among the instances that share ids (a
// replica-synced group draws from one counter).
func (r *dynamo) newID() uint64 {
	if r.sync != nil {
		r.sync.nextID++
		return r.sync.nextID
	}
	r.nextID++
	return r.nextID
}

// llmd is llm-d's Endpoint Picker with its default profile
// (peers.LLMDScores at weights 3, 2, 2 and peers.PickMax): the highest
//
//	score = 3·prefix + 2·queue + 2·(1 − kv_usage)
//
// wins, ties at random, where prefix = the leading run of the request's
// blocks this gateway routed to the engine / the request's blocks (both
// capped at 256 blocks of 16 tokens), queue = (max_q − q) / (max_q −
// min_q) over the engines' waiting requests (1 for all when they are
// equal) and kv_usage the KV-cache usage, both as the engines' last
// /metrics scrape reported them. The prefix index is the default
// prefix-cache-scorer's: the blocks of every request it sent, an LRU of
// 31250 blocks of 16 tokens per engine, recorded as the pick is made.
type llmd struct {
	f      *Fleet
	cfg    peers.LLMDConfig
	rng    *rand.Rand
	routed *peers.RoutedBlocks
	names  []string
	eps    []peers.LLMDEndpoint
	score  []float64
}

func newLLMD(f *Fleet, seed uint64) *llmd {
	cfg := peers.DefaultLLMDConfig().ForBlockSize(TraceBlockTokens)
	return &llmd{f: f, cfg: cfg, rng: rand.New(rand.NewPCG(seed, 0x6c6c6d64)), routed: peers.NewRoutedBlocks(cfg.LRUCapacity),
		names: workerNames(len(f.Engines)), eps: make([]peers.LLMDEndpoint, len(f.Engines))}
}

func (r *llmd) Route(_ context.Context, _ int, q *Request, _ float64) int {
	blocks := q.Blocks()
	key := blocks[:min(len(blocks), r.cfg.MaxPrefixBlocks)]
	for i, e := range r.f.Engines {
		m := e.Metrics()
		r.eps[i] = peers.LLMDEndpoint{MatchedBlocks: r.routed.Match(r.names[i], key), Waiting: m.Waiting, KVUsage: m.KVUsage}
	}
	r.score = peers.LLMDScores(r.cfg, len(key), r.eps, r.score)
	e := peers.PickMax(r.score, r.rng)
	r.routed.Add(r.names[e], key)
	return e
}

// sglang is SGLang's cache-aware gateway policy with its command line's
// defaults (peers.SGLangPick): when the in-flight requests it routed are
// imbalanced (max − min > 64 and max > 1.5 × min) the least loaded
// worker; otherwise the worker whose approximate tree (the prompts it
// routed there; no KV events) matches the most of the prompt, when that
// match is over 0.3 of the prompt, else the worker with the smallest
// tree. The prompt's blocks are then inserted under the chosen worker.
type sglang struct {
	cfg    peers.SGLangConfig
	load   []int
	routed *peers.RoutedBlocks
	names  []string
	ws     []peers.SGLangWorker
	due    due[release]
}

func newSGLang(n int) *sglang {
	cfg := peers.DefaultSGLangConfig().ForBlockSize(TraceBlockTokens)
	return &sglang{cfg: cfg, load: make([]int, n), routed: peers.NewRoutedBlocks(cfg.TreeBlocks), names: workerNames(n),
		ws: make([]peers.SGLangWorker, n)}
}

func (r *sglang) Route(_ context.Context, _ int, q *Request, t float64) int {
	r.due.until(t, func(x release) { r.load[x.engine]-- })
	blocks := q.Blocks()
	for i := range r.ws {
		r.ws[i] = peers.SGLangWorker{Load: r.load[i], MatchedTokens: min(r.routed.Match(r.names[i], blocks)*TraceBlockTokens, q.InputLength),
			TreeBlocks: r.routed.Size(r.names[i])}
	}
	e, _ := peers.SGLangPick(r.cfg, q.InputLength, r.ws)
	r.routed.Add(r.names[e], blocks)
	return e
}

func (r *sglang) Routed(_ *Request, e int, s *Served) {
	r.load[e]++
	r.due.push(s.DoneAt, release{engine: e, kind: releaseDone})
}
