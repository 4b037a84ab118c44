package loadgen

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/prompt"
	"github.com/inference-cache/inference-cache/simengine"
)

// enginePrompter prefills what the proxy keys: package prompt's render
// and tokenization (the sim-engine command's wiring).
type enginePrompter struct{ reg *prompt.Registry }

func (p enginePrompter) PromptTokens(ctx context.Context, _ string, req *openai.Request) ([]uint32, error) {
	pr, err := p.reg.Tokens(ctx, req)
	return pr.TokenIDs, err
}

// Through a sim engine on the Qwen3 template and tokenizer, a record that
// shares two leading hash ids with an earlier one finds their 1,024
// tokens (and the template's head) in the engine's prefix cache, cut to
// whole 16-token blocks, and the engine counts the prompt as the record's
// input length plus the template's tokens.
func TestReplay_SharedHashIDsAreEngineCacheHits(t *testing.T) {
	eng, err := simengine.New(simengine.Config{Model: "qwen3", KVBlocks: 4096, PrefillTPS: 1e6, DecodeTPS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	srv := httptest.NewServer(simengine.NewServer(eng, enginePrompter{prompt.New(fixtures.ModelsDir(t, "qwen3"), prompt.Options{})}, simengine.ServerOptions{}))
	defer srv.Close()
	recs := []bench.Request{
		{Timestamp: 0, InputLength: 1300, OutputLength: 4, HashIDs: []uint64{0, 1, 2}},
		{Timestamp: 0, InputLength: 2000, OutputLength: 4, HashIDs: []uint64{0, 1, 3, 4}},
	}
	// One replay each, so the first is prefilled before the second
	// arrives.
	var results []Result
	for i := range recs {
		run, err := Replay(context.Background(), recs[i:i+1], Config{Target: srv.URL, Model: "qwen3"})
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, run.Results...)
	}
	for _, r := range results {
		if r.Failed() || r.OutputTokens != 4 || r.PromptTokens <= r.TraceInputLength || r.PromptTokens > r.TraceInputLength+16 {
			t.Fatalf("result %+v: want success, 4 output tokens, and prompt tokens = input length + a few template tokens", r)
		}
	}
	// "<|im_start|>user\n" is 3 tokens: 3 + 1024 shared, 1024 of them in
	// whole 16-token blocks.
	if got := results[1].CachedTokens; got != 1024 {
		t.Fatalf("second request: %d cached tokens, want 1024 (the template's 3 + two shared blocks' 1024, in whole blocks of 16)", got)
	}
	if got := results[0].CachedTokens; got != 0 {
		t.Fatalf("first request: %d cached tokens on a cold engine", got)
	}
}
