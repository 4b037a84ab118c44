package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// Strategy names (contract §12.7).
const (
	StrategyRoundRobin     = "round-robin"
	StrategyRandom         = "random"
	StrategyLeastLoaded    = "least-loaded"
	StrategyConsistentHash = "consistent-hash"
	StrategyLookupRouteV1  = "lookuproute-v1"
	StrategyLookupRouteV2  = "lookuproute-v2"
	StrategyLookupRouteSDK = "lookuproute-sdk"
	// StrategyLookupRouteSDKLocal is lookuproute-sdk without the shared
	// in-flight load: each gateway's picker knows only what it sent (the
	// ablation of the shared load).
	StrategyLookupRouteSDKLocal = "lookuproute-sdk-local"
	StrategyDynamo              = "dynamo"
	// StrategyDynamoSync is Dynamo's KV router with --router-replica-sync
	// at zero delay, its strongest form: every router instance applies
	// every other instance's routing events from the next virtual instant
	// on.
	StrategyDynamoSync = "dynamo-sync"
	// StrategyDynamoSyncNATS is the same with the events delayed as
	// NATS delivers them (Config.DynamoSyncDelay).
	StrategyDynamoSyncNATS = "dynamo-sync-nats"
	StrategyLLMD           = "llm-d"
	StrategySGLang         = "sglang"
	StrategyLongestMatch   = "longest-match"
	StrategyOracle         = "oracle"
)

// AllStrategies lists every strategy in report order.
var AllStrategies = []string{StrategyRoundRobin, StrategyRandom, StrategyLeastLoaded, StrategyConsistentHash,
	StrategyLookupRouteV1, StrategyLookupRouteV2, StrategyLookupRouteSDK, StrategyLookupRouteSDKLocal, StrategyDynamo,
	StrategyDynamoSync, StrategyDynamoSyncNATS, StrategyLLMD, StrategySGLang, StrategyLongestMatch, StrategyOracle}

// UsesCluster reports whether the strategy asks the cluster for hints.
func UsesCluster(name string) bool {
	return name == StrategyLookupRouteV1 || name == StrategyLookupRouteV2 || name == StrategyLookupRouteSDK ||
		name == StrategyLookupRouteSDKLocal
}

// SharesLoad reports whether the gateway instances of the strategy share
// their in-flight load: lookuproute-sdk (and picker-indexer) through the
// cluster's shared soft state (load and provisional picks, pushed as they
// change, Config.ShareDelay), dynamo-sync and dynamo-sync-nats through
// Dynamo's replica sync (Config.DynamoSyncDelay for the latter). It
// matters only with several gateways.
func SharesLoad(name string) bool {
	return name == StrategyLookupRouteSDK || name == StrategyPickerIndexer || name == StrategyDynamoSync ||
		name == StrategyDynamoSyncNATS
}

// PerGateway reports whether each gateway instance of the strategy keeps
// its own state (what it routed, and for the sharing ones what the others'
// pushes told it), as the real routers do; the others (least-loaded,
// consistent-hash, longest-match, the oracle) see the same thing from
// every gateway.
func PerGateway(name string) bool {
	switch name {
	case StrategyRoundRobin, StrategyRandom, StrategyLookupRouteV1, StrategyLookupRouteV2, StrategyLookupRouteSDK,
		StrategyLookupRouteSDKLocal, StrategyPickerIndexer, StrategyDynamo, StrategyDynamoSync, StrategyDynamoSyncNATS,
		StrategyLLMD, StrategySGLang:
		return true
	}
	return false
}

// Fleet is the simulated engines of one strategy's replay.
type Fleet struct {
	// Engines are the engines, position = engine id.
	Engines []*Engine
	// Model is the model id the engines publish and the gateway asks for.
	Model string
	// ReplicaPrefix prefixes the engines' replica ids.
	ReplicaPrefix string
}

// NewFleet returns cfg.Engines fresh engines (cfg must be filled).
func NewFleet(cfg FleetConfig, model, replicaPrefix string) *Fleet {
	f := &Fleet{Model: model, ReplicaPrefix: replicaPrefix}
	for i := 0; i < cfg.Engines; i++ {
		f.Engines = append(f.Engines, NewEngine(i, cfg))
	}
	return f
}

// ReplicaID is engine i's replica id in the index.
func (f *Fleet) ReplicaID(i int) string { return f.ReplicaPrefix + "e" + strconv.Itoa(i) }

// Router chooses an engine for each request.
type Router interface {
	// Route returns the engine for request r, the i-th of the trace,
	// arriving at virtual time t (seconds).
	Route(ctx context.Context, i int, r *Request, t float64) int
}

// tracker is a Router that tracks what it routed: Routed tells it where
// request r went and when its first and last tokens come (it may use them
// only once its clock reaches those times).
type tracker interface {
	Routed(r *Request, e int, s *Served)
}

