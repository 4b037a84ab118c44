package client

import (
	"math"
	"math/rand/v2"
	"sync"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Picker is the gateway's half of routing: given a LookupRoute response,
// the gateway's candidate replicas and the load the gateway itself sent,
// it picks one replica for a request, preferring cached prefix where it
// pays and spreading where it does not (contract §5.10).
//
// # Cost model
//
// A request's time to first token on a replica is the prefill work queued
// ahead of it plus its own uncached prefill, both at the replica's prefill
// speed. The picker estimates both in prompt tokens, which is
// proportional to that time for replicas of one model, and adds a credit
// for cache locality and small charges for the replica's decode load and
// KV pressure:
//
//	cost(r) = queued(r) + others(r) − repeated(r) + uncached(r) − credit(r)
//	          + decode(r) + kv(r)
//
//	credit(r)   = CacheAffinity × cached(r) × (1 + cached(r) / CacheAffinityTokens)
//	              (CacheAffinity × cached(r) when CacheAffinityTokens is 0)
//	              + CacheAffinityLoad × L × (1 + L) × cached(r)
//	L           = mean over the candidates of prefill(c)
//	prefill(c)  = max(known_prefilling(c), waiting(c)): the requests queued
//	              for or in prefill on c (the engine's waiting count also
//	              holds the requests of gateways that do not report)
//
//	cached(r)   = matched_tokens of r's PREFIX_MATCH hint (0 for a replica
//	              without one: TENANT_HOT and AFFINITY_HINT say nothing of
//	              what r holds)
//	uncached(r) = prompt tokens − cached(r)
//	queued(r)   = the uncached tokens of the requests this picker sent to r
//	              that have not produced their first token (Start …
//	              FirstToken): exact for what this gateway sent
//	others(r)   = others_prefill_tokens(r)
//	              + (max(0, waiting(r) − known_waiting(r))
//	              + RunningWeight × max(0, running(r) − known_running(r)))
//	              × tokens per request
//	repeated(r) = min(repeated_prefill_tokens of r's PREFIX_MATCH hint,
//	              queued(r) + others_prefill_tokens(r))
//	decode(r)   = DecodeWeight × decoding(r) × tokens per request
//	kv(r)       = KVWeight × pressure(r) × uncached(r)
//
// others_*(r) are the response's ReplicaLoad.others_* for r: the
// in-flight load the other pickers sharing the cluster reported (0
// without them). waiting(r) and running(r) are the engine's own counts,
// from r's hint or, for a replica without one, the response's loads
// (ask with LookupRouteRequest.include_load); 0 when neither carries
// them. They count every picker's requests, so the requests the picker
// knows of are taken out before they are charged per request, and the
// rest (a gateway that does not report, or reports not yet seen) is
// estimated at tokens per request:
//
//	known_prefilling(r) = own_prefilling(r) + others_prefilling_requests(r)
//	known_waiting(r)    = max(0, known_prefilling(r) − 1)   (one prefills)
//	known_running(r)    = own_in_flight(r) + others_running_requests(r)
//	                      − known_waiting(r)
//	decoding(r)         = own_in_flight(r) − own_prefilling(r)
//	                      + max(0, others_running_requests(r)
//	                      − others_prefilling_requests(r))
//
// own_prefilling(r) is this picker's requests on r before their first
// token, own_in_flight(r) before done; pressure(r) the load's KV usage
// (0..1). Without shared load (others_* 0) others(r) is the estimate
// from the engine's counts alone.
//
// repeated(r) counts a queued prefix once. Each request's queued tokens
// are its uncached tokens when it was picked; siblings of one new prefix
// picked before any gateway saw the others (a burst across gateways,
// each pick blind to the rest) each count the whole prefix, while an
// engine with prefix caching computes it once and serves the rest from
// its cache. The cluster, which holds every gateway's picks, says how
// many of the queued tokens repeat this request's prefix blocks that an
// earlier pick on r computes (provisional.Match.Repeated, contract
// §5.12); without the correction a replica that took a burst's first
// siblings looks busiest to the later ones, which then scatter.
//
// # Choice
//
// With LoadBound > 0 a candidate whose requests in flight (this picker's
// and the others' reported ones) + 1 would exceed ⌈LoadBound × (the
// candidates' total + 1) / candidates⌉ is passed over while another is
// within it; the bound is never below LoadBoundFloor. With Temperature 0 the lowest cost wins. Ties, common
// between idle replicas, go to the replica with fewer requests in flight
// (this picker's and the others', or the engine's running count when
// larger), then to the one the cluster ranked higher (a PREFIX_MATCH
// hint before an AFFINITY_HINT pick before TENANT_HOT before the rest),
// then at random. With Temperature T > 0 the choice is a softmax over
// cost: the best candidate (after those ties) and every costlier one
// within bound are drawn with weight exp(−(cost − best) / (T × prompt
// tokens)), a weight below exp(−20) counting as 0, so candidates within
// a fraction of the request's own prefill share the traffic and a
// decisive difference still decides.
//
// # Rendezvous
//
// "At random" above is, for a request with a rendezvous key (PickKeyed:
// RendezvousKey, the hash of the prompt's leading blocks), the key's
// rendezvous rather than a random stream: candidate r gets the Gumbel
// variate G(key, r) = −ln(−ln u), u from the highest-random-weight hash
// of (key, r) (rendezvousWeight), and the eligible candidate with the
// highest −(cost − best) / (T × prompt tokens) + G wins (with T = 0, the
// tied candidate with the highest G). Over many keys this is the same
// softmax (the Gumbel-max identity); for one key it is a function of the
// state alone, so every gateway that sees the same costs makes the same
// pick without talking. For a prompt whose prefix no candidate holds,
// on an idle or evenly loaded fleet, that is the rendezvous-hash winner
// among the candidates within the load bound: consistent hashing with
// bounded loads, and siblings of one new prefix (an agent's fan-out,
// users of one new system prompt) meet on one replica. It cannot herd:
// different prefixes hash to independent winners, a replica's queue
// enters its cost as soon as a sibling is known (the same gateway's at
// once, the others' through the shared load), the softmax cut drops a
// candidate costlier by 20 scales, and the load bound caps a replica's
// share. With a key an AFFINITY_HINT answer is set aside (its replica
// counts as no hint): the cluster's affinity is the rendezvous of the
// whole prompt's prefix hash, different for each sibling, where the key
// is that of the leading blocks they share. Without a key (Pick, or a
// prompt without a full block) the
// draws come from the Seed's stream: the same Seed, calls and views give
// the same picks.
//
// Cached tokens count as the prefill they save plus the locality credit;
// a replica that holds the prefix but has a queue longer than that loses
// to a cold idle one, so popular prefixes and TENANT_HOT do not herd
// traffic. On a busy fleet the load term lengthens the queue a prefix is
// worth waiting behind (a copy would delay the requests queued behind
// it), and the load bound still caps a replica's share. Decode work does
// not delay a new request's prefill with continuous batching, but it holds
// KV blocks and batch slots: DecodeWeight (0 by default) can spread
// otherwise equal replicas by what they are decoding. The
// picker is safe for concurrent use; it does no I/O and reads no clock.
type Picker struct {
	cfg PickerConfig

	mu       sync.Mutex
	replicas map[string]*replicaLoad
	sentReq  float64 // requests Start counted, for the tokens-per-request mean
	sentTok  float64 // their uncached tokens
	rng      *rand.Rand
	ties     []int
	weights  []float64
}

type replicaLoad struct {
	queuedTokens float64 // uncached tokens of requests before their first token
	prefilling   int     // requests before their first token
	inflight     int     // requests before their last token
}

// NewPicker returns a Picker with no load recorded.
func NewPicker(cfg PickerConfig) *Picker {
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &Picker{cfg: cfg, replicas: map[string]*replicaLoad{}, rng: rand.New(rand.NewPCG(seed, 0x7069636b))}
}

// PickCost is one candidate's cost terms (units: prompt tokens, except
// the request counts).
type PickCost struct {
	// Replica is the candidate's replica id.
	Replica string
	// Reason is the reason code of the hint naming the replica, NO_HINT
	// when none does.
	Reason pb.ReasonCode
	// CachedTokens is the PREFIX_MATCH hint's matched_tokens (0 without),
	// UncachedTokens the prompt tokens left to prefill.
	CachedTokens, UncachedTokens int
	// QueuedTokens is the prefill this picker sent that has not started
	// producing tokens; OthersTokens the queue others sent: the other
	// pickers' reported prefill plus the estimate of what the engine's
	// counts hold beyond every known request.
	QueuedTokens, OthersTokens float64
	// RepeatedTokens is repeated(r): the queued tokens that repeat this
	// request's prefix blocks an earlier queued request computes (from
	// the PREFIX_MATCH hint's repeated_prefill_tokens, at most
	// QueuedTokens + OthersPrefillTokens), counted once.
	RepeatedTokens float64
	// DecodeTokens is the decode term (DecodeWeight × decoding requests
	// × tokens per request), KVTokens the KV term (KVWeight × Pressure ×
	// UncachedTokens).
	DecodeTokens, KVTokens float64
	// InFlight is this picker's requests on the replica; ReportedWaiting
	// and ReportedRunning are the engine's own counts from the hint or
	// the load; Pressure the load's KV usage (0..1).
	InFlight                         int
	ReportedWaiting, ReportedRunning uint32
	Pressure                         float64
	// OthersPrefilling, OthersPrefillTokens and OthersRunning are the
	// load's others_prefilling_requests, others_prefill_tokens and
	// others_running_requests: what the other pickers reported in flight
	// on the replica; OthersPickers how many reports they sum.
	OthersPrefilling    uint32
	OthersPrefillTokens uint64
	OthersRunning       uint32
	OthersPickers       uint32
	// Cost = QueuedTokens + OthersTokens − RepeatedTokens +
	// UncachedTokens − the credit of CachedTokens (CacheAffinity,
	// CacheAffinityTokens, and CacheAffinityLoad × L × (1 + L), L the
	// candidates' mean requests in prefill) + DecodeTokens + KVTokens.
	Cost float64
}

// Decision is a Pick: the chosen replica and every candidate's terms.
type Decision struct {
	// Replica is the chosen replica id ("" when there were no candidates),
	// Index its position in the candidates.
	Replica string
	Index   int
	// Costs are the candidates' terms, in candidate order.
	Costs []PickCost
	// PromptTokens is the request's prompt length given to Pick.
	PromptTokens int
}

// rank of a hint's reason code for ties: lower is better.
func hintRank(rc pb.ReasonCode) int {
	switch rc {
	case pb.ReasonCode_PREFIX_MATCH:
		return 0
	case pb.ReasonCode_AFFINITY_HINT:
		return 1
	case pb.ReasonCode_TENANT_HOT:
		return 2
	}
	return 3
}

// Pick chooses one of candidates (replica ids, as the gateway names its
// backends) for a request of promptTokens tokens, given the cluster's
// LookupRoute response (nil is NO_HINT). Hints naming replicas that are not
// candidates are ignored. With no candidates it returns an empty Decision.
func (p *Picker) Pick(resp *pb.LookupRouteResponse, candidates []string, promptTokens int) Decision {
	return p.PickKeyed(resp, candidates, promptTokens, 0)
}

// PickKeyed is Pick with the request's rendezvous key (RendezvousKey of
// its block hashes; 0 = none): its ties and its softmax draw are then the
// key's rendezvous instead of the Seed's stream, so every picker given
// the same response, candidates and load makes the same choice (see
// Picker's doc, contract §5.10).
func (p *Picker) PickKeyed(resp *pb.LookupRouteResponse, candidates []string, promptTokens int, key uint64) Decision {
	d := Decision{Index: -1, PromptTokens: promptTokens, Costs: make([]PickCost, len(candidates))}
	if len(candidates) == 0 {
		return d
	}
	rc := resp.GetReasonCode()
	hints, loads := resp.GetReplicas(), resp.GetLoads()
	var repeated []uint32 // per candidate, from its PREFIX_MATCH hint
	if rc == pb.ReasonCode_PREFIX_MATCH {
		for _, h := range hints {
			if h.GetRepeatedPrefillTokens() > 0 {
				repeated = make([]uint32, len(candidates))
				break
			}
		}
	}
	if key != 0 && rc == pb.ReasonCode_AFFINITY_HINT {
		// The cluster's affinity is the rendezvous of the whole prompt's
		// prefix hash, which differs between siblings of one new prefix;
		// the key hashes the leading blocks they share (contract §5.10).
		hints = nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	perReq := p.tokensPerRequest()
	bestRank := make([]int, len(candidates))
	total, prefill := 0, 0 // requests in flight, and in prefill (queued or prefilling)
	for i, id := range candidates {
		c := &d.Costs[i]
		c.Replica, c.Reason = id, pb.ReasonCode_NO_HINT
		bestRank[i] = len(hints) + 1
		for k, h := range hints {
			if h.GetReplicaId() != id {
				continue
			}
			c.Reason = rc
			bestRank[i] = k
			c.ReportedWaiting, c.ReportedRunning = h.GetWaitingRequests(), h.GetRunningRequests()
			if rc == pb.ReasonCode_PREFIX_MATCH {
				c.CachedTokens = min(int(h.GetMatchedTokens()), promptTokens)
				if repeated != nil {
					repeated[i] = h.GetRepeatedPrefillTokens()
				}
			}
			break
		}
		for _, ld := range loads {
			if ld.GetReplicaId() != id {
				continue
			}
			if bestRank[i] > len(hints) {
				c.ReportedWaiting, c.ReportedRunning = ld.GetWaitingRequests(), ld.GetRunningRequests()
			}
			c.Pressure = min(max(ld.GetPressure(), 0), 1)
			c.OthersPrefilling, c.OthersPrefillTokens = ld.GetOthersPrefillingRequests(), ld.GetOthersPrefillTokens()
			c.OthersRunning, c.OthersPickers = ld.GetOthersRunningRequests(), ld.GetOthersPickers()
			break
		}
		c.UncachedTokens = promptTokens - c.CachedTokens
		l := p.replicas[id]
		if l == nil {
			l = &replicaLoad{}
			p.replicas[id] = l
		}
		c.QueuedTokens, c.InFlight = l.queuedTokens, l.inflight
		total += c.InFlight + int(c.OthersRunning)

		oP, oR := int(c.OthersPrefilling), int(c.OthersRunning)
		prefill += max(l.prefilling+oP, int(c.ReportedWaiting))
		knownWaiting := max(0, l.prefilling+oP-1)
		knownRunning := c.InFlight + oR - knownWaiting
		c.OthersTokens = float64(c.OthersPrefillTokens) + (float64(max(0, int(c.ReportedWaiting)-knownWaiting))+
			p.cfg.RunningWeight*float64(max(0, int(c.ReportedRunning)-knownRunning)))*perReq
		decoding := c.InFlight - l.prefilling + max(0, oR-oP)
		c.DecodeTokens = p.cfg.DecodeWeight * float64(decoding) * perReq
		c.KVTokens = p.cfg.KVWeight * c.Pressure * float64(c.UncachedTokens)
		if repeated != nil {
			c.RepeatedTokens = min(float64(repeated[i]), c.QueuedTokens+float64(c.OthersPrefillTokens))
		}
		c.Cost = c.QueuedTokens + c.OthersTokens - c.RepeatedTokens + float64(c.UncachedTokens) - p.credit(c.CachedTokens) +
			c.DecodeTokens + c.KVTokens
	}
	if p.cfg.CacheAffinityLoad > 0 && prefill > 0 {
		// The load term needs every candidate's prefill queue, so it is
		// added once they are all known.
		l := float64(prefill) / float64(len(candidates))
		perToken := p.cfg.CacheAffinityLoad * l * (1 + l)
		for i := range d.Costs {
			d.Costs[i].Cost -= perToken * float64(d.Costs[i].CachedTokens)
		}
	}
	bound := math.Inf(1)
	if p.cfg.LoadBound > 0 {
		bound = max(math.Ceil(p.cfg.LoadBound*float64(total+1)/float64(len(candidates))), p.cfg.LoadBoundFloor)
	}
	scale := p.cfg.Temperature * float64(promptTokens)
	best := p.best(d.Costs, bestRank, bound, scale, key)
	if best < 0 {
		best = p.best(d.Costs, bestRank, math.Inf(1), scale, key)
	}
	d.Replica, d.Index = candidates[best], best
	return d
}

// credit is the length-scaled part of the cache credit of cached tokens
// (CacheAffinity, CacheAffinityTokens); the load term is added in
// PickKeyed.
func (p *Picker) credit(cached int) float64 {
	c := p.cfg.CacheAffinity * float64(cached)
	if p.cfg.CacheAffinityTokens > 0 {
		c *= 1 + float64(cached)/p.cfg.CacheAffinityTokens
	}
	return c
}

func (p *Picker) tokensPerRequest() float64 {
	if p.cfg.TokensPerWaitingRequest > 0 {
		return p.cfg.TokensPerWaitingRequest
	}
	if p.sentReq == 0 {
		return DefaultTokensPerWaitingRequest
	}
	return p.sentTok / p.sentReq
}
