package fsmpb

// Hand-written conversions between the log encoding and the index/policy
// types. They sort map keys so equal values always encode to equal bytes.

import (
	"sort"
	"time"

	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// PartitionToPB converts an index.Partition.
func PartitionToPB(p index.Partition) *Partition {
	return &Partition{Scheme: p.Scheme, Model: p.Model, Tenant: p.Tenant, Adapter: p.Adapter}
}

// PartitionFromPB converts back; nil is the zero partition.
func PartitionFromPB(p *Partition) index.Partition {
	if p == nil {
		return index.Partition{}
	}
	return index.Partition{Scheme: p.Scheme, Model: p.Model, Tenant: p.Tenant, Adapter: p.Adapter}
}

// EventsToPB converts block events.
func EventsToPB(evs []index.BlockEvent) []*BlockEvent {
	out := make([]*BlockEvent, len(evs))
	for i := range evs {
		e := &evs[i]
		out[i] = &BlockEvent{
			Kind:               uint32(e.Kind),
			ReplicaId:          e.ReplicaID,
			Partition:          PartitionToPB(e.Partition),
			BlockHashes:        e.BlockHashes,
			BlockTokenCounts:   e.BlockTokenCounts,
			PrefixTokensBefore: e.PrefixTokensBefore,
			ObservedAtMs:       e.ObservedAtMs,
		}
	}
	return out
}

// EventsFromPB converts block events back.
func EventsFromPB(evs []*BlockEvent) []index.BlockEvent {
	out := make([]index.BlockEvent, len(evs))
	for i, e := range evs {
		out[i] = index.BlockEvent{
			Kind:               index.EventKind(e.GetKind()),
			ReplicaID:          e.GetReplicaId(),
			Partition:          PartitionFromPB(e.GetPartition()),
			BlockHashes:        e.GetBlockHashes(),
			BlockTokenCounts:   e.GetBlockTokenCounts(),
			PrefixTokensBefore: e.GetPrefixTokensBefore(),
			ObservedAtMs:       e.GetObservedAtMs(),
		}
	}
	return out
}

// StatsToPB converts one replica's stats; tenants are sorted.
func StatsToPB(s index.ReplicaStats) *ReplicaStats {
	tenants := make([]string, 0, len(s.TenantHitRate))
	for t := range s.TenantHitRate {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	rates := make([]float64, len(tenants))
	for i, t := range tenants {
		rates[i] = s.TenantHitRate[t]
	}
	return &ReplicaStats{
		ReplicaId: s.ReplicaID, ModelId: s.ModelID, HashSchemes: s.HashSchemes,
		Pressure: s.Pressure, Tenants: tenants, HitRates: rates,
		ObservedAtMs: s.ObservedAtMs, Endpoint: s.Endpoint,
		WaitingRequests: s.WaitingRequests, RunningRequests: s.RunningRequests,
	}
}

// StatsFromPB converts back. Mismatched tenant/rate arrays keep the common
// prefix; a record written before the queue fields existed has a queue of
// 0.
func StatsFromPB(s *ReplicaStats) index.ReplicaStats {
	n := min(len(s.GetTenants()), len(s.GetHitRates()))
	m := make(map[string]float64, n)
	for i := 0; i < n; i++ {
		m[s.Tenants[i]] = s.HitRates[i]
	}
	return index.ReplicaStats{
		ReplicaID: s.GetReplicaId(), ModelID: s.GetModelId(), HashSchemes: s.GetHashSchemes(),
		Pressure: s.GetPressure(), TenantHitRate: m, ObservedAtMs: s.GetObservedAtMs(),
		Endpoint: s.GetEndpoint(), WaitingRequests: s.GetWaitingRequests(), RunningRequests: s.GetRunningRequests(),
	}
}

// PolicyToPB converts a policy; BlockSize is sorted by model id.
func PolicyToPB(p policy.Policy) *Policy {
	models := make([]string, 0, len(p.BlockSize))
	for m := range p.BlockSize {
		models = append(models, m)
	}
	sort.Strings(models)
	sizes := make([]uint32, len(models))
	for i, m := range models {
		sizes[i] = p.BlockSize[m]
	}
	return &Policy{
		ChainMatching:        p.ChainMatching,
		MinimumMatchedTokens: p.MinimumMatchedTokens,
		RoutingFloorScore:    p.RoutingFloorScore,
		LookupTimeoutNs:      int64(p.LookupTimeout),
		EvictionTtlNs:        int64(p.EvictionTTL),
		EvictionPolicy:       string(p.EvictionPolicy),
		MaxResidencies:       p.MaxResidencies,
		PressureWeight:       p.PressureWeight,
		SloTightThresholdNs:  int64(p.SLOTightThreshold),
		SloTightBias:         p.SLOTightBias,
		EnableTenantHot:      p.EnableTenantHot,
		TenantHotMinHitRate:  p.TenantHotMinHitRate,
		StatsFreshnessNs:     int64(p.StatsFreshness),
		AffinityRouting:      p.AffinityRouting,
		MaxReplicas:          p.MaxReplicas,
		RankingVersion:       string(p.RankingVersion),
		BlockSizeModels:      models,
		BlockSizeValues:      sizes,
		MaxStalenessNs:       int64(p.MaxStaleness),
		Version:              p.Version,
		EvictionBatch:        p.EvictionBatch,
	}
}

// PolicyFromPB converts back.
func PolicyFromPB(q *Policy) policy.Policy {
	n := min(len(q.GetBlockSizeModels()), len(q.GetBlockSizeValues()))
	bs := make(map[string]uint32, n)
	for i := 0; i < n; i++ {
		bs[q.BlockSizeModels[i]] = q.BlockSizeValues[i]
	}
	return policy.Policy{
		ChainMatching:        q.GetChainMatching(),
		MinimumMatchedTokens: q.GetMinimumMatchedTokens(),
		RoutingFloorScore:    q.GetRoutingFloorScore(),
		LookupTimeout:        time.Duration(q.GetLookupTimeoutNs()),
		EvictionTTL:          time.Duration(q.GetEvictionTtlNs()),
		EvictionPolicy:       policy.EvictionPolicy(q.GetEvictionPolicy()),
		MaxResidencies:       q.GetMaxResidencies(),
		PressureWeight:       q.GetPressureWeight(),
		SLOTightThreshold:    time.Duration(q.GetSloTightThresholdNs()),
		SLOTightBias:         q.GetSloTightBias(),
		EnableTenantHot:      q.GetEnableTenantHot(),
		TenantHotMinHitRate:  q.GetTenantHotMinHitRate(),
		StatsFreshness:       time.Duration(q.GetStatsFreshnessNs()),
		AffinityRouting:      q.GetAffinityRouting(),
		MaxReplicas:          q.GetMaxReplicas(),
		RankingVersion:       policy.RankingVersion(q.GetRankingVersion()),
		BlockSize:            bs,
		MaxStaleness:         time.Duration(q.GetMaxStalenessNs()),
		Version:              q.GetVersion(),
		EvictionBatch:        q.GetEvictionBatch(),
	}
}
