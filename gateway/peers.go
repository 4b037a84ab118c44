package gateway

import (
	"math/rand/v2"
	"sync"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/peers"
)

// The peers' routers as strategies (package peers holds their formulas,
// shared with the benchmark; docs/proxy.md, "Peer strategies"). Each
// gateway instance keeps its own state, as those routers do without
// replica sync.
const (
	// StrategyDynamo is NVIDIA Dynamo's KV router with its defaults: the
	// lowest overlap weight × potential prefill blocks + potential
	// decode blocks, the overlap being the PREFIX_MATCH hint's matched
	// blocks (the cluster's index stands for Dynamo's KV-event indexer)
	// and the active sequences those this gateway routed.
	StrategyDynamo Strategy = "dynamo"
	// StrategyLLMD is llm-d's Endpoint Picker with its default profile:
	// the highest 3 × prefix + 2 × queue + 2 × (1 − KV usage), the
	// prefix from the blocks this gateway routed to each replica, the
	// queue and KV usage from the engines' scraped stats (the lookup's
	// loads).
	StrategyLLMD Strategy = "llm-d"
	// StrategySGLang is the SGLang model gateway's cache_aware policy
	// with its command line's defaults, over the requests this gateway
	// has in flight and routed; it asks the cluster nothing.
	StrategySGLang Strategy = "sglang"
)

// Reasons of the peer strategies' decisions.
const (
	ReasonDynamo = "DYNAMO"
	ReasonLLMD   = "LLM_D"
	ReasonSGLang = "SGLANG"
)

// peerState is the state of one gateway's peer strategy: per model (each
// router serves one model), Dynamo's active sequences, or the blocks
// routed to each replica (llm-d's prefix index, SGLang's tree).
type peerState struct {
	mu     sync.Mutex
	rng    *rand.Rand
	nextID uint64
	dynamo map[string]*peers.DynamoSlots
	routed map[string]*peers.RoutedBlocks
	// scratch, reused under mu
	logits []float64
	llmd   []peers.LLMDEndpoint
	sgl    []peers.SGLangWorker
}

// newPeerState seeds the ties' randomness from the runtime's random
// source: every gateway draws its own, as independent router instances
// do.
func newPeerState() *peerState {
	return &peerState{rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), dynamo: map[string]*peers.DynamoSlots{},
		routed: map[string]*peers.RoutedBlocks{}}
}

// peerPick is what a peer decision leaves for its flights: Dynamo's
// request id and every candidate's overlap (blocks).
type peerPick struct {
	model    string
	id       uint64
	hashes   []uint64
	overlaps []int
}

// peerFlight is a Dynamo request on one replica (nil for the others).
type peerFlight struct {
	slots *peers.DynamoSlots
	id    uint64
}