// gateways splits the requests over several gateway instances of one
// strategy, round robin by arrival.
type gateways struct {
	rs   []Router
	last Router
}

// of is the gateway instance that request i goes through.
func (g *gateways) of(i int) Router { return g.rs[i%len(g.rs)] }

func (g *gateways) Route(ctx context.Context, i int, r *Request, t float64) int {
	g.last = g.of(i)
	return g.last.Route(ctx, i, r, t)
}

func (g *gateways) Routed(r *Request, e int, s *Served) {
	if tr, ok := g.last.(tracker); ok {
		tr.Routed(r, e, s)
	}
}

// roundRobin: request i → engine i mod N.
type roundRobin struct{ n, next int }

func (r *roundRobin) Route(context.Context, int, *Request, float64) int {
	e := r.next
	r.next = (r.next + 1) % r.n
	return e
}

// randomRouter: uniformly random, seeded.
type randomRouter struct {
	n   int
	rng *rand.Rand
}

func (r *randomRouter) Route(context.Context, int, *Request, float64) int { return r.rng.IntN(r.n) }

// leastLoaded: fewest requests in flight; ties by the shorter prefill
// backlog, then the lower id.
type leastLoaded struct{ f *Fleet }

func (r *leastLoaded) Route(_ context.Context, _ int, _ *Request, t float64) int {
	best, bestLoad, bestBacklog := 0, int(^uint(0)>>1), 0.0
	for i, e := range r.f.Engines {
		l, b := e.Load(t), e.PrefillBacklog(t)
		if l < bestLoad || (l == bestLoad && b < bestBacklog) {
			best, bestLoad, bestBacklog = i, l, b
		}
	}
	return best
}

// consistentHash: rendezvous (highest random weight) hashing of the
// request's first hash id over the engines; requests without blocks go
// round robin.
type consistentHash struct {
	n  int
	rr roundRobin
}

func (r *consistentHash) Route(ctx context.Context, i int, q *Request, t float64) int {
	if len(q.HashIDs) == 0 {
		return r.rr.Route(ctx, i, q, t)
	}
	return rendezvous(q.HashIDs[0], r.n)
}

// rendezvous returns the engine with the highest weight mix64(key, engine).
func rendezvous(key uint64, n int) int {
	best, bestW := 0, uint64(0)
	for i := 0; i < n; i++ {
		if w := mix64(key ^ mix64(uint64(i)+0x632be59bd9b4e019)); i == 0 || w > bestW {
			best, bestW = i, w
		}
	}
	return best
}

// longestMatch sees every engine's true cache: the longest cached leading
// run wins; ties go to the least loaded (requests in flight, then prefill
// backlog), then the lower id. It herds: the reference for what cache
// affinity alone does.
type longestMatch struct{ f *Fleet }

func (r *longestMatch) Route(_ context.Context, _ int, q *Request, t float64) int {
	return LongestMatchChoice(r.f, q, t)
}

// oracle has perfect, instant knowledge of every engine's cache and
// queue: it picks the engine with the lowest predicted TTFT for this
// request (queue wait + uncached tokens / prefill speed, exactly what the
// engine will do), ties by fewer requests in flight, then the lower id.
// It is greedy, one request at a time: a reference, not a bound (sending
// a request elsewhere than its best engine can serve later ones better).
type oracle struct{ f *Fleet }

func (r *oracle) Route(_ context.Context, _ int, q *Request, t float64) int {
	return OracleChoice(r.f, q, t)
}

// OracleChoice is the oracle's pick for request q at virtual time t.
func OracleChoice(f *Fleet, q *Request, t float64) int {
	best, bestTTFT, bestLoad := 0, math.Inf(1), 0
	for i, e := range f.Engines {
		ttft, l := e.PredictTTFT(q, t), e.Load(t)
		if ttft < bestTTFT || (ttft == bestTTFT && l < bestLoad) {
			best, bestTTFT, bestLoad = i, ttft, l
		}
	}
	return best
}

// LongestMatchChoice is longest-match's pick for request q at virtual
// time t.
func LongestMatchChoice(f *Fleet, q *Request, t float64) int {
	blocks := q.Blocks()
	best, bestRun, bestLoad, bestBacklog := 0, -1, 0, 0.0
	for i, e := range f.Engines {
		run, l, b := e.Cache.CachedRun(blocks), e.Load(t), e.PrefillBacklog(t)
		if run > bestRun || (run == bestRun && (l < bestLoad || (l == bestLoad && b < bestBacklog))) {
			best, bestRun, bestLoad, bestBacklog = i, run, l, b
		}
	}
	return best
}

// lookupRouter asks the cluster (LookupRoute with the prompt's token ids,
// the server fingerprints them) and routes to the first replica of any
// hint (PREFIX_MATCH, TENANT_HOT, AFFINITY_HINT); NO_HINT, the UNKNOWN_*
// codes or a replica that is not in the fleet go round robin, as a
// gateway does.
type lookupRouter struct {
	*lookupStats
	f      *Fleet
	cl     *client.Client
	engine map[string]int
	rr     roundRobin
	toks   []uint32
	req    pb.LookupRouteRequest
}

