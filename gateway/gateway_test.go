package gateway

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/prompt"
)

// fakeLookup answers every lookup with resp (served by "n1" unless the
// response says otherwise) and records the requests. With wait it
// answers only once ctx ends (a cluster slower than the budget); with
// ignoreCtx it answers resp even then.
type fakeLookup struct {
	resp      *pb.LookupRouteResponse
	wait      bool
	mu        sync.Mutex
	reqs      []*pb.LookupRouteRequest
	ignoreCtx bool
}

func (f *fakeLookup) LookupRoute(ctx context.Context, req *pb.LookupRouteRequest) *pb.LookupRouteResponse {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	if f.wait {
		<-ctx.Done()
		if !f.ignoreCtx {
			return &pb.LookupRouteResponse{Detail: "client: DeadlineExceeded: context deadline exceeded; failing open"}
		}
	}
	return f.resp
}

func (f *fakeLookup) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// fakePrompts gives every request the same prompt (or error).
type fakePrompts struct {
	p   prompt.Prompt
	err error
}

func (f fakePrompts) Tokens(_ context.Context, req *openai.Request) (prompt.Prompt, error) {
	p := f.p
	p.Model, p.CacheSalt = req.Model, req.CacheSalt
	return p, f.err
}

func seq(n int) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = uint32(100 + i)
	}
	return s
}

func chatReq(t *testing.T, body string) *openai.Request {
	t.Helper()
	r, err := openai.DecodeChat([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var abc = []string{"a", "b", "c"}

func prefixMatch(replica string, tokens uint32) *pb.LookupRouteResponse {
	return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, ServedBy: "n1",
		Replicas: []*pb.ReplicaHint{{ReplicaId: replica, MatchedTokens: tokens, MatchedBlocks: tokens / 16}}}
}

func newGW(t *testing.T, cfg Config) *Gateway {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestDecide_PrefixMatchGoesToTheWarmReplicaAndKeysLikeTheIndex(t *testing.T) {
	lk := &fakeLookup{resp: prefixMatch("b", 64)}
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(70)}}, Lookup: lk, TenantID: "team", BlockSizes: map[string]int{"other": 32}})
	d, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "m", "cache_salt": "s", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc})
	if err != nil {
		t.Fatal(err)
	}
	if d.Replica != "b" || d.Reason != "PREFIX_MATCH" || d.MatchedTokens != 64 || d.PromptTokens != 70 || d.Blocks != 4 || d.FailOpen || d.NoKey != nil {
		t.Fatalf("decision %+v, want b by PREFIX_MATCH with 64 matched tokens of 70, 4 blocks", d)
	}
	if len(d.Fallbacks) != 2 || slices.Contains(d.Fallbacks, "b") {
		t.Fatalf("fallbacks %v, want the other two candidates", d.Fallbacks)
	}
	if len(d.Costs) != 3 || d.Costs[1].CachedTokens != 64 || d.Costs[1].UncachedTokens != 6 {
		t.Fatalf("cost terms %+v", d.Costs)
	}
	// The lookup asks for the partition of the subscriber's events: the
	// request's model, the configured tenant, scheme vllm, the key of 4
	// full blocks of 16 in the salt's hash domain, with the loads.
	lr := lk.reqs[0]
	want, _ := fingerprint.ComputeSalted(seq(70), 16, "s")
	if lr.ModelId != "m" || lr.TenantId != "team" || lr.HashScheme != "vllm" || lr.CacheSalt != "s" || !lr.IncludeLoad ||
		!slices.Equal(lr.BlockHashes, want.BlockHashes) || lr.PrefixHash != want.PrefixHash || !slices.Equal(lr.BlockTokenCounts, []uint32{16, 16, 16, 16}) {
		t.Fatalf("lookup request %v, want the salted key %v", lr, want.BlockHashes)
	}
	unsalted, _ := fingerprint.Compute(seq(70), 16)
	if slices.Equal(unsalted.BlockHashes, lr.BlockHashes) {
		t.Fatal("the salt did not change the key")
	}
}

func TestDecide_BlockSizeIsPerModel(t *testing.T) {
	lk := &fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}}
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(70)}}, Lookup: lk, BlockSizes: map[string]int{"big": 32}})
	d, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "big", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc})
	if err != nil {
		t.Fatal(err)
	}
	if d.Blocks != 2 || d.BlockSize != 32 || !slices.Equal(lk.reqs[0].BlockTokenCounts, []uint32{32, 32}) {
		t.Fatalf("blocks %d of %d, counts %v: want 2 of 32", d.Blocks, d.BlockSize, lk.reqs[0].BlockTokenCounts)
	}
}

