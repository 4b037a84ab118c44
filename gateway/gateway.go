package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/prompt"
)

// Lookup is the hint service as the gateway calls it; *client.Client
// satisfies it. LookupRoute must return by ctx's deadline and never fail:
// a NO_HINT response when the cluster cannot answer. A response whose
// served_by is empty did not come from a server (the SDK failed open) and
// counts as no answer.
type Lookup interface {
	LookupRoute(ctx context.Context, req *pb.LookupRouteRequest) *pb.LookupRouteResponse
}

// Prompts gives a request's prefill; *prompt.Registry satisfies it.
type Prompts interface {
	Tokens(ctx context.Context, req *openai.Request) (prompt.Prompt, error)
}

// Strategy is how a Gateway picks among the candidates.
type Strategy string

// Strategies.
const (
	// StrategyPicker looks the prompt up and picks with client.Picker's
	// cost model (the default).
	StrategyPicker Strategy = "picker"
	// StrategyRoundRobin takes the candidates in turn, without a lookup.
	StrategyRoundRobin Strategy = "round-robin"
	// StrategyLeastLoaded takes the candidate with the fewest requests
	// this gateway has in flight (ties in turn), without a lookup.
	StrategyLeastLoaded Strategy = "least-loaded"
)

// ParseStrategy reads a strategy name ("" is StrategyPicker).
func ParseStrategy(s string) (Strategy, error) {
	switch Strategy(s) {
	case "", StrategyPicker:
		return StrategyPicker, nil
	case StrategyRoundRobin, StrategyLeastLoaded, StrategyDynamo, StrategyLLMD, StrategySGLang:
		return Strategy(s), nil
	}
	return "", fmt.Errorf("strategy %q: want picker, round-robin, least-loaded, dynamo, llm-d or sglang", s)
}

// Reasons of a Decision besides the hint reason codes (PREFIX_MATCH,
// AFFINITY_HINT, TENANT_HOT).
const (
	// ReasonLoad: picked without a usable hint (none named the pick, or
	// none came in time).
	ReasonLoad = "LOAD"
	// ReasonRoundRobin and ReasonLeastLoaded: picked by those strategies.
	ReasonRoundRobin  = "ROUND_ROBIN"
	ReasonLeastLoaded = "LEAST_LOADED"
)

// Defaults of Config.
const (
	// DefaultLookupBudget bounds the lookup: past it the request is
	// routed without a hint. A hint is worth a prefill of many
	// milliseconds; waiting longer than this for one is not. It is the
	// SDK's own default (client.DefaultLookupTimeout) and leaves room for
	// the node's turn wait (turns.DefaultWait, 40 ms) and its 5 ms margin,
	// which a burst of requests across gateways needs to be ordered; an
	// answered lookup takes about a millisecond, so the budget is spent
	// only in such a wait or on a node that does not answer.
	DefaultLookupBudget = 50 * time.Millisecond
	// DefaultHashScheme is the index partition's hash scheme: the
	// subscriber's hash_scheme for vLLM engines.
	DefaultHashScheme = "vllm"
)

// ErrNoCandidates is Decide's error for a request with no candidate.
var ErrNoCandidates = errors.New("gateway: no candidate replica")

// ErrNoRequest is Decision.NoKey of a request decided without a decoded
// OpenAI request (Request.OpenAI nil: no body, or a body that is not an
// OpenAI completion): it is picked by load.
var ErrNoRequest = errors.New("gateway: no OpenAI request: no key")

// Config configures a Gateway. Fields are read once by New.
type Config struct {
	// Prompts gives each request's prefill; nil = no key for a text or
	// chat request (picked by load). A completion whose prompt is token
	// ids is keyed with them either way (prompt.FromTokenIDs).
	Prompts Prompts
	// Lookup is the hint service; nil = none (every pick by load, and not
	// counted as fail-open).
	Lookup Lookup
	// Strategy is the pick; "" = StrategyPicker.
	Strategy Strategy
	// LookupBudget bounds one lookup (the context Lookup gets ends
	// there, and a later answer is ignored); 0 = DefaultLookupBudget.
	LookupBudget time.Duration
	// BlockSizes are the tokens per block of each model (the engines'
	// --block-size, the subscriber's block_size); a model absent from it
	// uses fingerprint.DefaultBlockSize.
	BlockSizes map[string]int
	// HashScheme, TenantID and AdapterID are the index partition looked
	// up (the subscriber's hash_scheme, tenant_id, adapter for these
	// engines); HashScheme "" = DefaultHashScheme. The model id is the
	// request's model.
	HashScheme, TenantID, AdapterID string
	// Picker configures the picker; nil = client.DefaultPickerConfig().
	Picker *client.PickerConfig
	// ShareLoad configures the report of this gateway's in-flight load
	// to the cluster (contract §5.11: the picker id, the interval), so
	// that the other gateways' lookups count it and this one's lookups
	// leave it out. It is on for StrategyPicker whenever Lookup can take
	// reports (a *client.Client can), or ShareLoad.Manual is set (the
	// caller sends the reports: LoadShare); NoShareLoad turns it off.
	// Stop it with Close.
	ShareLoad   client.LoadShareConfig
	NoShareLoad bool
	// AdapterLoadTokens is the cost, in prefill tokens, charged to a
	// candidate that must load a request's LoRA adapter (adapters.go); 0
	// = DefaultAdapterLoadTokens.
	AdapterLoadTokens int
	// Provisional configures the provisional residencies of this
	// gateway's picks (contract §5.12): its next decisions see them at
	// once, and they are pushed to the cluster as they are made.
	Provisional ProvisionalConfig
}

