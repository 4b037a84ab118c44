package client

import (
	"math"
	"slices"
	"strings"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// InFlight returns what this picker has in flight per replica, as a load
// report lists it (contract §5.11): for each replica with any request
// not done, the requests before their first token, their uncached prompt
// tokens (rounded), and the requests before done; replica id ascending.
// Replicas with nothing in flight are left out (a report replaces the
// previous one whole, so leaving a replica out reports zero there).
func (p *Picker) InFlight() []*pb.PickerReplicaLoad {
	p.mu.Lock()
	out := make([]*pb.PickerReplicaLoad, 0, len(p.replicas))
	for id, l := range p.replicas {
		if l.inflight <= 0 && l.prefilling <= 0 && l.queuedTokens <= 0 {
			continue
		}
		out = append(out, &pb.PickerReplicaLoad{ReplicaId: id, PrefillingRequests: uint32(max(0, l.prefilling)),
			PrefillTokens: uint64(math.Round(max(0, l.queuedTokens))), RunningRequests: uint32(max(0, l.inflight))})
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b *pb.PickerReplicaLoad) int { return strings.Compare(a.ReplicaId, b.ReplicaId) })
	return out
}