// A hint naming a replica that is not a candidate (unhealthy, or outside
// the subset) is not usable: the pick is by load.
func TestDecide_HintOutsideTheCandidatesIsNotUsable(t *testing.T) {
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: &fakeLookup{resp: prefixMatch("z", 64)}})
	d, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc})
	if err != nil || d.Reason != ReasonLoad || d.MatchedTokens != 0 || d.FailOpen {
		t.Fatalf("%+v %v, want LOAD (not fail-open)", d, err)
	}
}

// The cluster slower than the budget, a client that failed open, or an
// answer after the budget: the request is still picked, by load, and
// marked fail-open.
func TestDecide_FailsOpenWithinTheBudget(t *testing.T) {
	cases := map[string]*fakeLookup{
		"slower than the budget":   {wait: true},
		"answer after the budget":  {wait: true, ignoreCtx: true, resp: prefixMatch("b", 64)},
		"the SDK's own NO_HINT":    {resp: &pb.LookupRouteResponse{Detail: "client: Unavailable: connection refused; failing open"}},
		"no response at all (nil)": {},
	}
	for name, lk := range cases {
		g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: lk, LookupBudget: 5 * time.Millisecond})
		d, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !d.FailOpen || d.Reason != ReasonLoad || d.Replica == "" || d.LookupDetail == "" || lk.calls() != 1 {
			t.Errorf("%s: %+v, want a fail-open LOAD pick with a detail", name, d)
		}
	}
}

// Without a usable hint a request without a key (no full block) is
// picked by load, ties in turn: idle candidates are taken round robin.
func TestDecide_WithoutHintOrKeyPicksByLoadThenRoundRobin(t *testing.T) {
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(10)}}, Lookup: &fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}},
		Provisional: ProvisionalConfig{Off: true}})
	req := Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc}
	var got []string
	for range 6 {
		d, err := g.Decide(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Replica)
	}
	for i := range 3 {
		if got[i] != got[i+3] || slices.Index(got[:3], got[i]) != i {
			t.Fatalf("idle picks %v: want the three candidates in turn", got)
		}
	}
}

// A keyed request that no hint names is the prefix's rendezvous: two
// gateways (their own picker seeds) pick the same idle replica for it
// every time, and a candidate with a request queued is passed over while
// another is idle, then listed last among the fallbacks.
func TestDecide_WithoutHintKeyedPickIsTheRendezvous(t *testing.T) {
	// Without provisional residencies: with them the first pick is a hint
	// for the next (TestDecide_SeesItsOwnPickAtOnce).
	cfg := Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: &fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}},
		Provisional: ProvisionalConfig{Off: true}}
	g, other := newGW(t, cfg), newGW(t, cfg)
	req := Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc}
	first := ""
	for range 6 {
		for _, gw := range []*Gateway{g, other} {
			d, err := gw.Decide(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if first == "" {
				first = d.Replica
			}
			if d.Replica != first || d.Reason != ReasonLoad {
				t.Fatalf("picked %s (%s), want %s every time on both gateways (LOAD)", d.Replica, d.Reason, first)
			}
		}
	}
	d, _ := g.Decide(context.Background(), req)
	busyOne := d.Replica
	f := d.Start(d.Replica)
	for range 4 {
		d2, _ := g.Decide(context.Background(), req)
		if d2.Replica == busyOne {
			t.Fatalf("picked %s, which has a request queued, over idle candidates", busyOne)
		}
		if d2.Fallbacks[len(d2.Fallbacks)-1] != busyOne {
			t.Fatalf("fallbacks %v: the loaded %s must come last", d2.Fallbacks, busyOne)
		}
	}
	f.Done()
	if g.InFlight(busyOne) != 0 {
		t.Fatalf("in flight on %s after Done: %d", busyOne, g.InFlight(busyOne))
	}
}

// A request without a key (multimodal content, a prompt error such as a
// template that raises, no prompt source) is picked by load without a
// lookup, and the decision says why.
func TestDecide_NoKeyPicksByLoadWithoutLookup(t *testing.T) {
	raised := &openai.Error{Status: http.StatusBadRequest, Message: "No user query found in messages."}
	cases := map[string]Prompts{
		"multimodal":     fakePrompts{p: prompt.Prompt{NoKey: prompt.ErrMultimodal}},
		"template raise": fakePrompts{err: raised},
		"no prompts":     nil,
	}
	for name, ps := range cases {
		lk := &fakeLookup{resp: prefixMatch("b", 64)}
		g := newGW(t, Config{Prompts: ps, Lookup: lk})
		d, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d.Reason != ReasonLoad || d.NoKey == nil || d.FailOpen || lk.calls() != 0 {
			t.Errorf("%s: %+v (lookups %d), want LOAD with NoKey and no lookup", name, d, lk.calls())
		}
	}
	g := newGW(t, Config{Prompts: cases["template raise"], Lookup: &fakeLookup{}})
	d, _ := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc})
	if !errors.Is(d.NoKey, raised) {
		t.Fatalf("NoKey %v, want the template's error", d.NoKey)
	}
}

