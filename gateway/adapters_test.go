package gateway

import (
	"context"
	"sync"
	"testing"

	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/prompt"
)

// modelPrompts gives every request n tokens and records the models it
// was asked to tokenize for.
type modelPrompts struct {
	n      int
	mu     sync.Mutex
	models []string
}

func (m *modelPrompts) Tokens(_ context.Context, req *openai.Request) (prompt.Prompt, error) {
	m.mu.Lock()
	m.models = append(m.models, req.Model)
	m.mu.Unlock()
	return prompt.Prompt{Model: req.Model, TokenIDs: seq(m.n)}, nil
}

// An adapter's request is keyed with the base model's prompt and looked
// up in the base model's partition under the adapter id; a base
// model's request on the same gateway carries no adapter id.
func TestAdapter_KeyedOnTheBaseModelWithTheAdapterID(t *testing.T) {
	lk := &fakeLookup{resp: prefixMatch("b", 32)}
	mp := &modelPrompts{n: 40}
	g := newGW(t, Config{Prompts: mp, Lookup: lk, BlockSizes: map[string]int{"base": 8}})
	req := chatReq(t, `{"model": "sql", "messages": [{"role": "user", "content": "x"}]}`)
	if _, err := g.Decide(context.Background(), Request{OpenAI: req, Candidates: abc, Base: "base", Adapter: "sql"}); err != nil {
		t.Fatal(err)
	}
	base := chatReq(t, `{"model": "base", "messages": [{"role": "user", "content": "x"}]}`)
	if _, err := g.Decide(context.Background(), Request{OpenAI: base, Candidates: abc}); err != nil {
		t.Fatal(err)
	}
	a, b := lk.reqs[0], lk.reqs[1]
	if mp.models[0] != "base" || a.GetModelId() != "base" || a.GetAdapterId() != "sql" || len(a.GetBlockHashes()) != 5 {
		t.Fatalf("adapter request tokenized for %q, looked up model %q adapter %q with %d blocks; want base, base, sql, 5 blocks of 8",
			mp.models[0], a.GetModelId(), a.GetAdapterId(), len(a.GetBlockHashes()))
	}
	if b.GetModelId() != "base" || b.GetAdapterId() != "" || len(b.GetBlockHashes()) != 5 {
		t.Fatalf("base request looked up model %q adapter %q", b.GetModelId(), b.GetAdapterId())
	}
	if req.Model != "sql" {
		t.Fatalf("the caller's request was changed: model %q", req.Model)
	}
}

// Residency: with no hint the replica with the adapter loaded wins over
// one that must load it, and one full of other adapters is passed over
// even with a long cached prefix; a long enough cached prefix outweighs
// the load of a replica with a free slot.
func TestAdapter_ResidencyCharges(t *testing.T) {
	res := []Residency{{Active: 1, MaxLoRA: 2}, {Loaded: true, Active: 2, MaxLoRA: 2}, {Active: 2, MaxLoRA: 2}}
	decide := func(lk Lookup) *Decision {
		t.Helper()
		g := newGW(t, Config{Prompts: &modelPrompts{n: 2048}, Lookup: lk})
		req := chatReq(t, `{"model": "sql", "messages": [{"role": "user", "content": "x"}]}`)
		d, err := g.Decide(context.Background(), Request{OpenAI: req, Candidates: abc, Base: "base", Adapter: "sql", Residency: res})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := decide(nil); d.Replica != "b" {
		t.Fatalf("no hint: picked %s, want b (loaded)", d.Replica)
	}
	if d := decide(&fakeLookup{resp: prefixMatch("c", 2000)}); d.Replica != "b" {
		t.Fatalf("hint on the full c: picked %s, want b", d.Replica)
	}
	if d := decide(&fakeLookup{resp: prefixMatch("a", 2000)}); d.Replica != "a" || d.Reason != "PREFIX_MATCH" {
		t.Fatalf("hint on a (a free slot): picked %s (%s), want a by PREFIX_MATCH", d.Replica, d.Reason)
	}
}

// This gateway's own requests in flight count as loaded: a second
// request of the adapter follows the first without a residency report.
func TestAdapter_InFlightCountsAsLoaded(t *testing.T) {
	g := newGW(t, Config{Prompts: &modelPrompts{n: 64}})
	req := chatReq(t, `{"model": "sql", "messages": [{"role": "user", "content": "x"}]}`)
	d1, err := g.Decide(context.Background(), Request{OpenAI: req, Candidates: abc, Base: "base", Adapter: "sql"})
	if err != nil {
		t.Fatal(err)
	}
	f := d1.Start(d1.Replica)
	for range 3 {
		d, err := g.Decide(context.Background(), Request{OpenAI: req, Candidates: abc, Base: "base", Adapter: "sql"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Replica != d1.Replica {
			t.Fatalf("picked %s, want %s where the adapter is in flight", d.Replica, d1.Replica)
		}
	}
	f.Done()
	if n := len(g.adapterInflight); n != 0 {
		t.Fatalf("%d adapter entries in flight after Done", n)
	}
}

// Holders widens the lookup beyond the candidates: a prefill pick among
// two candidates asks for as many hints as replicas may hold the blocks.
func TestHolders_WidenTheLookup(t *testing.T) {
	lk := &fakeLookup{resp: prefixMatch("b", 32)}
	g := newGW(t, Config{Prompts: &modelPrompts{n: 64}, Lookup: lk})
	req := chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`)
	if _, err := g.Decide(context.Background(), Request{OpenAI: req, Candidates: []string{"a", "b"}, Holders: 6}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Decide(context.Background(), Request{OpenAI: req, Candidates: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	if a, b := lk.reqs[0].GetMaxReplicas(), lk.reqs[1].GetMaxReplicas(); a != 6 || b != 2 {
		t.Fatalf("max_replicas %d and %d, want 6 (holders) and 2 (the candidates)", a, b)
	}
}
