package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// Strategy names (SPEC 12).
const (
	StrategyRoundRobin     = "round-robin"
	StrategyRandom         = "random"
	StrategyLeastLoaded    = "least-loaded"
	StrategyConsistentHash = "consistent-hash"
	StrategyLookupRouteV1  = "lookuproute-v1"
	StrategyLookupRouteV2  = "lookuproute-v2"
	StrategyOracle         = "oracle"
)

// AllStrategies lists every strategy in report order.
var AllStrategies = []string{StrategyRoundRobin, StrategyRandom, StrategyLeastLoaded, StrategyConsistentHash,
	StrategyLookupRouteV1, StrategyLookupRouteV2, StrategyOracle}

// UsesCluster reports whether the strategy asks the cluster for hints.
func UsesCluster(name string) bool {
	return name == StrategyLookupRouteV1 || name == StrategyLookupRouteV2
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

// oracle sees every engine's true cache: the longest cached leading run
// wins; ties go to the least loaded (requests in flight, then prefill
// backlog), then the lower id.
type oracle struct{ f *Fleet }

func (r *oracle) Route(_ context.Context, _ int, q *Request, t float64) int {
	return OracleChoice(r.f, q, t)
}

// OracleChoice is the oracle's pick for request q at virtual time t.
func OracleChoice(f *Fleet, q *Request, t float64) int {
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
	f       *Fleet
	cl      *client.Client
	engine  map[string]int
	rr      roundRobin
	toks    []uint32
	req     pb.LookupRouteRequest
	lat     []float64 // µs, gateway side
	reasons map[string]int64
	unknown int64 // hints naming a replica outside the fleet
}

func newLookupRouter(f *Fleet, cl *client.Client) *lookupRouter {
	r := &lookupRouter{f: f, cl: cl, engine: map[string]int{}, rr: roundRobin{n: len(f.Engines)}, reasons: map[string]int64{}}
	for i := range f.Engines {
		r.engine[f.ReplicaID(i)] = i
	}
	return r
}

func (r *lookupRouter) Route(ctx context.Context, i int, q *Request, t float64) int {
	r.toks = AppendPromptTokens(r.toks[:0], q)
	r.req = pb.LookupRouteRequest{TokenIds: r.toks, ModelId: r.f.Model, TenantId: BenchTenant, HashScheme: BenchScheme}
	start := time.Now()
	resp := r.cl.LookupRoute(ctx, &r.req)
	r.lat = append(r.lat, float64(time.Since(start).Nanoseconds())/1e3)
	rc := resp.GetReasonCode()
	r.reasons[rc.String()]++
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

// newRouter builds the router of a strategy that does not use the
// cluster.
func newRouter(name string, f *Fleet, seed uint64) (Router, error) {
	n := len(f.Engines)
	switch name {
	case StrategyRoundRobin:
		return &roundRobin{n: n}, nil
	case StrategyRandom:
		return &randomRouter{n: n, rng: rand.New(rand.NewPCG(seed, 0x7261_6e64))}, nil
	case StrategyLeastLoaded:
		return &leastLoaded{f: f}, nil
	case StrategyConsistentHash:
		return &consistentHash{n: n, rr: roundRobin{n: n}}, nil
	case StrategyOracle:
		return &oracle{f: f}, nil
	}
	return nil, fmt.Errorf("bench: unknown strategy %q (want one of %v)", name, AllStrategies)
}