// A prompt shorter than one block has no key, but the picker still needs
// the replicas' queues: the gateway sends its token ids, and the NO_HINT
// answer's loads (the engines' queues, the other gateways' requests)
// place it on the one idle candidate.
func TestDecide_ShortPromptAsksForTheLoads(t *testing.T) {
	lk := &fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1", ReasonCode: pb.ReasonCode_NO_HINT, Loads: []*pb.ReplicaLoad{
		{ReplicaId: "a", WaitingRequests: 3, RunningRequests: 4},
		{ReplicaId: "b", OthersPrefillingRequests: 2, OthersPrefillTokens: 9000, OthersRunningRequests: 2, OthersPickers: 1},
		{ReplicaId: "c"},
	}}}
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(15)}}, Lookup: lk})
	for range 3 {
		d, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc})
		if err != nil {
			t.Fatal(err)
		}
		if d.Replica != "c" || d.Reason != ReasonLoad || d.FailOpen {
			t.Fatalf("picked %s (%s, fail open %v), want the idle c by load", d.Replica, d.Reason, d.FailOpen)
		}
	}
	if lk.calls() != 3 {
		t.Fatalf("%d lookups, want one per request", lk.calls())
	}
	req := lk.reqs[0]
	if len(req.BlockHashes) != 0 || !slices.Equal(req.TokenIds, seq(15)) || !req.IncludeLoad {
		t.Fatalf("lookup %+v: want the 15 token ids, no block hashes and include_load", req)
	}
	// The other strategies need a key: no lookup without one.
	lk = &fakeLookup{resp: prefixMatch("b", 64)}
	g = newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(15)}}, Lookup: lk, Strategy: StrategyDynamo})
	if _, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc}); err != nil || lk.calls() != 0 {
		t.Fatalf("dynamo, 15 tokens: err %v, %d lookups, want none", err, lk.calls())
	}
}

func TestDecide_ErrorsOnlyWithoutCandidatesOrWhenTheClientLeft(t *testing.T) {
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}})
	req := chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`)
	if _, err := g.Decide(context.Background(), Request{OpenAI: req}); !errors.Is(err, ErrNoCandidates) {
		t.Fatalf("no candidates: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g = newGW(t, Config{Prompts: fakePrompts{err: context.Canceled}})
	if _, err := g.Decide(ctx, Request{OpenAI: req, Candidates: abc}); !errors.Is(err, context.Canceled) {
		t.Fatalf("client gone: %v, want context.Canceled", err)
	}
}

func TestDecide_RoundRobinAndLeastLoadedSkipTheLookup(t *testing.T) {
	req := chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`)
	lk := &fakeLookup{resp: prefixMatch("b", 64)}
	rr := newGW(t, Config{Strategy: StrategyRoundRobin, Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: lk})
	var got []string
	for range 4 {
		d, err := rr.Decide(context.Background(), Request{OpenAI: req, Candidates: abc})
		if err != nil || d.Reason != ReasonRoundRobin {
			t.Fatalf("%+v %v", d, err)
		}
		got = append(got, d.Replica)
		if d.Fallbacks[0] != abc[(slices.Index(abc, d.Replica)+1)%3] {
			t.Fatalf("round-robin fallbacks %v after %s: want the next in turn first", d.Fallbacks, d.Replica)
		}
	}
	if !slices.Equal(got, []string{"a", "b", "c", "a"}) {
		t.Fatalf("round robin %v", got)
	}

	ll := newGW(t, Config{Strategy: StrategyLeastLoaded, Lookup: lk})
	var flights []*Flight
	seen := map[string]bool{}
	for range 3 {
		d, _ := ll.Decide(context.Background(), Request{OpenAI: req, Candidates: abc})
		if d.Reason != ReasonLeastLoaded || seen[d.Replica] {
			t.Fatalf("least-loaded picked %s (%s) with a request already on it", d.Replica, d.Reason)
		}
		seen[d.Replica] = true
		flights = append(flights, d.Start(d.Replica))
	}
	freed := flights[1].Replica()
	flights[1].Done()
	if d, _ := ll.Decide(context.Background(), Request{OpenAI: req, Candidates: abc}); d.Replica != freed {
		t.Fatalf("least-loaded picked %s, want %s, the only one without a request", d.Replica, freed)
	}
	if lk.calls() != 0 {
		t.Fatalf("%d lookups by the baseline strategies, want none", lk.calls())
	}
}

