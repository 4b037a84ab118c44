package bench

import (
	"context"
	"math"
	"time"

	"github.com/inference-cache/inference-cache/client"
)

// replay is one strategy's run over the trace: a fresh fleet, the
// strategy's routers (one per gateway), and for the hint strategies the
// cluster's observation of the engines (the subscriber fed by their KV
// events and metrics).
type replay struct {
	cfg  *Config
	name string
	cl   *client.Client
	f    *Fleet
	env  *routerEnv
	obs  *observation // nil for strategies that do not ask the cluster
	g    *gateways
	res  *Result

	// waiting are the lookups waiting for their turn at the node, in the
	// order they came (resume).
	waiting    []*waiting
	changed    []string // engines whose metrics changed at this request's tick
	lastScrape float64
	ttft       []float64
	sumTTFT    float64
	failOpen0  int64
}

// runStrategy replays the whole trace with one strategy on a fresh fleet.
func runStrategy(ctx context.Context, cfg *Config, name string, cl *client.Client, ideal float64) (*Result, error) {
	rp, err := newReplay(ctx, cfg, name, cl)
	if err != nil {
		return nil, err
	}
	if rp.obs != nil {
		defer rp.obs.stop()
	}
	start := time.Now()
	reqs := cfg.Trace.Requests
	for i := range reqs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t := float64(reqs[i].Timestamp-reqs[0].Timestamp) / 1000
		if err := rp.resume(ctx, t); err != nil {
			return nil, err
		}
		if err := rp.step(ctx, i, &reqs[i], t); err != nil {
			return nil, err
		}
		if cfg.Progress != nil && (i%64 == 63 || i == len(reqs)-1) {
			cfg.Progress(name, i+1, len(reqs))
		}
	}
	if err := rp.resume(ctx, math.Inf(1)); err != nil {
		return nil, err
	}
	rp.drain(ctx)
	rp.res.Wall = time.Since(start)
	rp.summarise(ideal)
	return rp.res, nil
}

// newReplay builds the fleet, the strategy's routers and, for a strategy
// that asks the cluster, its policy and the observation of the engines.
func newReplay(ctx context.Context, cfg *Config, name string, cl *client.Client) (*replay, error) {
	f := NewFleet(cfg.Fleet, BenchModel, "bench-")
	rp := &replay{cfg: cfg, name: name, cl: cl, f: f, lastScrape: math.Inf(-1),
		res:  &Result{Name: name, ReasonCodes: map[string]int64{}},
		ttft: make([]float64, 0, len(cfg.Trace.Requests))}
	rp.env = &routerEnv{f: f, view: NewIndexerView(len(f.Engines)), cl: cl, stats: newLookupStats(), seed: cfg.Seed,
		picker: client.DefaultPickerConfig(), lookupBudget: cfg.LookupTimeout, noProvisional: cfg.NoProvisional}
	if cfg.Picker != nil {
		rp.env.picker = *cfg.Picker
	}
	if UsesCluster(name) {
		desc, err := strategyPolicy(ctx, cl, cfg, name, f.Model)
		if err != nil {
			return nil, err
		}
		rp.res.Policy = desc
		if rp.obs, err = startObservation(ctx, f, cfg.Addrs, cfg.Client, cfg.Encoding, cfg.SubscriberScrape, cfg.Seed, cfg.Logger); err != nil {
			return nil, err
		}
		rp.failOpen0 = int64(cl.Stats().FailOpen)
	}
	if err := rp.newGateways(); err != nil {
		if rp.obs != nil {
			rp.obs.stop()
		}
		return nil, err
	}
	return rp, nil
}

// newGateways builds the strategy's routers: one per gateway for a
// per-gateway strategy, sharing what the strategy shares between them
// (the cluster's soft state, or dynamo's replica sync).
func (rp *replay) newGateways() error {
	cfg, name, env := rp.cfg, rp.name, rp.env
	n := 1
	if PerGateway(name) {
		n = cfg.Gateways
	}
	rp.res.GatewaysShared = SharesLoad(name) && cfg.Gateways > 1
	switch {
	case !rp.res.GatewaysShared:
	case name == StrategyDynamoSync:
		env.dsync = newDynamoSync(0)
	case name == StrategyDynamoSyncNATS:
		env.dsync = newDynamoSync(cfg.DynamoSyncDelay)
	default:
		env.shared = newSharedState(cfg.ShareDelay, cfg.ReportInterval, cfg.TurnWait, cfg.Seed)
	}
	rp.g = &gateways{}
	for k := 0; k < n; k++ {
		r, err := newRouter(name, env, k)
		if err != nil {
			return err
		}
		rp.g.rs = append(rp.g.rs, r)
	}
	return nil
}

// step replays request i (q) arriving at virtual time t: the cluster
// brought up to t (prepare), then its lookup's turn at the node for a
// gateway that takes turns (askTurn: a lookup that waits is decided when
// its wait ends, by resume), then the strategy's route and the engine's
// service (serve).
func (rp *replay) step(ctx context.Context, i int, q *Request, t float64) error {
	if err := rp.prepare(ctx, i, q, t); err != nil {
		return err
	}
	if r, ok := rp.g.of(i).(*coreRouter); ok && r.takesTurns() && !rp.askTurn(r, i, q, t) {
		return nil
	}
	rp.serve(ctx, i, q, t)
	return nil
}

