package bench

import (
	"context"
	"strconv"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/prompt"
	"github.com/inference-cache/inference-cache/provisional"
)

// coreRouter is one gateway instance of lookuproute-sdk (and its
// ablations): the real routing core, package gateway, with the strategy
// "picker", asked through Decide and told of each request's life through
// Decision.Start, Flight.FirstToken and Flight.Done at their virtual
// times, exactly as the proxy and the endpoint picker drive it. Only the
// transport is the bench's: the prompt is the trace request's synthesised
// token ids (benchPrompts), the lookup (benchLookup) asks the real
// cluster through the client SDK, then adds what the cluster's shared
// soft state holds at that virtual instant (sharedState: the other
// gateways' load and picks), as the nodes add it, and the gateway's own
// SDK senders of its load and picks (client.LoadShare, client.PickShare,
// Manual) run their calls when the shared state's events say, each call
// taking a share delay to the nodes. The gateway core's local
// provisional table, its ledger of picks not pushed yet and its senders
// run on the virtual clock.
type coreRouter struct {
	*lookupStats
	f       *Fleet
	gw      *gateway.Gateway
	lk      *benchLookup
	prompts *benchPrompts
	engine  map[string]int
	cands   []string
	id      string // picker id
	shared  *sharedState
	due     due[coreDue]
	last    *gateway.Decision
	now     float64 // virtual time of the last Route's decision
	// turn and wait: the next Route's turn at the node (0: none) and its
	// lookup's wait for it (s; contract §5.13), set by the replay before
	// Route and cleared by Routed.
	turn uint64
	wait float64

	// The virtual clock of the gateway's local table and senders.
	base  time.Time
	clock float64
}

// coreDue is a request in flight: its first token is due (first), or
// its end.
type coreDue struct {
	at     float64
	first  bool
	doneAt float64
	flight *gateway.Flight
}

// benchPartition is the index partition of the bench's requests.
var benchPartition = provisional.Partition{Scheme: BenchScheme, Model: BenchModel, Tenant: BenchTenant}

// benchPrompts gives the gateway core the current request's prefill: the
// trace request's synthesised token ids.
type benchPrompts struct{ toks []uint32 }

func (p *benchPrompts) Tokens(context.Context, *openai.Request) (prompt.Prompt, error) {
	return prompt.Prompt{Model: BenchModel, TokenPrompt: true, TokenIDs: p.toks}, nil
}

// newCoreRouter builds gateway gw's instance; hints non-nil is the
// picker-indexer ablation (hints from the perfect indexer, not the
// cluster), shared nil the -local ablation.
func newCoreRouter(env *routerEnv, gw int, seed uint64, hints *indexerHints) (*coreRouter, error) {
	pc := env.picker
	pc.Seed = seed | 1
	r := &coreRouter{lookupStats: env.stats, f: env.f, engine: map[string]int{}, prompts: &benchPrompts{},
		id: "bench-gw-" + strconv.Itoa(gw), shared: env.shared, base: time.Unix(0, 0)}
	r.lk = &benchLookup{r: r, cl: env.cl, hints: hints}
	for i := range env.f.Engines {
		id := env.f.ReplicaID(i)
		r.cands = append(r.cands, id)
		r.engine[id] = i
	}
	vclock := func() time.Time { return virtualTime(r.base, r.clock) }
	cfg := gateway.Config{Prompts: r.prompts, Lookup: r.lk, Strategy: gateway.StrategyPicker,
		LookupBudget: env.lookupBudget, BlockSizes: map[string]int{BenchModel: TraceBlockTokens},
		HashScheme: BenchScheme, TenantID: BenchTenant, Picker: &pc, NoShareLoad: r.shared == nil,
		Provisional: gateway.ProvisionalConfig{Off: env.noProvisional, NoPush: r.shared == nil, Now: vclock}}
	if r.shared != nil {
		// The SDK's senders, driven on the virtual clock (sharedState).
		cfg.ShareLoad = client.LoadShareConfig{PickerID: r.id, Interval: time.Duration(r.shared.every * float64(time.Second)), Manual: true, Now: vclock}
		cfg.Provisional.Push = client.PickShareConfig{Manual: true}
	}
	g, err := gateway.New(cfg)
	if err != nil {
		return nil, err
	}
	r.gw = g
	if r.shared != nil {
		r.shared.gws = append(r.shared.gws, r)
	}
	return r, nil
}

// Route is the gateway's decision for request i (q) at virtual time t,
// after its lookup's turn at the node when it takes turns (r.turn and
// r.wait, set by the replay's askTurn or resume; t is then when the wait
// ended).
func (r *coreRouter) Route(ctx context.Context, i int, q *Request, t float64) int {
	if r.shared != nil {
		r.shared.advance(t)
	} else {
		r.advance(t)
	}
	r.now, r.clock = t, t
	r.lk.q = q
	r.prompts.toks = AppendPromptTokens(r.prompts.toks[:0], q)
	d, err := r.gw.Decide(ctx, gateway.Request{OpenAI: &openai.Request{Kind: openai.KindChat, Model: BenchModel}, Candidates: r.cands})
	if err != nil {
		// Only a cancelled replay ends here; Run stops on ctx.
		r.last = nil
		return i % len(r.cands)
	}
	r.last = d
	return r.engine[d.Replica]
}