// decidePeer picks for the peer strategies: resp is the lookup's answer
// (nil without one), hashes the key's block hashes (nil without a key).
func (g *Gateway) decidePeer(d *Decision, model string, resp *pb.LookupRouteResponse, hashes []uint64) {
	p := g.peer
	bs := max(d.BlockSize, 1)
	n := len(d.candidates)
	inflight := make([]int, n)
	if g.cfg.Strategy == StrategySGLang {
		g.mu.Lock()
		for i, c := range d.candidates {
			inflight[i] = g.inflight[c]
		}
		g.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch g.cfg.Strategy {
	case StrategyDynamo:
		slots := p.dynamo[model]
		if slots == nil {
			slots = peers.NewDynamoSlots(bs)
			p.dynamo[model] = slots
		}
		pp := &peerPick{model: model, hashes: hashes, overlaps: make([]int, n)}
		matched := hintBlocks(resp)
		p.logits = p.logits[:0]
		for i, c := range d.candidates {
			pp.overlaps[i] = min(matched[c], len(hashes))
			blocks, tokens := slots.Potential(c, hashes, d.PromptTokens, pp.overlaps[i])
			p.logits = append(p.logits, peers.DynamoLogit(peers.DefaultDynamoConfig(bs), blocks, tokens))
		}
		i := peers.DynamoSelect(peers.DefaultDynamoConfig(bs), p.logits, nil, p.rng)
		p.nextID++
		pp.id = p.nextID
		d.peer = pp
		d.choose(i, ReasonDynamo)
		d.MatchedTokens = min(pp.overlaps[i]*bs, d.PromptTokens)
	case StrategyLLMD:
		cfg := peers.DefaultLLMDConfig().ForBlockSize(bs)
		routed := p.routedFor(model, cfg.LRUCapacity)
		key := hashes[:min(len(hashes), cfg.MaxPrefixBlocks)]
		loads := map[string]*pb.ReplicaLoad{}
		for _, l := range resp.GetLoads() {
			loads[l.GetReplicaId()] = l
		}
		p.llmd = p.llmd[:0]
		for _, c := range d.candidates {
			l := loads[c]
			p.llmd = append(p.llmd, peers.LLMDEndpoint{MatchedBlocks: routed.Match(c, key), Waiting: int(l.GetWaitingRequests()),
				KVUsage: min(max(l.GetPressure(), 0), 1)})
		}
		p.logits = peers.LLMDScores(cfg, len(key), p.llmd, p.logits)
		i := peers.PickMax(p.logits, p.rng)
		routed.Add(d.candidates[i], key) // the prefix plugin's PreRequest: the pick is recorded at once
		d.choose(i, ReasonLLMD)
		d.MatchedTokens = min(p.llmd[i].MatchedBlocks*bs, d.PromptTokens)
	case StrategySGLang:
		cfg := peers.DefaultSGLangConfig().ForBlockSize(bs)
		routed := p.routedFor(model, cfg.TreeBlocks)
		p.sgl = p.sgl[:0]
		for k, c := range d.candidates {
			p.sgl = append(p.sgl, peers.SGLangWorker{Load: inflight[k], MatchedTokens: min(routed.Match(c, hashes)*bs, d.PromptTokens),
				TreeBlocks: routed.Size(c)})
		}
		i, _ := peers.SGLangPick(cfg, d.PromptTokens, p.sgl)
		routed.Add(d.candidates[i], hashes) // inserted under the chosen worker, whichever branch chose it
		d.choose(i, ReasonSGLang)
		d.MatchedTokens = p.sgl[i].MatchedTokens
	}
}

func (p *peerState) routedFor(model string, capacity int) *peers.RoutedBlocks {
	r := p.routed[model]
	if r == nil {
		r = peers.NewRoutedBlocks(capacity)
		p.routed[model] = r
	}
	return r
}

// hintBlocks is the matched blocks of every PREFIX_MATCH hint of resp,
// by replica: the confirmed index only, as Dynamo's KV-event indexer
// knows it (a provisional residency is another gateway's pick, which
// Dynamo's router has no way to learn without replica sync).
func hintBlocks(resp *pb.LookupRouteResponse) map[string]int {
	out := map[string]int{}
	if resp.GetReasonCode() != pb.ReasonCode_PREFIX_MATCH {
		return out
	}
	for _, h := range resp.GetReplicas() {
		if !h.GetProvisional() {
			out[h.GetReplicaId()] = int(h.GetMatchedBlocks())
		}
	}
	return out
}

// startPeer records a Dynamo request on replica (add_request) and returns
// its flight; nil for the other strategies.
func (d *Decision) startPeer(replica string) *peerFlight {
	pp := d.peer
	if pp == nil {
		return nil
	}
	overlap := 0
	for i, c := range d.candidates {
		if c == replica {
			overlap = pp.overlaps[i]
		}
	}
	p := d.g.peer
	p.mu.Lock()
	defer p.mu.Unlock()
	slots := p.dynamo[pp.model]
	id := pp.id
	if replica != d.Replica {
		p.nextID++ // a retry elsewhere is another request for Dynamo
		id = p.nextID
	}
	slots.Add(id, replica, pp.hashes, d.PromptTokens, overlap)
	return &peerFlight{slots: slots, id: id}
}

// firstToken and done are Dynamo's mark_prefill_completed and free.
func (f *peerFlight) firstToken(mu *sync.Mutex) {
	mu.Lock()
	f.slots.PrefillDone(f.id)
	mu.Unlock()
}

func (f *peerFlight) done(mu *sync.Mutex) {
	mu.Lock()
	f.slots.Free(f.id)
	mu.Unlock()
}
