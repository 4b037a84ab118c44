package gateway

import (
	"context"
	"errors"
	"slices"
	"testing"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/openai"
)

// A completion whose prompt is token ids is keyed with those ids, as
// given, by a gateway without a models directory; a text prompt on the
// same gateway has no key.
func TestTokenIDPromptKeyedWithoutModels(t *testing.T) {
	lk := &fakeLookup{resp: prefixMatch("b", 32)}
	g := newGW(t, Config{Lookup: lk})
	// 40 ids: two full blocks of 16, the tail not keyed.
	ids := seq(40)
	body := `{"model": "qwen3", "prompt": [` + joinIDs(ids) + `]}`
	req, err := openai.DecodeCompletion([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	d, err := g.Decide(context.Background(), Request{OpenAI: req, Candidates: abc})
	if err != nil {
		t.Fatal(err)
	}
	if d.NoKey != nil || d.PromptTokens != 40 || d.Blocks != 2 || d.Replica != "b" || d.Reason != "PREFIX_MATCH" {
		t.Fatalf("decision %+v: want keyed (40 tokens, 2 blocks) and b by PREFIX_MATCH", d)
	}
	want := &pb.LookupRouteRequest{}
	if err := client.Fingerprint(want, ids, 16); err != nil {
		t.Fatal(err)
	}
	if got := lk.reqs[0]; !slices.Equal(got.GetBlockHashes(), want.GetBlockHashes()) || got.GetModelId() != "qwen3" {
		t.Fatalf("looked up model %q hashes %v, want qwen3 and the ids' own fingerprint %v", got.GetModelId(), got.GetBlockHashes(), want.GetBlockHashes())
	}

	text, _ := openai.DecodeCompletion([]byte(`{"model": "qwen3", "prompt": "hello"}`))
	d, err = g.Decide(context.Background(), Request{OpenAI: text, Candidates: abc})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(d.NoKey, errNoModels) || lk.calls() != 1 {
		t.Fatalf("text prompt without models: NoKey %v, lookups %d; want errNoModels and no lookup", d.NoKey, lk.calls())
	}
}

func joinIDs(ids []uint32) string {
	b := make([]byte, 0, 4*len(ids))
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendUint(b, id)
	}
	return string(b)
}

func appendUint(b []byte, v uint32) []byte {
	if v >= 10 {
		b = appendUint(b, v/10)
	}
	return append(b, byte('0'+v%10))
}