// Routed starts the request on the engine it went to (the gateway's
// pick, or another when the replay overrode it): the gateway core records
// its load and its pick in its local table at once and gives the pick to
// its senders, which begin their calls if none is in flight; the bench
// schedules the request's first token and its end.
func (r *coreRouter) Routed(_ *Request, e int, s *Served) {
	if r.last == nil {
		return
	}
	r.clock = r.now
	s.LookupWaitS = r.wait
	r.turn, r.wait = 0, 0
	fl := r.last.Start(r.f.ReplicaID(e))
	r.pump(r.now, false, false)
	r.due.push(s.FirstTokenAt, coreDue{at: s.FirstTokenAt, first: true, doneAt: s.DoneAt, flight: fl})
}

// advance applies the first tokens and ends due by t, each at its time
// (the -local ablation, which shares nothing).
func (r *coreRouter) advance(t float64) {
	for {
		x, ok := r.due.peek()
		if !ok || x > t {
			return
		}
		r.flightEvent()
	}
}

// flightEvent applies the earliest first token or end due: the gateway
// core records it (a first token goes to the pick sender), and the
// senders begin what it asks for.
func (r *coreRouter) flightEvent() {
	_, x := r.due.pop()
	r.clock = x.at
	if x.first {
		x.flight.FirstToken()
		r.due.push(x.doneAt, coreDue{at: x.doneAt, flight: x.flight})
	} else {
		x.flight.Done()
	}
	r.pump(x.at, false, false)
}

// tick is the senders' timers at virtual time at: a load report is due,
// and the full state of the picks when full.
func (r *coreRouter) tick(at float64, full bool) {
	r.clock = at
	r.pump(at, true, full)
}

// pump begins, at virtual time at, the calls the gateway's senders have
// to make (client.PickShare.Begin, client.LoadShare.BeginReport: each
// with one call in flight) and puts them on their way. tick: the load
// reports' timer fired; full: the full state's.
func (r *coreRouter) pump(at float64, tick, full bool) {
	if r.shared == nil {
		return
	}
	if ps := r.gw.PickShare(); ps != nil {
		if c := ps.Begin(virtualTime(r.base, at), full); c != nil {
			r.shared.send(at, shareCall{r: r, push: c})
		}
	}
	if ls := r.gw.LoadShare(); ls != nil {
		if rep := ls.BeginReport(tick); rep != nil {
			r.shared.send(at, shareCall{r: r, report: rep})
		}
	}
}

// ended ends call c at its sender once it reached the nodes (the answer's
// way back left out), and begins what that asks for.
func (r *coreRouter) ended(c shareCall) {
	r.clock = c.at
	if c.push != nil {
		r.gw.PickShare().End(c.push, c.err)
	} else {
		r.gw.LoadShare().EndReport(c.report, c.answer, c.err)
	}
	r.pump(c.at, false, false)
}

// benchLookup is the hint service as the gateway core calls it: the real
// cluster through the SDK (or, for picker-indexer, the perfect indexer),
// plus the shared soft state the nodes would add at this virtual instant,
// by the nodes' own rules: others_* from the load store
// (pickerload.View.FillOthers), then the provisional residencies from the
// picks store (provisional.Store.MergeInto, which drops the picks the
// confirmed hints cover). The gateway core then merges its own table.
type benchLookup struct {
	r     *coreRouter
	cl    *client.Client
	hints *indexerHints
	q     *Request
}

func (l *benchLookup) LookupRoute(ctx context.Context, req *pb.LookupRouteRequest) *pb.LookupRouteResponse {
	r := l.r
	var resp *pb.LookupRouteResponse
	if l.hints != nil {
		resp = l.hints.respond(l.q)
		resp.ServedBy = "indexer"
	} else {
		// The bench's cluster takes no turns: they are the shared state's,
		// on the virtual clock (below).
		take := req.TakeTurn
		req.TakeTurn = false
		start := time.Now()
		resp = l.cl.LookupRoute(ctx, req)
		req.TakeTurn = take
		r.lat = append(r.lat, float64(time.Since(start).Nanoseconds())/1e3)
		r.reasons[resp.GetReasonCode().String()]++
	}
	if resp.GetServedBy() == "" {
		return resp // the SDK failed open: the gateway ignores the answer
	}
	if req.GetTakeTurn() {
		// The turn Route took at the node (sharedState.takeTurn; 0:
		// none), which the gateway settles through its senders.
		resp.Turn, resp.TurnWaitUs = r.turn, uint32(r.wait*1e6)
	}
	if s := r.shared; s != nil {
		// What the node adds to its answer, by the node's rules:
		// others_* (the gateway asks with its load), then the picks.
		s.load.At().FillOthers(resp, r.id)
		s.picks.MergeInto(resp, benchPartition, req.BlockHashes, int(req.GetMaxReplicas()))
	}
	return resp
}