// Gateway decides where requests go. It is safe for concurrent use.
type Gateway struct {
	cfg    Config
	picker *client.Picker
	rr     atomic.Uint64

	share *client.LoadShare // nil = not sharing
	peer  *peerState        // the peer strategies' state; nil for the others
	prov  provState

	mu              sync.Mutex
	inflight        map[string]int     // requests started and not done, per replica
	adapterInflight map[adapterKey]int // the same, of LoRA adapters, per replica and adapter
}

// New returns a Gateway. Block sizes outside 1..fingerprint.MaxBlockSize
// and an unknown strategy are refused, naming the value.
func New(cfg Config) (*Gateway, error) {
	s, err := ParseStrategy(string(cfg.Strategy))
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	cfg.Strategy = s
	if cfg.LookupBudget <= 0 {
		cfg.LookupBudget = DefaultLookupBudget
	}
	if cfg.HashScheme == "" {
		cfg.HashScheme = DefaultHashScheme
	}
	if cfg.AdapterLoadTokens <= 0 {
		cfg.AdapterLoadTokens = DefaultAdapterLoadTokens
	}
	for m, bs := range cfg.BlockSizes {
		if bs < 1 || bs > fingerprint.MaxBlockSize {
			return nil, fmt.Errorf("gateway: block size %d of model %q: want 1 to %d", bs, m, fingerprint.MaxBlockSize)
		}
	}
	pc := client.DefaultPickerConfig()
	if cfg.Picker != nil {
		pc = *cfg.Picker
	}
	g := &Gateway{cfg: cfg, picker: client.NewPicker(pc), inflight: map[string]int{}, adapterInflight: map[adapterKey]int{}}
	switch s {
	case StrategyDynamo, StrategyLLMD, StrategySGLang:
		g.peer = newPeerState()
	}
	if to, ok := cfg.Lookup.(client.LoadReportSender); (ok || cfg.ShareLoad.Manual) && !cfg.NoShareLoad && s == StrategyPicker {
		sc := cfg.ShareLoad
		if sc.Load == nil {
			sc.Load = g.sharedLoad
		}
		if g.share, err = client.StartLoadShare(g.picker, to, sc); err != nil {
			return nil, fmt.Errorf("gateway: share load: %w", err)
		}
	}
	if err := g.startProvisional(); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// PickerID is the id this gateway's load reports and lookups carry; ""
// when it does not share its load.
func (g *Gateway) PickerID() string {
	if g.share == nil {
		return ""
	}
	return g.share.PickerID()
}

// LoadShare is the gateway's load reporter (nil when it does not share
// its load): a Manual one is driven through it.
func (g *Gateway) LoadShare() *client.LoadShare { return g.share }

// Close stops the picks pushes and then the load reports (a last, empty
// one tells the cluster at once: after the pushes, whose reports would
// otherwise outrank it). Decide still works after it, unshared.
// Idempotent.
func (g *Gateway) Close() {
	if g.prov.push != nil {
		g.prov.push.Stop()
	}
	if g.share != nil {
		g.share.Stop()
	}
}

// Strategy is the configured strategy.
func (g *Gateway) Strategy() Strategy { return g.cfg.Strategy }

// LookupBudget is the configured lookup budget.
func (g *Gateway) LookupBudget() time.Duration { return g.cfg.LookupBudget }

// BlockSize is model's tokens per block.
func (g *Gateway) BlockSize(model string) int {
	if bs, ok := g.cfg.BlockSizes[model]; ok {
		return bs
	}
	return fingerprint.DefaultBlockSize
}

// Request is one request to decide.
type Request struct {
	// OpenAI is the decoded request (openai.Decode); nil = none (a
	// request without a body, or another API's): no key, picked by load
	// (Decision.NoKey is ErrNoRequest).
	OpenAI *openai.Request
	// Candidates are the replica ids that may serve it (at least one), in
	// the caller's order. Decide does not keep the slice.
	Candidates []string
	// Base and Adapter are set for a LoRA adapter's request (adapters.go):
	// Base is the base model (the index partition's model id; its
	// tokenizer, template and block size key the request), Adapter the
	// adapter id (the subscriber's lora_name: the adapter's model name).
	// Both "" = the request's model, with Config.AdapterID.
	Base, Adapter string
	// Residency is the adapter's residency on each candidate, in
	// Candidates' order (nil or short = unknown).
	Residency []Residency
	// Holders is how many replicas may hold the request's blocks, when
	// more than the candidates (0 = the candidates): the lookup then asks
	// for that many hints, so that replicas outside the candidates (the
	// decode replicas of disaggregated serving, which cache the blocks
	// they pulled) do not crowd the candidates out of the answer.
	Holders int
}

// Decide picks a replica for req among its candidates (see the package
// documentation). The lookup is bounded by the budget and never makes
// Decide fail: errors are ErrNoCandidates, and ctx's error when ctx ended
// before the decision (the client went away while its prompt was being
// tokenized).
func (g *Gateway) Decide(ctx context.Context, req Request) (*Decision, error) {
	n := len(req.Candidates)
	if n == 0 {
		return nil, ErrNoCandidates
	}
	d := &Decision{g: g, candidates: append([]string(nil), req.Candidates...)}
	switch g.cfg.Strategy {
	case StrategyRoundRobin:
		d.choose(g.roundRobin(n), ReasonRoundRobin)
		return d, nil
	case StrategyLeastLoaded:
		d.choose(g.leastLoaded(d.candidates), ReasonLeastLoaded)
		return d, nil
	}

	d.adapter = req.Adapter
	oreq := req.OpenAI
	if req.Base != "" && oreq != nil {
		b := *oreq // keyed as the base model's prompt
		b.Model = req.Base
		oreq = &b
	}
	resp, err := g.hint(ctx, oreq, d, req.Adapter, max(n, req.Holders))
	if err != nil {
		return nil, err
	}
	if g.peer != nil {
		model := ""
		if req.OpenAI != nil {
			model = req.OpenAI.Model
		}
		d.BlockSize = g.BlockSize(model)
		g.decidePeer(d, model, resp, d.hashes)
		return d, nil
	}
	g.prov.order.RLock()
	resp = g.mergeOwnPicks(d, resp)
	pick := g.picker.PickKeyed(resp, d.candidates, d.PromptTokens, d.rkey)
	g.prov.order.RUnlock()
	d.pick, d.Costs = pick, pick.Costs
	usable := d.rkey != 0 // a keyed pick is the rendezvous: the same on every gateway
	for i := range pick.Costs {
		if pick.Costs[i].Reason != pb.ReasonCode_NO_HINT {
			usable = true
			break
		}
	}
	if full := g.chargeAdapters(req, pick.Costs); full != nil || !usable {
		// The residency terms changed the costs: the cheapest wins.
		d.pick.Index = g.byLoad(pick.Costs, full)
		d.pick.Replica = d.candidates[d.pick.Index]
	}
	reason := ReasonLoad
	if rc := pick.Costs[d.pick.Index].Reason; rc != pb.ReasonCode_NO_HINT {
		reason = rc.String()
	}
	d.choose(d.pick.Index, reason)
	d.MatchedTokens = pick.Costs[d.pick.Index].CachedTokens
	if reason == pb.ReasonCode_PREFIX_MATCH.String() {
		for _, h := range resp.GetReplicas() {
			if h.GetReplicaId() == d.Replica {
				d.Provisional = h.GetProvisional()
				break
			}
		}
	}
	return d, nil
}

// hint computes the request's key and looks it up within the budget. It
// fills the prompt fields of d; a nil response means no hint.
func (g *Gateway) hint(ctx context.Context, req *openai.Request, d *Decision, adapter string, hints int) (*pb.LookupRouteResponse, error) {
	if req == nil {
		d.NoKey = ErrNoRequest
		return nil, nil
	}
	p, err := g.prompt(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("gateway: request ended before its decision: %w", ctx.Err())
		}
		d.NoKey = err
		return nil, nil
	}
	d.PromptTokens = len(p.TokenIDs)
	bs := g.BlockSize(req.Model)
	d.BlockSize = bs
	if adapter == "" {
		adapter = g.cfg.AdapterID
	}
	lr := &pb.LookupRouteRequest{ModelId: req.Model, TenantId: g.cfg.TenantID, AdapterId: adapter,
		HashScheme: g.cfg.HashScheme, IncludeLoad: true, CacheSalt: p.CacheSalt, MaxReplicas: uint32(min(hints, maxReplicas)),
		PickerId: g.PickerID()}
	// A gateway that pushes its picks takes a turn among the pickers
	// (contract §5.13); the load report in this pick's push settles it
	// (Decision.Start).
	lr.TakeTurn = lr.PickerId != "" && g.prov.push != nil
	if err := client.Fingerprint(lr, p.TokenIDs, bs); err != nil {
		d.NoKey = err
		return nil, nil
	}
	d.Blocks = len(lr.BlockHashes)
	d.hashes = lr.BlockHashes
	d.key = lr
	d.rkey = client.RendezvousKey(lr.BlockHashes, bs)
	if g.cfg.Lookup == nil || g.cfg.Strategy == StrategySGLang || (d.Blocks == 0 && (g.cfg.Strategy != StrategyPicker || len(p.TokenIDs) == 0)) {
		return nil, nil // no hint service, a strategy that asks none, or nothing to ask with
	}
	if d.Blocks == 0 {
		// A prompt without a full block has no key, but the picker still
		// needs the replicas' queues, the engines' and the other
		// gateways': its token ids (under one block) are answered NO_HINT
		// with the loads (contract §5.2, §5.10).
		lr.TokenIds = p.TokenIDs
	}
	lctx, cancel := context.WithTimeout(ctx, g.cfg.LookupBudget)
	start := time.Now()
	resp := g.cfg.Lookup.LookupRoute(lctx, lr)
	cancel()
	d.Lookup = time.Since(start)
	// A turn the node gave is settled (Decision.Start) also when its
	// answer came too late to be used: else it would hold the other
	// gateways until it lapses.
	d.turn = resp.GetTurn()
	d.Turn, d.TurnWait = d.turn != 0, time.Duration(resp.GetTurnWaitUs())*time.Microsecond
	if resp == nil || resp.GetServedBy() == "" || d.Lookup > g.cfg.LookupBudget {
		d.FailOpen = true
		if resp != nil {
			d.LookupDetail = resp.GetDetail()
			d.LookupRefused = client.RefusedLookup(resp)
		}
		if d.LookupDetail == "" {
			d.LookupDetail = "no answer from the cluster within " + g.cfg.LookupBudget.String()
		}
		return nil, nil
	}
	d.LookupDetail = resp.GetDetail()
	return resp, nil
}

