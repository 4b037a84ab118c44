package provisional

import (
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// FromPB converts a SharePicksRequest (no validation: Apply validates).
// The slices of req are shared, not copied (Apply copies what it keeps).
func FromPB(req *pb.SharePicksRequest) Push {
	p := Push{PickerID: req.GetPickerId(), Sequence: req.GetSequence(), Full: req.GetFullState(), Removed: req.GetRemoved(), Prefilled: req.GetPrefilled()}
	if n := len(req.GetPicks()); n > 0 {
		p.Picks = make([]Pick, n)
		for i, k := range req.GetPicks() {
			p.Picks[i] = Pick{ID: k.GetPickId(), Replica: k.GetReplicaId(),
				Partition: Partition{Scheme: k.GetHashScheme(), Model: k.GetModelId(), Tenant: k.GetTenantId(), Adapter: k.GetAdapterId()},
				Hashes:    k.GetBlockHashes(), Counts: k.GetBlockTokenCounts(),
				Age: time.Duration(k.GetAgeMs()) * time.Millisecond, MaxAge: time.Duration(k.GetMaxAgeMs()) * time.Millisecond,
				CachedTokens: k.GetCachedTokens(), Prefilled: k.GetPrefilled()}
		}
	}
	return p
}

// ToPB converts a Push to its wire form (ages and max ages in whole
// milliseconds; the push's own Age is the sender node's business and not
// sent). The slices of p are shared.
func ToPB(p *Push) *pb.SharePicksRequest {
	out := &pb.SharePicksRequest{PickerId: p.PickerID, Sequence: p.Sequence, FullState: p.Full, Removed: p.Removed, Prefilled: p.Prefilled}
	if n := len(p.Picks); n > 0 {
		slab := make([]pb.ProvisionalPick, n)
		out.Picks = make([]*pb.ProvisionalPick, n)
		for i := range p.Picks {
			k := &p.Picks[i]
			slab[i] = pb.ProvisionalPick{PickId: k.ID, ReplicaId: k.Replica, HashScheme: k.Partition.Scheme, ModelId: k.Partition.Model,
				TenantId: k.Partition.Tenant, AdapterId: k.Partition.Adapter, BlockHashes: k.Hashes, BlockTokenCounts: k.Counts,
				AgeMs: uint32(min(k.Age.Milliseconds(), 1<<31)), MaxAgeMs: uint32(k.MaxAge.Milliseconds()),
				CachedTokens: k.CachedTokens, Prefilled: k.Prefilled}
			out.Picks[i] = &slab[i]
		}
	}
	return out
}
