package gateway

import (
	"slices"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// Decision is where one request goes and why.
type Decision struct {
	// Replica is the pick, one of the request's candidates.
	Replica string
	// Fallbacks are the other candidates, best first: where a retry
	// goes when Replica cannot take the request.
	Fallbacks []string
	// Reason is the reason code of the hint naming Replica
	// ("PREFIX_MATCH", "AFFINITY_HINT", "TENANT_HOT"), ReasonLoad when
	// Replica was picked without a usable hint, or ReasonRoundRobin,
	// ReasonLeastLoaded, ReasonDynamo, ReasonLLMD, ReasonSGLang for those
	// strategies.
	Reason string
	// MatchedTokens is the prefix of the prompt the hint says Replica
	// holds (tokens; 0 without a PREFIX_MATCH hint for it); for the peer
	// strategies the prefix that router believed Replica held.
	MatchedTokens int
	// PromptTokens is the prefill's length in tokens (0 without a key);
	// BlockSize the model's tokens per block and Blocks the key's full
	// blocks (the partial tail is not keyed).
	PromptTokens, BlockSize, Blocks int
	// NoKey says why the request had no key (multimodal content, a
	// template that raised, no tokenizer for the model, …); nil when it
	// had one.
	NoKey error
	// FailOpen is set when the key was looked up and no server answered
	// within the budget: the pick was made without a hint.
	FailOpen bool
	// LookupRefused is the gRPC code name ("Unauthenticated",
	// "PermissionDenied") when the cluster refused the lookup's token: a
	// fail-open decision whose cause no retry fixes (client.RefusedLookup);
	// "" otherwise.
	LookupRefused string
	// LookupDetail is the lookup response's detail (or why there was
	// none); Lookup how long the lookup took (0 when not asked).
	LookupDetail string
	Lookup       time.Duration
	// Turn says the lookup took a turn among the pickers (contract
	// §5.13); TurnWait is how long it waited at the node for it (or, with
	// Turn false, before the wait ran out).
	Turn     bool
	TurnWait time.Duration
	// Costs are the picker's cost terms of every candidate, in the
	// request's candidate order (StrategyPicker only).
	Costs []client.PickCost

	// Provisional is set when the hint naming Replica is a provisional
	// residency (contract §5.12): a gateway's earlier pick of this prefix
	// the engine's events have not confirmed yet.
	Provisional bool

	g          *Gateway
	adapter    string // the LoRA adapter of the request, "" = none
	candidates []string
	index      int
	rkey       uint64 // the prompt's rendezvous key (client.RendezvousKey); 0 = none
	pick       client.Decision
	hashes     []uint64               // the key's block hashes (nil without a key)
	peer       *peerPick              // Dynamo's pending request; nil for the other strategies
	key        *pb.LookupRouteRequest // the lookup's key; nil without one
	turn       uint64                 // the lookup's turn (contract §5.13), settled by the first Start; 0 = none
}

// choose sets the pick to candidate i and orders the fallbacks.
func (d *Decision) choose(i int, reason string) {
	d.index, d.Replica, d.Reason = i, d.candidates[i], reason
	n := len(d.candidates)
	order := make([]int, 0, n-1)
	for k := 1; k < n; k++ {
		order = append(order, (i+k)%n) // round robin: the next in turn
	}
	switch {
	case d.Costs != nil:
		slices.SortStableFunc(order, func(a, b int) int { return cmpLoaded(&d.Costs[a], &d.Costs[b]) })
	case d.g.cfg.Strategy == StrategyLeastLoaded:
		d.g.mu.Lock()
		load := make(map[string]int, n)
		for _, c := range d.candidates {
			load[c] = d.g.inflight[c]
		}
		d.g.mu.Unlock()
		slices.SortStableFunc(order, func(a, b int) int { return load[d.candidates[a]] - load[d.candidates[b]] })
	}
	d.Fallbacks = make([]string, len(order))
	for k, j := range order {
		d.Fallbacks[k] = d.candidates[j]
	}
}

// cmpLoaded orders candidates as lessLoaded does (-1, 0, 1).
func cmpLoaded(a, b *client.PickCost) int {
	switch {
	case lessLoaded(a, b):
		return -1
	case lessLoaded(b, a):
		return 1
	}
	return 0
}

// ReasonFor is the reason and matched tokens of replica as the request's
// server: Reason and MatchedTokens for the pick; for a fallback (a retry
// went there) its own hint's reason code and cached tokens, ReasonLoad
// and 0 without one, or the strategy's reason for round-robin and
// least-loaded. A replica not among the candidates gets ReasonLoad, 0.
func (d *Decision) ReasonFor(replica string) (string, int) {
	if replica == d.Replica {
		return d.Reason, d.MatchedTokens
	}
	if d.Costs == nil {
		if slices.Contains(d.candidates, replica) {
			return d.Reason, 0
		}
		return ReasonLoad, 0
	}
	for i := range d.Costs {
		if c := &d.Costs[i]; c.Replica == replica && c.Reason != pb.ReasonCode_NO_HINT {
			return c.Reason.String(), c.CachedTokens
		}
	}
	return ReasonLoad, 0
}

// Start records that the request was sent to replica: the pick, or a
// fallback after the pick could not take it. Call it once per replica
// the request is really sent to, and end each Flight.
func (d *Decision) Start(replica string) *Flight {
	g := d.g
	f := &Flight{g: g, replica: replica}
	// The pick and its load as one step (provState.order): this
	// gateway's decisions see both or neither, and its load reports
	// leave the load out until the pick is pushed (unshared.go).
	g.prov.order.Lock()
	f.pickID = g.recordPick(d, replica)
	// The lookup's turn (contract §5.13) is settled by the load report
	// that carries this request's load: the one in the pick's push when
	// the ledger holds the load for it (and again by the first report
	// after that push), else the next one.
	turn := d.turn
	d.turn = 0
	if g.cfg.Strategy == StrategyPicker {
		uncached := d.PromptTokens
		for i := range d.Costs {
			if d.Costs[i].Replica == replica {
				uncached = d.Costs[i].UncachedTokens
			}
		}
		if replica == d.Replica {
			f.in = g.picker.Start(&d.pick)
		} else {
			f.in = g.picker.StartOn(replica, uncached)
		}
		if g.share != nil && g.prov.holdLoad(f.pickID, replica, float64(max(0, uncached)), turn) {
			turn = 0
		}
	}
	g.prov.order.Unlock()
	if turn != 0 && g.share != nil {
		g.share.Settle(turn)
	}
	f.peer = d.startPeer(replica)
	if g.share != nil && (f.pickID == 0 || g.prov.push == nil) {
		// The load delta goes out now, not at the next tick; a pushed
		// pick's goes out after the pick (PickShareConfig.AfterDelta).
		g.share.Kick()
	}
	g.mu.Lock()
	g.inflight[replica]++
	if d.adapter != "" {
		f.adapter = d.adapter
		g.adapterInflight[adapterKey{replica, d.adapter}]++
	}
	g.mu.Unlock()
	return f
}

// Flight is one request on one replica, from Start to Done. Its methods
// are for the goroutine serving the request (not concurrent use); calls
// after the first of each kind do nothing.
type Flight struct {
	g                *Gateway
	in               *client.Inflight
	peer             *peerFlight
	replica          string
	adapter          string
	pickID           uint64 // its provisional residency; 0 = none
	firstSeen, ended bool
}

// Replica is where the request went.
func (f *Flight) Replica() string { return f.replica }

// PickID is the id of the request's provisional residency in the
// gateway's table (0 = none): a simulation sends its first token to the
// cluster under it.
func (f *Flight) PickID() uint64 { return f.pickID }

// FirstToken records the request's first token: its prefill no longer
// queues the replica's next requests.
func (f *Flight) FirstToken() {
	if f.firstSeen {
		return
	}
	f.firstSeen = true
	if f.in != nil {
		f.in.FirstToken()
	}
	f.g.prefilledPick(f.pickID)
	if f.peer != nil {
		f.peer.firstToken(&f.g.peer.mu)
	}
}

// Fail records the request's end as a failure or a cancellation (no
// answer from the replica, an error status, the client gone): its
// provisional residency is dropped here and in the cluster (contract
// §5.12), then it ends as Done.
func (f *Flight) Fail() {
	if f.ended {
		return
	}
	f.g.dropPick(f.pickID)
	f.pickID = 0
	f.Done()
}

// Done records the request's end: its last token (its provisional
// residency stays until the engine's events confirm it or its max age
// passes), or, without Fail, its failure or cancellation.
func (f *Flight) Done() {
	if f.ended {
		return
	}
	f.FirstToken()
	f.ended = true
	if f.in != nil {
		f.in.Done()
	}
	if f.peer != nil {
		f.peer.done(&f.g.peer.mu)
	}
	f.g.mu.Lock()
	if f.g.inflight[f.replica]--; f.g.inflight[f.replica] <= 0 {
		delete(f.g.inflight, f.replica)
	}
	if f.adapter != "" {
		k := adapterKey{f.replica, f.adapter}
		if f.g.adapterInflight[k]--; f.g.adapterInflight[k] <= 0 {
			delete(f.g.adapterInflight, k)
		}
	}
	f.g.mu.Unlock()
}

// InFlight is the number of requests started on replica and not done.
func (g *Gateway) InFlight(replica string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inflight[replica]
}