// Load is recorded where the request really went: a retry on a fallback
// counts there.
func TestDecision_StartOnAFallbackCountsThere(t *testing.T) {
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: &fakeLookup{resp: prefixMatch("a", 64)}})
	d, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc})
	if err != nil || d.Replica != "a" {
		t.Fatalf("%+v %v", d, err)
	}
	f := d.Start(d.Fallbacks[0])
	if g.InFlight(d.Fallbacks[0]) != 1 || g.InFlight("a") != 0 {
		t.Fatalf("in flight %d on the fallback, %d on the pick", g.InFlight(d.Fallbacks[0]), g.InFlight("a"))
	}
	// The fallback's queued prefill now makes it cost more for the next
	// cold request.
	d2, _ := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: []string{d.Fallbacks[0]}})
	if d2.Costs[0].QueuedTokens != 64 || d2.Costs[0].InFlight != 1 {
		t.Fatalf("fallback's cost terms %+v, want 64 queued tokens and 1 in flight", d2.Costs[0])
	}
	f.FirstToken()
	f.Done()
	f.Done()
	if g.InFlight(d.Fallbacks[0]) != 0 {
		t.Fatal("Done twice must count once")
	}
}

func TestNew_RefusesBadConfigNamingTheValue(t *testing.T) {
	if _, err := New(Config{Strategy: "random"}); err == nil || !strings.Contains(err.Error(), `"random"`) {
		t.Fatalf("strategy: %v", err)
	}
	if _, err := New(Config{BlockSizes: map[string]int{"m": 0}}); err == nil || !strings.Contains(err.Error(), `block size 0 of model "m"`) {
		t.Fatalf("block size: %v", err)
	}
	g := newGW(t, Config{})
	if g.Strategy() != StrategyPicker || g.LookupBudget() != DefaultLookupBudget || g.BlockSize("x") != 16 {
		t.Fatalf("defaults: %s %v %d", g.Strategy(), g.LookupBudget(), g.BlockSize("x"))
	}
}

// A request decided without an OpenAI body has no key, asks nothing and
// is picked by load among its candidates.
func TestDecide_NoRequestPicksByLoadWithoutLookup(t *testing.T) {
	lk := &fakeLookup{resp: prefixMatch("b", 64)}
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(70)}}, Lookup: lk})
	d, err := g.Decide(context.Background(), Request{Candidates: abc})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(d.NoKey, ErrNoRequest) || d.Reason != ReasonLoad || lk.calls() != 0 || d.FailOpen || d.PromptTokens != 0 {
		t.Fatalf("decision %+v after %d lookups, want LOAD, no key, no lookup", d, lk.calls())
	}
	if !slices.Contains(abc, d.Replica) || len(d.Fallbacks) != 2 {
		t.Fatalf("pick %q fallbacks %v", d.Replica, d.Fallbacks)
	}
}

// ReasonFor a fallback is that replica's own hint, LOAD without one.
func TestDecision_ReasonForAFallbackIsItsOwnHint(t *testing.T) {
	resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, ServedBy: "n1", Replicas: []*pb.ReplicaHint{
		{ReplicaId: "b", MatchedTokens: 64, MatchedBlocks: 4}, {ReplicaId: "c", MatchedTokens: 32, MatchedBlocks: 2}}}
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(70)}}, Lookup: &fakeLookup{resp: resp}})
	d, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc})
	if err != nil {
		t.Fatal(err)
	}
	if d.Replica != "b" {
		t.Fatalf("pick %q, want b (64 cached tokens)", d.Replica)
	}
	for r, want := range map[string]struct {
		reason  string
		matched int
	}{"b": {"PREFIX_MATCH", 64}, "c": {"PREFIX_MATCH", 32}, "a": {ReasonLoad, 0}, "z": {ReasonLoad, 0}} {
		if reason, matched := d.ReasonFor(r); reason != want.reason || matched != want.matched {
			t.Errorf("ReasonFor(%q) = %s, %d; want %s, %d", r, reason, matched, want.reason, want.matched)
		}
	}
}
