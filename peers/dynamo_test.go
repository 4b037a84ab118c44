package peers

import (
	"math"
	"math/rand/v2"
	"testing"
)

func seq(from uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = from + uint64(i)
	}
	return out
}

// Dynamo's potential load, worked by hand from sequence.rs: a worker
// running request A (blocks 1..4, 64 tokens, nothing cached) and request
// B (blocks 1..2 and 9..10, shares A's first two blocks, 2 cached).
func TestDynamoSlots_PotentialCountsDistinctBlocksAndPrefill(t *testing.T) {
	s := NewDynamoSlots(16)
	s.Add(1, "w", seq(1, 4), 64, 0)                       // prefill 64
	s.Add(2, "w", []uint64{1, 2, 9, 10}, 70, 2)           // prefill 70 − 32 = 38
	s.Add(2, "w", []uint64{99}, 1000, 0)                  // duplicate id: ignored
	blocks, tokens := s.Potential("w", seq(1, 6), 100, 3) // new blocks 5, 6; new tokens 100 − 48
	// Active distinct blocks {1,2,3,4,9,10} = 6, plus 2 new = 8.
	// Active prefill 64 + 38 = 102, plus 52 = 154.
	if blocks != 8 || tokens != 154 {
		t.Fatalf("potential = %d blocks, %d tokens; want 8, 154", blocks, tokens)
	}
	s.PrefillDone(1) // A's 64 leave
	if _, tokens = s.Potential("w", nil, 100, 3); tokens != 38+52 {
		t.Fatalf("after A's first token: %d tokens, want 90", tokens)
	}
	s.Free(2) // B's 38 tokens and blocks 9, 10 leave; 1, 2 stay (A holds them)
	blocks, tokens = s.Potential("w", nil, 10, 0)
	if blocks != 4 || tokens != 10 || s.Active() != 1 {
		t.Fatalf("after B's end: %d blocks, %d tokens, %d active; want 4, 10, 1", blocks, tokens, s.Active())
	}
	s.Free(1)
	s.Free(1) // unknown now: ignored
	if blocks, tokens = s.Potential("w", seq(1, 3), 48, 3); blocks != 3 || tokens != 0 {
		t.Fatalf("idle worker: %d blocks, %d tokens; want 3, 0", blocks, tokens)
	}
	if blocks, tokens = s.Potential("never", seq(1, 3), 50, 0); blocks != 3 || tokens != 50 {
		t.Fatalf("unknown worker: %d blocks, %d tokens; want 3, 50", blocks, tokens)
	}
}

// The logit is overlap_weight × prefill tokens / block size + decode
// blocks; an overlap beyond the prompt leaves 0 new tokens.
func TestDynamoLogit(t *testing.T) {
	c := DefaultDynamoConfig(16)
	if got := DynamoLogit(c, 8, 154); got != 154.0/16+8 {
		t.Fatalf("logit %v, want %v", got, 154.0/16+8)
	}
	c.OverlapWeight = 2
	if got := DynamoLogit(c, 3, 32); got != 7 {
		t.Fatalf("weight 2: logit %v, want 7", got)
	}
	if n := NewDynamoSlots(16).NewTokens(40, 3); n != 0 {
		t.Fatalf("new tokens of 40 with 3 cached blocks: %d, want 0", n)
	}
}

// Temperature 0: the lowest logit; ties by the smaller tree; equal trees
// at random (both taken over many draws).
func TestDynamoSelect_ZeroTemperature(t *testing.T) {
	c := DefaultDynamoConfig(16)
	rng := rand.New(rand.NewPCG(1, 2))
	if got := DynamoSelect(c, []float64{5, 3, 7, 3.5}, nil, rng); got != 1 {
		t.Fatalf("pick %d, want 1 (lowest logit)", got)
	}
	if got := DynamoSelect(c, []float64{3, 5, 3}, []int{40, 0, 10}, rng); got != 2 {
		t.Fatalf("tie: pick %d, want 2 (smaller tree)", got)
	}
	seen := map[int]bool{}
	for range 64 {
		seen[DynamoSelect(c, []float64{3, 5, 3}, []int{7, 0, 7}, rng)] = true
	}
	if !seen[0] || !seen[2] || seen[1] {
		t.Fatalf("ties with equal trees picked %v, want both 0 and 2, never 1", seen)
	}
}

// Temperature above 0: logits 0 and 1 at temperature 1 give weights
// exp(0) and exp(−1): P(0) = 1 / (1 + e^−1) ≈ 0.7311.
func TestDynamoSelect_Softmax(t *testing.T) {
	p0 := 1 / (1 + math.Exp(-1))
	for _, tc := range []struct {
		u    float64
		want int
	}{{0.1, 0}, {p0 - 1e-9, 0}, {p0 + 1e-9, 1}, {0.99, 1}} {
		if got := dynamoSoftmax([]float64{0, 1}, 1, tc.u); got != tc.want {
			t.Errorf("u=%v: pick %d, want %d (P(0) = %.4f)", tc.u, got, tc.want, p0)
		}
	}
	// Equal logits: uniform.
	if got := dynamoSoftmax([]float64{2, 2, 2, 2}, 0.5, 0.6); got != 2 {
		t.Fatalf("equal logits, u=0.6: pick %d, want 2", got)
	}
	// Logits 10 and 20 scale by their range: the same as 0 and 1.
	if got := dynamoSoftmax([]float64{10, 20}, 1, p0-1e-9); got != 0 {
		t.Fatalf("range-scaled: pick %d, want 0", got)
	}
}
