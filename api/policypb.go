package api

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/policy"
)

// Spellings of the string-valued CachePolicy knobs on the wire (contract §7.1, §11.4).
const (
	// AffinityEnabled and AffinityDisabled are the values of
	// CachePolicy.affinity_routing.
	AffinityEnabled  = "Enabled"
	AffinityDisabled = "Disabled"
)

// PolicyToPB converts a policy to its wire form (contract §11.4 CachePolicy).
// Durations become the proto's units: lookup_timeout_ms,
// slo_tight_threshold_ms and max_staleness_ms in milliseconds,
// eviction_ttl_seconds and stats_freshness_seconds in whole seconds
// (rounded down).
func PolicyToPB(p policy.Policy) *pb.CachePolicy {
	bs := make(map[string]uint32, len(p.BlockSize))
	for k, v := range p.BlockSize {
		bs[k] = v
	}
	aff := AffinityDisabled
	if p.AffinityRouting {
		aff = AffinityEnabled
	}
	return &pb.CachePolicy{
		ChainMatching:         p.ChainMatching,
		MinimumMatchedTokens:  p.MinimumMatchedTokens,
		RoutingFloorScore:     p.RoutingFloorScore,
		LookupTimeoutMs:       durToU32(p.LookupTimeout, time.Millisecond),
		EvictionTtlSeconds:    durToU32(p.EvictionTTL, time.Second),
		EvictionPolicy:        string(p.EvictionPolicy),
		MaxResidencies:        p.MaxResidencies,
		PressureWeight:        p.PressureWeight,
		SloTightThresholdMs:   durToU32(p.SLOTightThreshold, time.Millisecond),
		SloTightBias:          p.SLOTightBias,
		Strategy:              &pb.Strategy{EnableTenantHot: p.EnableTenantHot},
		TenantHotMinHitRate:   p.TenantHotMinHitRate,
		StatsFreshnessSeconds: durToU32(p.StatsFreshness, time.Second),
		AffinityRouting:       aff,
		MaxReplicas:           p.MaxReplicas,
		RankingVersion:        string(p.RankingVersion),
		BlockSize:             bs,
		MaxStalenessMs:        durToU32(p.MaxStaleness, time.Millisecond),
		Version:               p.Version,
		EvictionBatch:         p.EvictionBatch,
	}
}

func durToU32(d, unit time.Duration) uint32 {
	v := d / unit
	if v < 0 {
		return 0
	}
	if v > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(v)
}

// PolicyFromPB converts a wire CachePolicy to a policy and validates it. The
// message is a whole replacement: a field left at its zero value means zero
// (which most knobs refuse), not "keep the current value". The version is
// ignored (the server sets it). The error is a *policy.FieldError naming
// the message's field and its value as sent (block_size["m"],
// lookup_timeout_ms=0) and the rule. A policy from a user must also meet
// policy.CheckInput (see SetCachePolicy); one the cluster holds needs
// only this.
func PolicyFromPB(q *pb.CachePolicy) (policy.Policy, error) {
	if q == nil {
		return policy.Policy{}, &policy.FieldError{Field: "policy", Value: "", Reason: "is missing"}
	}
	var aff bool
	switch q.GetAffinityRouting() {
	case AffinityEnabled:
		aff = true
	case AffinityDisabled:
		aff = false
	default:
		return policy.Policy{}, &policy.FieldError{Field: "affinity_routing", Value: q.GetAffinityRouting(), Reason: "must be Enabled or Disabled"}
	}
	bs := make(map[string]uint32, len(q.GetBlockSize()))
	for k, v := range q.GetBlockSize() {
		bs[k] = v
	}
	p := policy.Policy{
		ChainMatching:        q.GetChainMatching(),
		MinimumMatchedTokens: q.GetMinimumMatchedTokens(),
		RoutingFloorScore:    q.GetRoutingFloorScore(),
		LookupTimeout:        time.Duration(q.GetLookupTimeoutMs()) * time.Millisecond,
		EvictionTTL:          time.Duration(q.GetEvictionTtlSeconds()) * time.Second,
		EvictionPolicy:       policy.EvictionPolicy(q.GetEvictionPolicy()),
		MaxResidencies:       q.GetMaxResidencies(),
		PressureWeight:       q.GetPressureWeight(),
		SLOTightThreshold:    time.Duration(q.GetSloTightThresholdMs()) * time.Millisecond,
		SLOTightBias:         q.GetSloTightBias(),
		EnableTenantHot:      q.GetStrategy().GetEnableTenantHot(),
		TenantHotMinHitRate:  q.GetTenantHotMinHitRate(),
		StatsFreshness:       time.Duration(q.GetStatsFreshnessSeconds()) * time.Second,
		AffinityRouting:      aff,
		MaxReplicas:          q.GetMaxReplicas(),
		RankingVersion:       policy.RankingVersion(q.GetRankingVersion()),
		BlockSize:            bs,
		MaxStaleness:         time.Duration(q.GetMaxStalenessMs()) * time.Millisecond,
		EvictionBatch:        q.GetEvictionBatch(),
	}
	if err := p.Validate(); err != nil {
		return policy.Policy{}, wireField(err, q)
	}
	return p, nil
}

// wireField is err with a *policy.FieldError's knob and value as the
// CachePolicy message carries them (contract §9.4: the field as the user
// wrote it): lookupTimeoutMs="0s" becomes lookup_timeout_ms=0,
// blockSize.m becomes block_size["m"]. Other errors are returned as they
// are.
func wireField(err error, q *pb.CachePolicy) error {
	var fe *policy.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	u := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	out := *fe
	switch fe.Field {
	case "lookupTimeoutMs":
		out.Field, out.Value = "lookup_timeout_ms", u(q.GetLookupTimeoutMs())
	case "evictionTTL":
		out.Field, out.Value = "eviction_ttl_seconds", u(q.GetEvictionTtlSeconds())
	case "sloTightThresholdMs":
		out.Field, out.Value = "slo_tight_threshold_ms", u(q.GetSloTightThresholdMs())
	case "statsFreshness":
		out.Field, out.Value = "stats_freshness_seconds", u(q.GetStatsFreshnessSeconds())
	case "maxStalenessMs":
		out.Field, out.Value = "max_staleness_ms", u(q.GetMaxStalenessMs())
	case "blockSize":
		out.Field = "block_size"
	default:
		if m, ok := strings.CutPrefix(fe.Field, "blockSize."); ok {
			out.Field = "block_size[" + strconv.Quote(m) + "]"
		} else {
			out.Field = snake(fe.Field)
		}
	}
	return &out
}

// snake is a camelCase knob's proto field name: maxReplicas is
// max_replicas.
func snake(knob string) string {
	var b strings.Builder
	for _, r := range knob {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