// prepare brings what request i's (q) route reads up to virtual time t: the
// engines' metrics of the tick, the KV events visible by then, and the
// cluster's copy of both (syncCluster).
func (rp *replay) prepare(ctx context.Context, i int, q *Request, t float64) error {
	f := rp.f
	rp.changed = rp.changed[:0]
	every := rp.cfg.ScrapeInterval.Seconds()
	if tick := math.Floor(t/every) * every; tick > rp.lastScrape {
		// The first tick syncs every engine, changed or not: until then
		// the cluster holds what the subscriber last scraped in wall
		// time (nothing yet, or the previous strategy's engines), and
		// whether a lookup saw that would follow the wall clock.
		first := math.IsInf(rp.lastScrape, -1)
		rp.lastScrape = tick
		for k, e := range f.Engines {
			if e.Scrape(tick) || first {
				rp.changed = append(rp.changed, f.ReplicaID(k))
			}
		}
	}
	vis := rp.cfg.visible(t)
	for k, e := range f.Engines {
		e.Release(vis, func(ev *KVEvent) {
			rp.env.view.Apply(k, ev)
			if rp.obs != nil {
				rp.obs.publish(k, ev)
			}
		})
	}
	return rp.syncCluster(ctx, i, q)
}

// serve routes request i (q) at virtual time t, its decision's instant,
// and serves it on the engine picked: its TTFT counts from its arrival,
// so a lookup's wait for its turn is added.
func (rp *replay) serve(ctx context.Context, i int, q *Request, t float64) {
	e := rp.g.Route(ctx, i, q, t)
	s := rp.f.Engines[e].Serve(q, t)
	rp.g.Routed(q, e, &s)
	rp.res.PromptTokens += int64(q.InputLength)
	rp.res.CachedTokens += int64(s.CachedTokens)
	ttft := s.TTFTS + s.LookupWaitS
	rp.ttft = append(rp.ttft, ttft*1000)
	rp.sumTTFT += ttft * 1000
}

// syncCluster waits, for a strategy that asks the cluster, until the
// cluster holds the KV events request i's lookup must see (a visibility
// barrier) and the engine metrics of this tick (syncStats). Only the
// replay's own cancellation is an error; a barrier that times out is
// counted and logged.
func (rp *replay) syncCluster(ctx context.Context, i int, q *Request) error {
	res, obs := rp.res, rp.obs
	if obs != nil && obs.needsBarrier(q.HashIDs) {
		bs := time.Now()
		res.Barriers++
		if err := obs.barrier(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res.BarrierTimeouts++
			rp.cfg.Logger.Warn("visibility barrier", "request", i, "err", err)
		}
		res.BarrierWall += time.Since(bs)
	}
	// Every hint strategy reads the engines' stats the cluster holds
	// (pressure, the tenant's hit rate behind TENANT_HOT, the queue the
	// picker reads), so the subscriber scrapes at every tick of virtual
	// time, as llm-d's refresh does. At its wall-time interval they would
	// be seconds stale under the replay's compression, and which tick's
	// metrics a lookup saw would follow the wall clock.
	if obs != nil && len(rp.changed) > 0 {
		bs := time.Now()
		res.StatsSyncs++
		if err := obs.syncStats(ctx, rp.changed); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res.BarrierTimeouts++
			rp.cfg.Logger.Warn("stats sync", "request", i, "err", err)
		}
		res.StatsSyncWall += time.Since(bs)
	}
	return nil
}

// drain publishes the engines' last events and waits for the cluster to
// apply them, so that nothing of this run reaches the cluster after the
// next run cleared the fleet's replicas.
func (rp *replay) drain(ctx context.Context) {
	obs := rp.obs
	if obs == nil {
		return
	}
	for k, e := range rp.f.Engines {
		e.Release(func(float64) bool { return true }, func(ev *KVEvent) { obs.publish(k, ev) })
	}
	if err := obs.barrier(ctx); err != nil {
		rp.res.BarrierTimeouts++
	}
	for _, n := range obs.published {
		rp.res.Published += n
	}
}

// summarise fills the result's figures: the hit rate (and its fraction of
// ideal), the requests' spread over the engines, the TTFT percentiles and,
// for a strategy that asks the cluster, what its lookups saw.
func (rp *replay) summarise(ideal float64) {
	res, f := rp.res, rp.f
	if res.PromptTokens > 0 {
		res.TokenHitRate = float64(res.CachedTokens) / float64(res.PromptTokens)
	}
	if ideal > 0 {
		res.FractionOfIdeal = res.TokenHitRate / ideal
	}
	var maxReq, sum int64
	for _, e := range f.Engines {
		n := e.Requests()
		res.PerEngine = append(res.PerEngine, n)
		maxReq = max(maxReq, n)
		sum += n
	}
	if sum > 0 {
		res.MaxOverMeanRequests = float64(maxReq) / (float64(sum) / float64(len(f.Engines)))
	}
	ttft := rp.ttft
	res.TTFTModelP50Ms, res.TTFTModelP90Ms, res.TTFTModelP99Ms = Percentile(ttft, 0.50), Percentile(ttft, 0.90), Percentile(ttft, 0.99)
	res.TTFTModelMeanMs = rp.sumTTFT / float64(len(ttft))
	res.TTFTMs = ttft
	if UsesCluster(rp.name) {
		st := rp.env.stats
		res.LookupP50Us, res.LookupP99Us = Percentile(st.lat, 0.50), Percentile(st.lat, 0.99)
		res.ReasonCodes = st.reasons
		res.UnknownReplica = st.unknown
		res.FailOpen = int64(rp.cl.Stats().FailOpen) - rp.failOpen0
	}
}
