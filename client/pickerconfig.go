package client

// The picker's configuration and its defaults (contract §5.10): the
// weights of the cost model in Picker's doc, chosen on the bench's
// generator (docs/eval/pickertune.md).

// PickerConfig configures a Picker. Start from DefaultPickerConfig: a
// zero field means zero, not the default.
type PickerConfig struct {
	// TokensPerWaitingRequest is the prefill tokens assumed for each
	// request an engine reports that this picker did not send. 0 = the
	// mean uncached tokens of the requests this picker sent
	// (DefaultTokensPerWaitingRequest before the first).
	TokensPerWaitingRequest float64
	// CacheAffinity is the credit per cached token beyond the prefill it
	// saves: cost −= CacheAffinity × cached tokens. It keeps a prefix's
	// later requests where it is cached rather than copying it to a
	// replica that is idle for the moment, which is what a pure TTFT
	// greedy does and what lowers the fleet's hit rate.
	CacheAffinity float64
	// CacheAffinityTokens scales the credit with the cached prefix's
	// length: per cached token it is CacheAffinity × (1 + cached tokens /
	// CacheAffinityTokens), CacheAffinity for a short prefix and twice
	// that at CacheAffinityTokens. A long prefix is worth more per token
	// where it is: a copy takes that much more of another replica's cache
	// (evicting as much of what it holds), and long prefixes (agents'
	// contexts, documents, long conversations) are the ones requests come
	// back to, while a short one (a template, a short system prompt) is
	// soon held everywhere anyway. 0 = a credit linear in cached tokens.
	CacheAffinityTokens float64
	// CacheAffinityLoad grows the credit with the fleet's prefill queue:
	// per cached token it adds CacheAffinityLoad × L × (1 + L), L the
	// candidates' mean requests queued for or in prefill (prefill(r) of
	// the cost model). Recomputing a cached prefix on another replica
	// adds its tokens to the fleet's prefill work, and that work delays
	// every request that queues behind it before the replica next runs
	// dry. The rest of the cost counts only this request's own wait; the
	// delay it causes the others is the queue's marginal cost: in a
	// single-server queue at utilisation ρ a unit of added work delays
	// the later requests by ρ / (1 − ρ)² units in all, which is
	// L × (1 + L) with L = ρ / (1 − ρ) the mean requests in the system.
	// So 1 counts that delay in full: nothing on an idle fleet (a copy
	// costs only cache space), 2 tokens per cached token at one request
	// queued per replica, 12 at three, when a copy costs every request
	// behind it. Decoding requests do not enter L: with continuous
	// batching they do not hold up a prefill. 0 = no load term.
	CacheAffinityLoad float64
	// RunningWeight is the share of a request's prefill counted for each
	// request the engine reports running that this picker did not send: a
	// running request may still be prefilling, which the engine's
	// counters cannot tell apart from decoding.
	RunningWeight float64
	// DecodeWeight is the share of a request's prefill counted for each
	// request this picker or another reporting picker has on the replica
	// past its first token (decoding): decode(r) of the cost model.
	DecodeWeight float64
	// KVWeight charges a replica's KV pressure (ReplicaLoad.pressure, the
	// engine's KV usage 0..1): kv(r) = KVWeight × pressure × uncached
	// tokens, the blocks the request writes into a cache that must evict
	// for them.
	KVWeight float64
	// LoadBound, when positive, caps a replica's share: a candidate whose
	// requests in flight (this picker's and the other pickers' reported
	// ones) + 1 would exceed ⌈LoadBound × (the candidates' total + 1) /
	// candidates⌉ is passed over while another is within it.
	LoadBound float64
	// LoadBoundFloor is the least the load bound allows (requests in
	// flight on one replica) however small the candidates' total: below
	// it a replica's share is not an overload the cost model does not
	// already see (its queue is in its cost), and siblings of one new
	// prefix can meet on an idle fleet. 0 = no floor.
	LoadBoundFloor float64
	// Temperature, when positive, makes the choice a softmax over cost
	// with scale Temperature × the request's prompt tokens (see Picker's
	// doc); 0 picks the lowest cost.
	Temperature float64
	// Seed seeds the choice among equally good candidates and the
	// softmax draws of requests without a rendezvous key (0 = a random
	// seed); a keyed request's choice is its key's (PickKeyed). Gateways
	// that share a seed make the same unkeyed choices for the same view,
	// so give each its own.
	Seed uint64
}

