package bench

import (
	"context"
	"slices"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// sdkRouter is lookuproute-sdk: v2 hints for every engine (max_replicas =
// the fleet size) and the SDK's load-aware client.Picker, knowing only
// what a gateway knows: the hints, its candidates, and the start, first
// token and end of the requests it sent itself.
type sdkRouter struct {
	*lookupRouter
	picker     *client.Picker
	candidates []string
	due        due[sdkDue] // in flight, by the next due time
	last       client.Decision
	hints      *indexerHints // the picker-indexer ablation; nil = ask the cluster
}

// sdkDue is a request in flight: its first token is due, or (first
// false) its end.
type sdkDue struct {
	first   bool
	doneAt  float64
	request *client.Inflight
}

func newSDKRouter(f *Fleet, cl *client.Client, st *lookupStats, seed uint64) *sdkRouter {
	pc := client.DefaultPickerConfig()
	pc.Seed = seed | 1
	r := &sdkRouter{lookupRouter: newLookupRouter(f, cl, st), picker: client.NewPicker(pc)}
	for i := range f.Engines {
		r.candidates = append(r.candidates, f.ReplicaID(i))
	}
	return r
}

func (r *sdkRouter) Route(ctx context.Context, _ int, q *Request, t float64) int {
	r.due.until(t, func(x sdkDue) {
		if x.first {
			x.request.FirstToken()
			r.due.push(x.doneAt, sdkDue{request: x.request})
			return
		}
		x.request.Done()
	})
	var resp *pb.LookupRouteResponse
	if r.hints != nil {
		resp = r.hints.respond(q)
	} else {
		resp = r.lookup(ctx, q, uint32(len(r.candidates)), true)
	}
	r.last = r.picker.Pick(resp, r.candidates, q.InputLength)
	return r.last.Index
}

func (r *sdkRouter) Routed(_ *Request, e int, s *Served) {
	if e != r.last.Index {
		return
	}
	req := r.picker.Start(&r.last)
	r.due.push(s.FirstTokenAt, sdkDue{first: true, doneAt: s.DoneAt, request: req})
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
