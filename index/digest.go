package index

import (
	"math"
	"math/bits"
	"sort"

	"github.com/zeebo/xxh3"

	"github.com/inference-cache/inference-cache/policy"
)

// The digest is a wrapping sum of per-entry hashes, so it is independent of
// the order entries were inserted in or are iterated in, and it can be kept
// up to date incrementally (subtract the old contribution, add the new one)
// instead of being recomputed by a scan of 10 M residencies.

// Domain tags keep a block's contribution from ever cancelling a residency's
// or a stats record's.
const (
	tagBlock     = 0x62_6c_6f_63_6b_00_00_01
	tagResidency = 0x72_65_73_69_64_00_00_02
	tagStats     = 0x73_74_61_74_73_00_00_03
	tagPolicy    = 0x70_6f_6c_69_63_79_00_04
)

// fmix64 is the murmur3 finalizer: a fast bijective 64-bit mixer.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// mix2 combines two words; not symmetric, so (a,b) and (b,a) differ.
func mix2(a, b uint64) uint64 {
	return fmix64(fmix64(a^0x9e3779b97f4a7c15) ^ bits.RotateLeft64(b, 29) ^ b*0xbf58476d1ce4e5b9)
}

func strHash(s string) uint64 { return xxh3.HashString(s) }

// partitionHash identifies a partition by its four strings; the length
// prefix keeps ("ab","c") and ("a","bc") apart.
func partitionHash(p Partition) uint64 {
	h := uint64(0x706172746974696f)
	for _, s := range [...]string{p.Scheme, p.Model, p.Tenant, p.Adapter} {
		h = mix2(h, uint64(len(s)))
		h = mix2(h, strHash(s))
	}
	return h
}

func blockDigest(partH, hash uint64, tokens, cum, access uint32) uint64 {
	h := mix2(tagBlock, partH)
	h = mix2(h, hash)
	h = mix2(h, uint64(tokens)<<32|uint64(cum))
	return mix2(h, uint64(access))
}

func residencyDigest(partH, hash, repH uint64, lastSeen int64) uint64 {
	h := mix2(tagResidency, partH)
	h = mix2(h, hash)
	h = mix2(h, repH)
	return mix2(h, uint64(lastSeen))
}

func statsDigest(s *ReplicaStats) uint64 {
	h := mix2(tagStats, strHash(s.ReplicaID))
	h = mix2(h, strHash(s.ModelID))
	h = mix2(h, uint64(len(s.HashSchemes)))
	for _, sc := range s.HashSchemes {
		h = mix2(h, strHash(sc))
	}
	h = mix2(h, math.Float64bits(s.Pressure))
	var tenants uint64 // order-independent over the map
	for t, r := range s.TenantHitRate {
		tenants += mix2(strHash(t), math.Float64bits(r))
	}
	h = mix2(h, tenants)
	h = mix2(h, uint64(s.ObservedAtMs))
	h = mix2(h, strHash(s.Endpoint))
	if s.WaitingRequests != 0 || s.RunningRequests != 0 {
		// Only when set: stats without a queue digest as they did before
		// the fields existed, so older snapshots and backups still verify.
		h = mix2(h, uint64(s.WaitingRequests)<<32|uint64(s.RunningRequests))
	}
	return h
}

func policyDigest(p *policy.Policy) uint64 {
	h := uint64(tagPolicy)
	b2u := func(b bool) uint64 {
		if b {
			return 1
		}
		return 0
	}
	for _, v := range [...]uint64{
		b2u(p.ChainMatching), uint64(p.MinimumMatchedTokens), strHash(p.RoutingFloorScore),
		uint64(p.LookupTimeout), uint64(p.EvictionTTL), strHash(string(p.EvictionPolicy)),
		p.MaxResidencies, math.Float64bits(p.PressureWeight), uint64(p.SLOTightThreshold),
		math.Float64bits(p.SLOTightBias), b2u(p.EnableTenantHot), math.Float64bits(p.TenantHotMinHitRate),
		uint64(p.StatsFreshness), b2u(p.AffinityRouting), uint64(p.MaxReplicas),
		strHash(string(p.RankingVersion)), uint64(p.MaxStaleness), p.Version,
	} {
		h = mix2(h, v)
	}
	if p.EvictionBatch != 0 {
		// Only when set: a policy without the knob digests as it did
		// before it existed (backups of older releases still verify).
		h = mix2(h, 0xeb<<32|uint64(p.EvictionBatch))
	}
	models := make([]string, 0, len(p.BlockSize))
	for m := range p.BlockSize {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		h = mix2(h, strHash(m))
		h = mix2(h, uint64(p.BlockSize[m]))
	}
	return h
}
