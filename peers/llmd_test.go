package peers

import (
	"math/rand/v2"
	"testing"
)

// The default profile's score, worked by hand: 3 × prefix + 2 × queue +
// 2 × (1 − KV usage).
func TestLLMDScores_DefaultWeights(t *testing.T) {
	c := DefaultLLMDConfig()
	eps := []LLMDEndpoint{
		{MatchedBlocks: 8, Waiting: 4, KVUsage: 0.5}, // 3×0.8 + 2×0 + 2×0.5 = 3.4
		{MatchedBlocks: 0, Waiting: 0, KVUsage: 0.1}, // 0 + 2×1 + 2×0.9 = 3.8
		{MatchedBlocks: 2, Waiting: 2, KVUsage: 0},   // 3×0.2 + 2×0.5 + 2 = 3.6
	}
	got := LLMDScores(c, 10, eps, nil)
	want := []float64{3.4, 3.8, 3.6}
	for i := range want {
		if d := got[i] - want[i]; d > 1e-9 || d < -1e-9 {
			t.Fatalf("scores %v, want %v", got, want)
		}
	}
	if PickMax(got, rand.New(rand.NewPCG(1, 1))) != 1 {
		t.Fatalf("pick of %v, want 1", got)
	}
}

// Equal queues score 1 each; a request without full blocks has prefix 0;
// matching counts at most MaxPrefixBlocks of the request.
func TestLLMDScores_Edges(t *testing.T) {
	c := DefaultLLMDConfig()
	got := LLMDScores(c, 0, []LLMDEndpoint{{MatchedBlocks: 3, Waiting: 5}, {Waiting: 5, KVUsage: 1}}, nil)
	if got[0] != 4 || got[1] != 2 {
		t.Fatalf("scores %v, want [4 2]", got)
	}
	// 300 blocks capped at 256, 256 matched: prefix 1.
	got = LLMDScores(c, 300, []LLMDEndpoint{{MatchedBlocks: 256}}, got)
	if got[0] != 3+2+2 {
		t.Fatalf("capped prefix: score %v, want 7", got[0])
	}
}

// The max-score picker takes every tie.
func TestPickMax_TiesAtRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	seen := map[int]int{}
	for range 300 {
		seen[PickMax([]float64{1, 5, 5, 2, 5}, rng)]++
	}
	if len(seen) != 3 || seen[1] < 60 || seen[2] < 60 || seen[4] < 60 {
		t.Fatalf("picks %v, want indexes 1, 2 and 4 about equally", seen)
	}
}

// The bounds hold the same tokens at another block size: 256 blocks of
// 16 tokens are 8 blocks of 512; 31250 of 16 are 976 of 512.
func TestLLMDConfig_ForBlockSize(t *testing.T) {
	c := DefaultLLMDConfig().ForBlockSize(512)
	if c.MaxPrefixBlocks != 8 || c.LRUCapacity != 976 {
		t.Fatalf("at 512 tokens per block: %d, %d; want 8, 976", c.MaxPrefixBlocks, c.LRUCapacity)
	}
	if c := DefaultLLMDConfig().ForBlockSize(16); c != DefaultLLMDConfig() {
		t.Fatalf("at 16: %+v, want the defaults", c)
	}
	if s := DefaultSGLangConfig().ForBlockSize(512); s.TreeBlocks != 1<<15 {
		t.Fatalf("SGLang's tree at 512: %d blocks, want 32768", s.TreeBlocks)
	}
}
