package policy

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/ident"
)

// EvictionPolicy names how the capacity bound (MaxResidencies) picks victims
// (contract §6.8, §7.1).
type EvictionPolicy string

const (
	// LRU evicts the residency with the oldest last_seen first.
	LRU EvictionPolicy = "LRU"
	// LFU evicts residencies of the block with the smallest access counter
	// first, then the oldest last_seen.
	LFU EvictionPolicy = "LFU"
)

// RankingVersion selects the LookupRoute score formula (contract §5.4).
type RankingVersion string

const (
	// RankingV1 is matched_tokens × freshness, kept for comparison.
	RankingV1 RankingVersion = "v1"
	// RankingV2 is the product of all five factors of contract §5.4.
	RankingV2 RankingVersion = "v2"
)

// Policy is the replicated CachePolicy of contract §7.2. Every node holds the same
// value (it changes only through the Raft log), so every node ranks alike.
// The zero value is not useful: start from Default.
type Policy struct {
	// ChainMatching enables longest-prefix block-chain matching. When false
	// only the prefix hash is matched exactly. Default true.
	ChainMatching bool
	// MinimumMatchedTokens is the per-replica floor, in tokens, applied
	// before the score floor. Default 64.
	MinimumMatchedTokens uint32
	// RoutingFloorScore is the whole-response floor on the top score, kept
	// as the decimal string the operator wrote (e.g. "0.1"). Default "0.1".
	RoutingFloorScore string
	// LookupTimeout is the server's own budget for one lookup; past it the
	// answer is NO_HINT. Default 10ms.
	LookupTimeout time.Duration
	// EvictionTTL is the age at which freshness reaches 0 and residencies
	// expire. Default 600s.
	EvictionTTL time.Duration
	// EvictionPolicy is LRU or LFU. Default LRU.
	EvictionPolicy EvictionPolicy
	// MaxResidencies bounds the (block, replica) pairs held across all
	// partitions; past it apply evicts by EvictionPolicy. Default 20,000,000.
	MaxResidencies uint64
	// EvictionBatch: a full index evicts MaxResidencies/EvictionBatch
	// residencies per pass (each pass scans every residency, so a smaller
	// batch means more passes: 64 makes a full index apply new blocks ~5×
	// slower than below the bound, 16 ~2.4×), for that share of the bound
	// left unused on average. 0 means 64, what releases before the knob
	// did: the victims are replicated state, so the default must not
	// change under a running cluster. Set it (4..1024) only once every
	// node runs a release that knows it. Default 0.
	EvictionBatch uint32
	// PressureWeight scales the pressure factor max(0, 1 − w × pressure).
	// Default 0.5.
	PressureWeight float64
	// SLOTightThreshold: a request ttft_ms below it is "tight" and gets the
	// SLO bias. Default 200ms.
	SLOTightThreshold time.Duration
	// SLOTightBias is the bias factor 1 + freshness × bias for tight
	// requests. Default 0.25.
	SLOTightBias float64
	// EnableTenantHot turns on the TENANT_HOT fallback. Default true.
	EnableTenantHot bool
	// TenantHotMinHitRate is the hit-rate floor (0..1) for TENANT_HOT.
	// Default 0.2.
	TenantHotMinHitRate float64
	// StatsFreshness: replica stats older than this are ignored. Default 30s.
	StatsFreshness time.Duration
	// AffinityRouting enables the AFFINITY_HINT fallback. Default true
	// ("Enabled").
	AffinityRouting bool
	// MaxReplicas is the most hints returned. Default 4.
	MaxReplicas uint32
	// RankingVersion is v1 or v2. Default v2.
	RankingVersion RankingVersion
	// BlockSize maps model_id to tokens per block for server-side
	// fingerprinting; a model absent from the map uses fingerprint.DefaultBlockSize.
	BlockSize map[string]uint32
	// MaxStaleness: a node that has not heard from a leader for longer marks
	// its responses stale. Default 5s.
	MaxStaleness time.Duration
	// Version is set by the server and grows by one per committed change.
	Version uint64
}

// Default returns the contract §7.1 defaults.
func Default() Policy {
	return Policy{
		ChainMatching:        true,
		MinimumMatchedTokens: 64,
		RoutingFloorScore:    "0.1",
		LookupTimeout:        10 * time.Millisecond,
		EvictionTTL:          600 * time.Second,
		EvictionPolicy:       LRU,
		MaxResidencies:       20_000_000,
		PressureWeight:       0.5,
		SLOTightThreshold:    200 * time.Millisecond,
		SLOTightBias:         0.25,
		EnableTenantHot:      true,
		TenantHotMinHitRate:  0.2,
		StatsFreshness:       30 * time.Second,
		AffinityRouting:      true,
		MaxReplicas:          4,
		RankingVersion:       RankingV2,
		BlockSize:            map[string]uint32{},
		MaxStaleness:         5 * time.Second,
	}
}

// BlockSizeFor returns the tokens per block for modelID (fingerprint.DefaultBlockSize
// when the policy has no entry).
func (p *Policy) BlockSizeFor(modelID string) uint32 {
	if bs, ok := p.BlockSize[modelID]; ok && bs > 0 {
		return bs
	}
	return fingerprint.DefaultBlockSize
}

// FloorScore parses RoutingFloorScore. Validate guarantees it parses.
func (p *Policy) FloorScore() float64 {
	f, err := strconv.ParseFloat(p.RoutingFloorScore, 64)
	if err != nil {
		return 0
	}
	return f
}

