package bench

import (
	"context"
	"math"
	"slices"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// sdkRouter is lookuproute-sdk: v2 hints for every engine (max_replicas =
// the fleet size) and the SDK's load-aware client.Picker, knowing what a
// gateway knows: the hints, its candidates, the start, first token and
// end of the requests it sent itself and, when its gateways share load
// (shared non-nil), the other gateways' latest in-flight reports in each
// response's ReplicaLoad.others_* (contract §5.10).
type sdkRouter struct {
	*lookupRouter
	picker     *client.Picker
	candidates []string
	due        due[sdkDue] // in flight, by the next due time
	last       client.Decision
	hints      *indexerHints // the picker-indexer ablation; nil = ask the cluster
	gw         int
	shared     *sharedLoad
	own        []inflightLoad // what this gateway has in flight, per engine
}

// sdkDue is a request in flight: its first token is due, or (first
// false) its end.
type sdkDue struct {
	first    bool
	doneAt   float64
	engine   int
	uncached float64
	request  *client.Inflight
}

// inflightLoad is one gateway's in-flight load on one engine, as a
// picker reports it (ReportPickerLoad): requests before their first
// token, their uncached prompt tokens, requests before done.
type inflightLoad struct {
	prefilling    int
	prefillTokens float64
	running       int
}

// sharedLoad models the pickers' shared in-flight load in virtual time:
// every gateway reports what it has in flight per engine at each tick of
// the report interval, and a lookup's ReplicaLoad.others_* carry the sum
// of the other gateways' latest reports, as the cluster answers a lookup
// with picker_id set.
type sharedLoad struct {
	every    float64 // report interval, virtual seconds
	lastTick float64
	routers  []*sdkRouter
	reports  [][]inflightLoad // per gateway, per engine: its latest report
}

func newSharedLoad(every time.Duration) *sharedLoad {
	return &sharedLoad{every: every.Seconds(), lastTick: math.Inf(-1)}
}

// tick takes every gateway's report at the latest report tick at or
// before t (each gateway's due events up to that tick applied first).
func (s *sharedLoad) tick(t float64) {
	tick := math.Floor(t/s.every) * s.every
	if tick <= s.lastTick {
		return
	}
	s.lastTick = tick
	for k, r := range s.routers {
		r.advance(tick)
		copy(s.reports[k], r.own)
	}
}

// inject sets resp's loads' others_* for gateway gw: the sum of the other
// gateways' latest reports per engine (a load entry is added for an
// engine the response has none for).
func (s *sharedLoad) inject(resp *pb.LookupRouteResponse, f *Fleet, gw int) {
	for e := range f.Engines {
		var sum inflightLoad
		pickers := 0
		for k, rep := range s.reports {
			if k == gw {
				continue
			}
			pickers++
			sum.prefilling += rep[e].prefilling
			sum.prefillTokens += rep[e].prefillTokens
			sum.running += rep[e].running
		}
		id := f.ReplicaID(e)
		var ld *pb.ReplicaLoad
		for _, x := range resp.Loads {
			if x.GetReplicaId() == id {
				ld = x
				break
			}
		}
		if ld == nil {
			ld = &pb.ReplicaLoad{ReplicaId: id}
			resp.Loads = append(resp.Loads, ld)
		}
		ld.OthersPrefillingRequests, ld.OthersPrefillTokens = uint32(sum.prefilling), uint64(math.Round(sum.prefillTokens))
		ld.OthersRunningRequests, ld.OthersPickers = uint32(sum.running), uint32(pickers)
	}
}

func newSDKRouter(f *Fleet, cl *client.Client, st *lookupStats, seed uint64, pc client.PickerConfig) *sdkRouter {
	pc.Seed = seed | 1
	r := &sdkRouter{lookupRouter: newLookupRouter(f, cl, st), picker: client.NewPicker(pc), own: make([]inflightLoad, len(f.Engines))}
	for i := range f.Engines {
		r.candidates = append(r.candidates, f.ReplicaID(i))
	}
	return r
}

// share makes r one of the gateways of s.
func (r *sdkRouter) share(s *sharedLoad, gw int) {
	r.shared, r.gw = s, gw
	s.routers = append(s.routers, r)
	s.reports = append(s.reports, make([]inflightLoad, len(r.own)))
}

// advance applies the first tokens and ends due by t.
func (r *sdkRouter) advance(t float64) {
	r.due.until(t, func(x sdkDue) {
		l := &r.own[x.engine]
		if x.first {
			x.request.FirstToken()
			l.prefilling--
			l.prefillTokens = math.Max(0, l.prefillTokens-x.uncached)
			r.due.push(x.doneAt, sdkDue{engine: x.engine, request: x.request})
			return
		}
		x.request.Done()
		l.running--
	})
}

func (r *sdkRouter) Route(ctx context.Context, _ int, q *Request, t float64) int {
	if r.shared != nil {
		r.shared.tick(t)
	}
	r.advance(t)
	var resp *pb.LookupRouteResponse
	if r.hints != nil {
		resp = r.hints.respond(q)
	} else {
		resp = r.lookup(ctx, q, uint32(len(r.candidates)), true)
	}
	if r.shared != nil {
		if resp == nil {
			resp = &pb.LookupRouteResponse{}
		}
		r.shared.inject(resp, r.f, r.gw)
	}
	r.last = r.picker.Pick(resp, r.candidates, q.InputLength)
	return r.last.Index
}

func (r *sdkRouter) Routed(_ *Request, e int, s *Served) {
	if e != r.last.Index {
		return
	}
	req := r.picker.Start(&r.last)
	u := float64(r.last.Costs[e].UncachedTokens)
	l := &r.own[e]
	l.prefilling++
	l.prefillTokens += u
	l.running++
	r.due.push(s.FirstTokenAt, sdkDue{first: true, doneAt: s.DoneAt, engine: e, uncached: u, request: req})
}

// StrategyPickerIndexer is an ablation, not in AllStrategies: the SDK's
// picker fed by the perfect KV-event indexer (IndexerView, same delay)
// instead of the cluster's hints, with the engines' last scraped queue
// counts on every hint. Beside lookuproute-sdk it shows what the index's
// ranking and filters cost or gain the picker.
const StrategyPickerIndexer = "picker-indexer"

// indexerHints is a LookupRoute response made from the perfect indexer:
// PREFIX_MATCH with every engine holding a leading run of the request's
// blocks, longest first, or NO_HINT; every engine's last scrape in loads.
type indexerHints struct {
	f    *Fleet
	view *IndexerView
}

func (h *indexerHints) respond(q *Request) *pb.LookupRouteResponse {
	resp := &pb.LookupRouteResponse{}
	blocks := q.Blocks()
	for i, e := range h.f.Engines {
		m := e.Metrics()
		resp.Loads = append(resp.Loads, &pb.ReplicaLoad{ReplicaId: h.f.ReplicaID(i),
			WaitingRequests: uint32(m.Waiting), RunningRequests: uint32(m.Running), Pressure: m.KVUsage})
		run := h.view.CachedRun(i, blocks)
		if run == 0 {
			continue
		}
		resp.Replicas = append(resp.Replicas, &pb.ReplicaHint{ReplicaId: h.f.ReplicaID(i),
			MatchedTokens: uint32(min(run*TraceBlockTokens, q.InputLength)), MatchedBlocks: uint32(run),
			WaitingRequests: uint32(m.Waiting), RunningRequests: uint32(m.Running)})
	}
	if len(resp.Replicas) > 0 {
		resp.ReasonCode = pb.ReasonCode_PREFIX_MATCH
		slices.SortStableFunc(resp.Replicas, func(a, b *pb.ReplicaHint) int { return int(b.MatchedTokens) - int(a.MatchedTokens) })
	}
	return resp
}
