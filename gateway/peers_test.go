package gateway

import (
	"context"
	"testing"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/prompt"
)

const peerBody = `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`

func decidePeerReq(t *testing.T, g *Gateway) *Decision {
	t.Helper()
	d, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, peerBody), Candidates: abc})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Dynamo: a prompt of 64 tokens (4 blocks of 16). With b holding all 4
// blocks, b's logit is 0 / 16 + 4 = 4 against 64 / 16 + 4 = 8: b. Without
// hints, a second copy of a request in prefill on X costs X (64 + 64) /
// 16 + 4 = 12 against 8 elsewhere (its blocks are shared, its prefill is
// not); after X's first token X costs 64 / 16 + 4 = 8 again.
func TestDecide_DynamoCostsPrefillAndDecodeBlocks(t *testing.T) {
	prompts := fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}
	g := newGW(t, Config{Strategy: StrategyDynamo, Prompts: prompts, Lookup: &fakeLookup{resp: prefixMatch("b", 64)}})
	d := decidePeerReq(t, g)
	if d.Replica != "b" || d.Reason != ReasonDynamo || d.MatchedTokens != 64 {
		t.Fatalf("decision %s (%s, %d matched), want b by DYNAMO with 64 matched", d.Replica, d.Reason, d.MatchedTokens)
	}

	// A provisional hint (another gateway's pick) is no overlap: Dynamo's
	// indexer knows only what the engines reported.
	prov := prefixMatch("b", 64)
	prov.Replicas[0].Provisional = true
	g = newGW(t, Config{Strategy: StrategyDynamo, Prompts: prompts, Lookup: &fakeLookup{resp: prov}})
	if d := decidePeerReq(t, g); d.MatchedTokens != 0 {
		t.Fatalf("a provisional hint counted %d matched tokens, want 0", d.MatchedTokens)
	}

	g = newGW(t, Config{Strategy: StrategyDynamo, Prompts: prompts, Lookup: &fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}}})
	first := decidePeerReq(t, g)
	fl := first.Start(first.Replica)
	for range 20 {
		if d := decidePeerReq(t, g); d.Replica == first.Replica {
			t.Fatalf("a second copy went to %s, which still prefills the first (cost 12 against 8)", d.Replica)
		}
	}
	fl.FirstToken()
	seen := map[string]bool{}
	for range 60 {
		seen[decidePeerReq(t, g).Replica] = true
	}
	if len(seen) != 3 {
		t.Fatalf("after the first token every replica costs 8: picks %v, want all three", seen)
	}
	fl.Done()
	if n := g.peer.dynamo["m"].Active(); n != 0 {
		t.Fatalf("%d requests still tracked after Done", n)
	}
}

// llm-d: with no routing history, waiting 0, 1, 2 and no KV usage, a
// scores 0 + 2 + 2 = 4 (b 3, c 2): a. With the queues reversed a still
// wins by its prefix, 3 × 1 + 0 + 2 = 5 against c's 0 + 2 + 2 = 4: the
// prefix index is this gateway's own picks.
func TestDecide_LLMDScoresPrefixQueueAndKV(t *testing.T) {
	loads := func(wa, wb, wc uint32) *pb.LookupRouteResponse {
		return &pb.LookupRouteResponse{ServedBy: "n1", Loads: []*pb.ReplicaLoad{{ReplicaId: "a", WaitingRequests: wa},
			{ReplicaId: "b", WaitingRequests: wb}, {ReplicaId: "c", WaitingRequests: wc}}}
	}
	lk := &fakeLookup{resp: loads(0, 1, 2)}
	g := newGW(t, Config{Strategy: StrategyLLMD, Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: lk})
	if d := decidePeerReq(t, g); d.Replica != "a" || d.Reason != ReasonLLMD || d.MatchedTokens != 0 {
		t.Fatalf("first: %s (%s, %d matched), want a by LLM_D, 0 matched", d.Replica, d.Reason, d.MatchedTokens)
	}
	lk.resp = loads(2, 1, 0)
	if d := decidePeerReq(t, g); d.Replica != "a" || d.MatchedTokens != 64 {
		t.Fatalf("second: %s (%d matched), want a by its prefix (64 matched)", d.Replica, d.MatchedTokens)
	}
	if !lk.reqs[0].IncludeLoad {
		t.Fatal("llm-d's lookup must ask for the loads")
	}
	// a's KV usage at 1 costs it 2: a 3 × 1 + 0 + 0 = 3, b 0 + 1 + 2 = 3,
	// c 0 + 2 + 2 = 4: c.
	lk.resp.Loads[0].Pressure = 1
	if d := decidePeerReq(t, g); d.Replica != "c" {
		t.Fatalf("third: %s, want c (4 against 3 and 3)", d.Replica)
	}
}

// SGLang asks the cluster nothing; the first pick is the first smallest
// tree, the next copy the best match (rate 1 > 0.3); the load is this
// gateway's requests in flight.
func TestDecide_SGLangCacheAwareWithoutLookup(t *testing.T) {
	lk := &fakeLookup{resp: prefixMatch("c", 64)}
	g := newGW(t, Config{Strategy: StrategySGLang, Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: lk})
	d := decidePeerReq(t, g)
	if d.Replica != "a" || d.Reason != ReasonSGLang || d.MatchedTokens != 0 {
		t.Fatalf("first: %s (%s, %d), want a by SGLANG, 0 matched", d.Replica, d.Reason, d.MatchedTokens)
	}
	d.Start("a")
	if d := decidePeerReq(t, g); d.Replica != "a" || d.MatchedTokens != 64 {
		t.Fatalf("second: %s (%d matched), want a, 64 matched", d.Replica, d.MatchedTokens)
	}
	if lk.calls() != 0 {
		t.Fatalf("sglang asked the cluster %d times, want 0", lk.calls())
	}
}

func TestParseStrategy_Peers(t *testing.T) {
	for _, s := range []Strategy{StrategyDynamo, StrategyLLMD, StrategySGLang} {
		if got, err := ParseStrategy(string(s)); err != nil || got != s {
			t.Fatalf("ParseStrategy(%q) = %q, %v", s, got, err)
		}
	}
}