// Clone returns a deep copy (BlockSize is copied).
func (p Policy) Clone() Policy {
	m := make(map[string]uint32, len(p.BlockSize))
	for k, v := range p.BlockSize {
		m[k] = v
	}
	p.BlockSize = m
	return p
}

// FieldError is a policy validation failure naming the field (in the YAML /
// proto spelling), the bad value and the rule it breaks.
type FieldError struct {
	Field  string
	Value  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("policy field %s=%q: %s", e.Field, e.Value, e.Reason)
}

// decimal is the form of a new routingFloorScore: digits, an optional
// fraction, nothing else.
var decimal = regexp.MustCompile(`^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$`)

// CheckInput is Validate plus the rules a policy from a user must also
// meet (a YAML file, SetCachePolicy): routingFloorScore in decimal form
// (ParseFloat alone takes "Inf", a floor that drops every match, and
// "0x1p-3" or "1e9") and the model ids of blockSize under contract §9.2.
// The FSM applies a committed policy with Validate alone: a command
// written to the log under looser rules must apply the same on every
// node and every version.
func (p *Policy) CheckInput() error {
	if err := p.Validate(); err != nil {
		return err
	}
	if !decimal.MatchString(p.RoutingFloorScore) {
		return &FieldError{"routingFloorScore", p.RoutingFloorScore, "must be a non-negative decimal string such as \"0.1\""}
	}
	for model := range p.BlockSize {
		if msg := ident.Problem(model); msg != "" {
			return &FieldError{"blockSize", model, "model id " + msg}
		}
	}
	return nil
}

// Validate checks every knob against its allowed range and returns the first
// violation as a *FieldError.
func (p *Policy) Validate() error {
	f, err := strconv.ParseFloat(p.RoutingFloorScore, 64)
	if err != nil || f < 0 || f != f {
		return &FieldError{"routingFloorScore", p.RoutingFloorScore, "must be a non-negative decimal string such as \"0.1\""}
	}
	if p.LookupTimeout <= 0 || p.LookupTimeout > 10*time.Second {
		return &FieldError{"lookupTimeoutMs", p.LookupTimeout.String(), "must be between 1ms and 10s"}
	}
	if p.EvictionTTL < time.Second || p.EvictionTTL > 7*24*time.Hour {
		return &FieldError{"evictionTTL", p.EvictionTTL.String(), "must be between 1s and 168h"}
	}
	if p.EvictionPolicy != LRU && p.EvictionPolicy != LFU {
		return &FieldError{"evictionPolicy", string(p.EvictionPolicy), "must be LRU or LFU"}
	}
	if p.MaxResidencies == 0 || p.MaxResidencies > 1<<32 {
		return &FieldError{"maxResidencies", strconv.FormatUint(p.MaxResidencies, 10), "must be between 1 and 4294967296"}
	}
	if p.EvictionBatch != 0 && (p.EvictionBatch < 4 || p.EvictionBatch > 1024) {
		return &FieldError{"evictionBatch", strconv.FormatUint(uint64(p.EvictionBatch), 10), "must be 0 (= 64) or between 4 and 1024"}
	}
	if !(p.PressureWeight >= 0 && p.PressureWeight <= 1) {
		return &FieldError{"pressureWeight", strconv.FormatFloat(p.PressureWeight, 'g', -1, 64), "must be between 0 and 1"}
	}
	if p.SLOTightThreshold < 0 || p.SLOTightThreshold > time.Hour {
		return &FieldError{"sloTightThresholdMs", p.SLOTightThreshold.String(), "must be between 0 and 1h"}
	}
	if !(p.SLOTightBias >= 0 && p.SLOTightBias <= 10) {
		return &FieldError{"sloTightBias", strconv.FormatFloat(p.SLOTightBias, 'g', -1, 64), "must be between 0 and 10"}
	}
	if !(p.TenantHotMinHitRate >= 0 && p.TenantHotMinHitRate <= 1) {
		return &FieldError{"tenantHotMinHitRate", strconv.FormatFloat(p.TenantHotMinHitRate, 'g', -1, 64), "must be between 0 and 1"}
	}
	if p.StatsFreshness < time.Second || p.StatsFreshness > 24*time.Hour {
		return &FieldError{"statsFreshness", p.StatsFreshness.String(), "must be between 1s and 24h"}
	}
	if p.MaxReplicas == 0 || p.MaxReplicas > 64 {
		return &FieldError{"maxReplicas", strconv.FormatUint(uint64(p.MaxReplicas), 10), "must be between 1 and 64"}
	}
	if p.RankingVersion != RankingV1 && p.RankingVersion != RankingV2 {
		return &FieldError{"rankingVersion", string(p.RankingVersion), "must be v1 or v2"}
	}
	if len(p.BlockSize) > 1024 {
		return &FieldError{"blockSize", strconv.Itoa(len(p.BlockSize)) + " entries", "at most 1024 models"}
	}
	for model, bs := range p.BlockSize {
		if model == "" || len(model) > 256 {
			return &FieldError{"blockSize", model, "model id must be 1..256 bytes"}
		}
		if bs == 0 || bs > fingerprint.MaxBlockSize {
			return &FieldError{"blockSize." + model, strconv.FormatUint(uint64(bs), 10), "must be between 1 and 4096 tokens"}
		}
	}
	if p.MaxStaleness < 100*time.Millisecond || p.MaxStaleness > time.Hour {
		return &FieldError{"maxStalenessMs", p.MaxStaleness.String(), "must be between 100ms and 1h"}
	}
	return nil
}
