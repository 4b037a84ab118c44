package bench

import (
	"slices"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

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