// errNoModels is Decision.NoKey of a text or chat request when the
// gateway has no models directory (Config.Prompts nil).
var errNoModels = errors.New("gateway: no models directory: no key")

// prompt is req's prefill: a token-id completion's ids as given (no model
// files needed), else Config.Prompts' answer. An error (or the prompt's
// NoKey) means no key.
func (g *Gateway) prompt(ctx context.Context, req *openai.Request) (prompt.Prompt, error) {
	if p, ok := prompt.FromTokenIDs(req); ok {
		return p, nil
	}
	if g.cfg.Prompts == nil {
		return prompt.Prompt{}, errNoModels
	}
	p, err := g.cfg.Prompts.Tokens(ctx, req)
	if err == nil {
		err = p.NoKey
	}
	return p, err
}

// maxReplicas bounds the hints asked for (the server's own limit).
const maxReplicas = 64

// roundRobin returns the next position among n candidates.
func (g *Gateway) roundRobin(n int) int { return int((g.rr.Add(1) - 1) % uint64(n)) }

// leastLoaded returns the candidate with the fewest requests in flight,
// ties in turn.
func (g *Gateway) leastLoaded(cands []string) int {
	start := g.roundRobin(len(cands))
	g.mu.Lock()
	defer g.mu.Unlock()
	best, bestN := -1, 0
	for k := range cands {
		i := (start + k) % len(cands)
		if n := g.inflight[cands[i]]; best < 0 || n < bestN {
			best, bestN = i, n
		}
	}
	return best
}

// byLoad returns the cheapest candidate by the picker's cost terms (the
// queued prefill this gateway sent, the engines' reported queues), then
// the fewest requests in flight, ties in turn; skip[i] set (when skip is
// not nil) passes candidate i over.
func (g *Gateway) byLoad(costs []client.PickCost, skip []bool) int {
	start := g.roundRobin(len(costs))
	best := -1
	for k := range costs {
		i := (start + k) % len(costs)
		if skip != nil && skip[i] {
			continue
		}
		if best < 0 || lessLoaded(&costs[i], &costs[best]) {
			best = i
		}
	}
	return best
}

// lessLoaded orders two candidates by cost, then requests in flight.
func lessLoaded(a, b *client.PickCost) bool {
	if a.Cost != b.Cost {
		return a.Cost < b.Cost
	}
	return busy(a) < busy(b)
}

// busy is a candidate's requests in flight: this gateway's, or the
// engine's reported running count when larger.
func busy(c *client.PickCost) int { return max(c.InFlight, int(c.ReportedRunning)) }
