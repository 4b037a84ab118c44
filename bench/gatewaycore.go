package bench

import (
	"context"
	"strconv"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/prompt"
	"github.com/inference-cache/inference-cache/provisional"
)

// coreRouter is one gateway instance of lookuproute-sdk (and its
// ablations): the real routing core, package gateway, with the strategy
// "picker", asked through Decide and told of each request's life through
// Decision.Start, Flight.FirstToken and Flight.Done at their virtual
// times, exactly as the proxy and the endpoint picker drive it. Only the
// transport is the bench's: the prompt is the trace request's synthesised
// token ids (benchPrompts), and the lookup (benchLookup) asks the real
// cluster through the client SDK, then adds what the cluster's shared
// soft state holds at that virtual instant (sharedState: the other
// gateways' load and picks), as the nodes add it. The gateway core's own
// local provisional table (its picks, seen by its next decision at once)
// runs on the virtual clock; the bench carries its pushes (a delta per
// pick, the full state every ReportInterval) to the shared state.
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
	// turn and wait: the last Route's turn at the node (0: none) and its
	// wait for it (s; contract §5.13).
	turn uint64
	wait float64

	// This gateway's pushes, and the virtual clock of its local table.
	base              time.Time
	clock             float64
	loadSeq, picksSeq uint64
	lastHashes        []uint64
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
	g, err := gateway.New(gateway.Config{Prompts: r.prompts, Lookup: r.lk, Strategy: gateway.StrategyPicker,
		LookupBudget: env.lookupBudget, BlockSizes: map[string]int{BenchModel: TraceBlockTokens},
		HashScheme: BenchScheme, TenantID: BenchTenant, Picker: &pc, NoShareLoad: true,
		Provisional: gateway.ProvisionalConfig{Off: env.noProvisional, NoPush: true, Now: func() time.Time { return virtualTime(r.base, r.clock) }}})
	if err != nil {
		return nil, err
	}
	r.gw = g
	if r.shared != nil {
		r.shared.gws = append(r.shared.gws, r)
	}
	return r, nil
}

func (r *coreRouter) Route(ctx context.Context, i int, q *Request, t float64) int {
	if r.shared != nil {
		r.shared.advance(t)
	} else {
		r.advance(t)
	}
	r.turn, r.wait = 0, 0
	if s := r.shared; s != nil && s.turns != nil {
		r.turn, r.wait = s.takeTurn(r.gw.ProvisionalPickerID(), t)
	}
	r.now, r.clock = t+r.wait, t+r.wait
	r.lk.q = q
	r.lastHashes = r.lastHashes[:0]
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
// its load and its pick in its local table at once; the bench pushes the
// pick and the load to the cluster's shared state, and schedules the
// request's first token and its end.
func (r *coreRouter) Routed(_ *Request, e int, s *Served) {
	if r.last == nil {
		return
	}
	r.clock = r.now
	s.LookupWaitS = r.wait
	fl := r.last.Start(r.f.ReplicaID(e))
	push := provisional.Push{}
	if t := r.gw.ProvisionalTable(); t != nil && r.shared != nil && len(r.lastHashes) > 0 {
		if live := t.Live(r.gw.ProvisionalPickerID(), 0); len(live) > 0 {
			// Pick ids increase: the newest is the one just recorded.
			push.Picks = live[len(live)-1:]
		}
	}
	if len(push.Picks) > 0 {
		// The pick's push carries the load report with its load, and
		// settles the turn the lookup took (client.PickShareConfig.LoadFor).
		r.sendPicks(r.now, push, r.turn)
	} else {
		// No pick to push: the report settles the turn.
		r.sendLoad(r.now, r.turn)
	}
	first, done := s.FirstTokenAt+r.wait, s.DoneAt+r.wait
	r.due.push(first, coreDue{at: first, first: true, doneAt: done, flight: fl})
}

// advance applies the first tokens and ends due by t, each at its time.
func (r *coreRouter) advance(t float64) {
	r.due.until(t, func(x coreDue) {
		r.clock = x.at
		if x.first {
			x.flight.FirstToken()
			if id := x.flight.PickID(); id != 0 {
				r.sendPicks(x.at, provisional.Push{Prefilled: []uint64{id}})
			}
			r.due.push(x.doneAt, coreDue{at: x.doneAt, flight: x.flight})
		} else {
			x.flight.Done()
		}
		r.sendLoad(x.at)
	})
}

// sendPicks pushes a picks delta or full state to the cluster (shared
// state only), under the gateway's picker id. A delta of a new pick
// carries the gateway's load report, settling settle (nil = a push
// without a report).
func (r *coreRouter) sendPicks(at float64, p provisional.Push, settle ...uint64) {
	if r.shared == nil {
		return
	}
	r.picksSeq++
	p.PickerID, p.Sequence = r.gw.ProvisionalPickerID(), r.picksSeq
	sp := sharePush{picks: &p, from: r.id}
	if settle != nil {
		sp.load, sp.settle, sp.turnPicker = r.loadReport(), settle, p.PickerID
	}
	r.shared.send(at, sp)
}

// sendLoad pushes this gateway's whole in-flight load (shared state only).
func (r *coreRouter) sendLoad(at float64, settle ...uint64) {
	if r.shared == nil {
		return
	}
	r.shared.send(at, sharePush{from: r.id, load: r.loadReport(), settle: settle, turnPicker: r.gw.ProvisionalPickerID()})
}

// loadReport is the gateway's next load report: its whole in-flight load.
func (r *coreRouter) loadReport() *pickerload.Report {
	r.loadSeq++
	rep := pickerload.FromPB(&pb.ReportPickerLoadRequest{PickerId: r.id, Sequence: r.loadSeq,
		IntervalMs: uint32(max(1, int(r.shared.every*1000))), Loads: r.gw.PickerLoad()})
	return &rep
}

// pushFull sends the periodic full state: the load and every live pick.
func (r *coreRouter) pushFull(at float64) {
	r.sendLoad(at)
	r.clock = at
	if t := r.gw.ProvisionalTable(); t != nil {
		r.sendPicks(at, provisional.Push{Full: true, Picks: t.Live(r.gw.ProvisionalPickerID(), 0)})
	}
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
	r.lastHashes = append(r.lastHashes[:0], req.BlockHashes...)
	var resp *pb.LookupRouteResponse
	if l.hints != nil {
		resp = l.hints.respond(l.q)
		resp.ServedBy = "indexer"
	} else {
		start := time.Now()
		resp = l.cl.LookupRoute(ctx, req)
		r.lat = append(r.lat, float64(time.Since(start).Nanoseconds())/1e3)
		r.reasons[resp.GetReasonCode().String()]++
	}
	if resp.GetServedBy() == "" {
		return resp // the SDK failed open: the gateway ignores the answer
	}
	if s := r.shared; s != nil {
		// What the node adds to its answer, by the node's rules:
		// others_* (the gateway asks with its load), then the picks.
		s.load.At().FillOthers(resp, r.id)
		s.picks.MergeInto(resp, benchPartition, req.BlockHashes, int(req.GetMaxReplicas()))
	}
	return resp
}
