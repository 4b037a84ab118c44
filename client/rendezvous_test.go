package client

import (
	"testing"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// The two hashes of the rendezvous against their published reference
// values: FNV-1a 64 (the FNV test vectors of draft-eastlake-fnv:
// "a" and "foobar") and SplitMix64's first output from state 0
// (Steele, Lea, Flood 2014; the reference C of xoshiro's authors).
func TestRendezvous_HashesMatchTheirReferences(t *testing.T) {
	for s, want := range map[string]uint64{"": 0xcbf29ce484222325, "a": 0xaf63dc4c8601ec8c, "foobar": 0x85944171f73967e8} {
		if got := fnv1a64(s); got != want {
			t.Errorf("fnv1a64(%q) = %#x, want %#x", s, got, want)
		}
	}
	if got := splitmix64(0); got != 0xe220a8397b1dcdaf {
		t.Errorf("splitmix64(0) = %#x, want 0xe220a8397b1dcdaf", got)
	}
}

func TestRendezvousKey_TakesTheLeadingBlocks(t *testing.T) {
	hs := []uint64{11, 12, 13, 14, 15, 16}
	for _, c := range []struct {
		hashes []uint64
		bs     int
		want   uint64
	}{
		{nil, 16, 0},              // no full block: no key
		{hs, 0, 0},                // bad block size: no key
		{hs, 512, 14},             // 2048 / 512 = 4 blocks: the 4th hash
		{hs, 1024, 12},            // 2 blocks
		{hs, 4096, 11},            // a block longer than the prefix: the first
		{hs, 16, 16},              // 128 blocks wanted, 6 held: the last
		{[]uint64{0, 0}, 1024, 1}, // a zero hash is still a key
	} {
		if got := RendezvousKey(c.hashes, c.bs); got != c.want {
			t.Errorf("RendezvousKey(%v, %d) = %d, want %d", c.hashes, c.bs, got, c.want)
		}
	}
}

// Pickers of different seeds, seeing the same state, make the same keyed
// pick for every key; and over many keys the picks spread over every
// candidate (the key decides, not a constant).
func TestPickKeyed_SameStateSamePickAcrossPickers(t *testing.T) {
	cands := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT}
	seen := map[string]int{}
	for key := uint64(1); key <= 800; key++ {
		var first string
		for seed := uint64(1); seed <= 4; seed++ {
			cfg := DefaultPickerConfig()
			cfg.Seed = seed
			cfg.Temperature = 0.05 // the keyed softmax over keys is what this test weighs
			p := NewPicker(cfg)
			p.StartOn("c", 300) // the same load on every picker
			d := p.PickKeyed(resp, cands, 4000, key)
			if seed == 1 {
				first = d.Replica
			} else if d.Replica != first {
				t.Fatalf("key %d: seed %d picked %q, seed 1 %q", key, seed, d.Replica, first)
			}
		}
		seen[first]++
	}
	// The keyed draw is the softmax over keys: c, 300 tokens (1.5 scales
	// of 0.05 × 4000) costlier, has weight e^−1.5 = 0.223 against 1 for
	// each idle candidate: 800 × 0.223 / 7.223 ≈ 25 picks, the others
	// ≈ 111 each.
	for _, c := range cands {
		lo, hi := 80, 145
		if c == "c" {
			lo, hi = 10, 45
		}
		if seen[c] < lo || seen[c] > hi {
			t.Errorf("candidate %s picked %d times of 800 keys, want %d to %d: %v", c, seen[c], lo, hi, seen)
		}
	}
}