// DefaultPickerConfig is the default configuration: CacheAffinity 1,
// CacheAffinityTokens 0 (linear), CacheAffinityLoad 0.5, RunningWeight 0,
// DecodeWeight 0, KVWeight 1, LoadBound 1.5, LoadBoundFloor 8, Temperature
// 0, a random seed. The weights were chosen on the bench's built-in generator
// only (internal/pickertune: shapes with short and long shared prefixes
// and bursty arrivals, 1, 4 and 8 gateways, two prefill speeds), not on the
// traces the evaluation reports; docs/eval/pickertune.md has the
// sensitivity of each parameter searched.
func DefaultPickerConfig() PickerConfig {
	return PickerConfig{CacheAffinity: DefaultCacheAffinity, CacheAffinityTokens: DefaultCacheAffinityTokens,
		CacheAffinityLoad: DefaultCacheAffinityLoad, RunningWeight: DefaultRunningWeight, DecodeWeight: DefaultDecodeWeight,
		KVWeight: DefaultKVWeight, LoadBound: DefaultLoadBound, LoadBoundFloor: DefaultLoadBoundFloor,
		Temperature: DefaultTemperature}
}

// Defaults of PickerConfig.
const (
	DefaultCacheAffinity = 1
	// DefaultCacheAffinityTokens is 0, a credit linear in cached tokens:
	// with the load term on, the generator prefers it to every length
	// scale searched (2,048 to 32,768 tokens; docs/eval/pickertune.md).
	// What a long prefix is worth beyond its tokens shows in the queue a
	// copy of it adds, which the load term prices.
	DefaultCacheAffinityTokens = 0
	// DefaultCacheAffinityLoad is the load term's weight the generator
	// chose (docs/eval/pickertune.md; 0 to 4 searched, a saturated shape
	// among the scenarios): half the queue's marginal cost. The full cost
	// (1) overshoots because L is the queue seen at one instant, and
	// L × (1 + L), convex, grows with its noise.
	DefaultCacheAffinityLoad = 0.5
	// DefaultRunningWeight is 0: with continuous batching a running
	// request the picker does not know of is most likely decoding, which
	// does not hold up a prefill. The generator's losses at 0, 0.3, 0.5 and
	// 1 are within 0.006 of each other, 0 the lowest.
	DefaultRunningWeight = 0
	// DefaultDecodeWeight is 0 for the same reason; 0.05 is within 0.004 of
	// its loss, 0.2 and more clearly worse.
	DefaultDecodeWeight = 0
	// DefaultKVWeight charges a full cache one uncached token per token it
	// must evict for the request; 0 to 1 are within 0.005 of each other.
	DefaultKVWeight = 1
	// DefaultLoadBound is bounded-load consistent hashing's load factor
	// in the middle of the range it is run at (1.25 to 2): at 1.25 the
	// generator's hit rate falls, at 2 its busiest replica takes more.
	DefaultLoadBound = 1.5
	// DefaultLoadBoundFloor is a full sibling burst of the contract's
	// example (8 requests of one new prefix on one replica).
	DefaultLoadBoundFloor = 8
	// DefaultTemperature is 0: the lowest cost wins, and ties go to the
	// rendezvous of the request's key. The generator prefers it to any softmax searched (loss −0.4717
	// against −0.4035 at 0.05): with the load term and the load bound
	// pricing the queues the lowest cost is already balanced, and a draw
	// among near-equal candidates raised the busiest replica's share.
	DefaultTemperature = 0
)

// DefaultTokensPerWaitingRequest is the prefill tokens assumed per
// engine-reported request before the picker has sent any request.
const DefaultTokensPerWaitingRequest = 2048