// lookupStats are the lookups of every gateway of a hint strategy.
type lookupStats struct {
	lat     []float64 // µs, gateway side
	reasons map[string]int64
	unknown int64 // hints naming a replica outside the fleet
}

func newLookupStats() *lookupStats { return &lookupStats{reasons: map[string]int64{}} }

func newLookupRouter(f *Fleet, cl *client.Client, st *lookupStats) *lookupRouter {
	r := &lookupRouter{lookupStats: st, f: f, cl: cl, engine: map[string]int{}, rr: roundRobin{n: len(f.Engines)}}
	for i := range f.Engines {
		r.engine[f.ReplicaID(i)] = i
	}
	return r
}

// lookup asks the cluster for request q's hints (max 0 = the policy's
// maxReplicas) and counts the answer.
func (r *lookupRouter) lookup(ctx context.Context, q *Request, max uint32, includeLoad bool) *pb.LookupRouteResponse {
	r.toks = AppendPromptTokens(r.toks[:0], q)
	r.req = pb.LookupRouteRequest{TokenIds: r.toks, ModelId: r.f.Model, TenantId: BenchTenant, HashScheme: BenchScheme,
		MaxReplicas: max, IncludeLoad: includeLoad}
	start := time.Now()
	resp := r.cl.LookupRoute(ctx, &r.req)
	r.lat = append(r.lat, float64(time.Since(start).Nanoseconds())/1e3)
	r.reasons[resp.GetReasonCode().String()]++
	return resp
}

func (r *lookupRouter) Route(ctx context.Context, i int, q *Request, t float64) int {
	resp := r.lookup(ctx, q, 0, false)
	rc := resp.GetReasonCode()
	switch rc {
	case pb.ReasonCode_PREFIX_MATCH, pb.ReasonCode_TENANT_HOT, pb.ReasonCode_AFFINITY_HINT:
		if reps := resp.GetReplicas(); len(reps) > 0 {
			if e, ok := r.engine[reps[0].GetReplicaId()]; ok {
				return e
			}
			r.unknown++
		}
	}
	return r.rr.Route(ctx, i, q, t)
}

// routerEnv is what a strategy's routers may read: the fleet (its true
// state is only for least-loaded, longest-match and the oracle), the
// perfect KV-event indexer's view (delayed like every event), the cluster
// client, the seed, the picker's configuration and the gateway core's
// lookup budget and, for a strategy whose gateways share state, the
// shared state (lookuproute-sdk, picker-indexer) or the replica sync
// (dynamo-sync, dynamo-sync-nats).
type routerEnv struct {
	f             *Fleet
	view          *IndexerView
	cl            *client.Client
	stats         *lookupStats
	seed          uint64
	picker        client.PickerConfig
	lookupBudget  time.Duration
	noProvisional bool
	shared        *sharedState
	dsync         *dynamoSync
}

// newRouter builds one gateway instance (gw) of strategy name.
func newRouter(name string, env *routerEnv, gw int) (Router, error) {
	f := env.f
	n := len(f.Engines)
	seed := env.seed + uint64(gw)*0x9e3779b97f4a7c15
	switch name {
	case StrategyRoundRobin:
		// Each gateway starts at its own replica, as independent
		// instances do; in lockstep they would send bursts to one.
		return &roundRobin{n: n, next: gw % n}, nil
	case StrategyRandom:
		return &randomRouter{n: n, rng: rand.New(rand.NewPCG(seed, 0x7261_6e64))}, nil
	case StrategyLeastLoaded:
		return &leastLoaded{f: f}, nil
	case StrategyConsistentHash:
		return &consistentHash{n: n, rr: roundRobin{n: n}}, nil
	case StrategyLongestMatch:
		return &longestMatch{f: f}, nil
	case StrategyOracle:
		return &oracle{f: f}, nil
	case StrategyDynamo, StrategyDynamoSync, StrategyDynamoSyncNATS:
		r := newDynamo(n, env.view, seed)
		if env.dsync != nil {
			env.dsync.join(r)
		}
		return r, nil
	case StrategyLLMD:
		return newLLMD(f, seed), nil
	case StrategySGLang:
		return newSGLang(n), nil
	case StrategyLookupRouteV1, StrategyLookupRouteV2:
		return newLookupRouter(f, env.cl, env.stats), nil
	case StrategyLookupRouteSDK, StrategyLookupRouteSDKLocal:
		return newCoreRouter(env, gw, seed, nil)
	case StrategyPickerIndexer:
		return newCoreRouter(env, gw, seed, &indexerHints{f: f, view: env.view})
	}
	return nil, fmt.Errorf("bench: unknown strategy %q (want one of %v)", name, AllStrategies)
}
