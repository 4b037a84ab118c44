package bench

import (
	"context"
	"testing"
)

// Longest-match picks, for every request, an engine holding the most
// cached tokens (checked against every engine's true cache on a generated
// trace with small caches, so caches diverge and evict).
func TestLongestMatch_PicksAnEngineWithTheMostCachedTokens(t *testing.T) {
	cfg := FleetConfig{Engines: 4, CacheBlocks: 40}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	f := NewFleet(cfg, "m", "")
	r := &longestMatch{f: f}
	tr := Generate(GeneratorConfig{Seed: 3, Requests: 1500})
	hits := 0
	for i := range tr.Requests {
		q := &tr.Requests[i]
		at := float64(q.Timestamp) / 1000
		e := r.Route(context.Background(), i, q, at)
		best := 0
		for _, x := range f.Engines {
			best = max(best, x.Cache.CachedRun(q.Blocks()))
		}
		if got := f.Engines[e].Cache.CachedRun(q.Blocks()); got != best {
			t.Fatalf("request %d: longest-match chose engine %d with %d cached blocks, the best holds %d", i, e, got, best)
		}
		if best > 0 {
			hits++
		}
		f.Engines[e].Serve(q, at)
	}
	if hits == 0 {
		t.Fatal("no request had any cached prefix: the test checks nothing")
	}
}

// Ties in cached tokens go to the least loaded engine.
func TestLongestMatch_BreaksTiesByLoad(t *testing.T) {
	cfg := FleetConfig{Engines: 3, CacheBlocks: 100, PrefillTPS: 1000, DecodeTPS: 1}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	f := NewFleet(cfg, "m", "")
	warm := &Request{InputLength: 1024, OutputLength: 1000, HashIDs: []uint64{1, 2}}
	f.Engines[1].Serve(warm, 0)
	f.Engines[2].Serve(warm, 0)
	f.Engines[2].Serve(&Request{InputLength: 512, OutputLength: 1000, HashIDs: []uint64{9}}, 0)
	q := &Request{InputLength: 1536, HashIDs: []uint64{1, 2, 3}}
	// Engines 1 and 2 both hold 1024 tokens; 1 has one request in flight, 2 two.
	if got := LongestMatchChoice(f, q, 1); got != 1 {
		t.Fatalf("longest-match chose %d, want 1", got)
	}
}

func TestRendezvous_StableAndSpread(t *testing.T) {
	counts := make([]int, 8)
	for k := uint64(0); k < 8000; k++ {
		e := rendezvous(k, 8)
		if rendezvous(k, 8) != e {
			t.Fatal("not stable")
		}
		counts[e]++
	}
	for i, c := range counts {
		if c < 800 || c > 1200 {
			t.Fatalf("engine %d got %d of 8000 keys", i, c)
		}
	}
	// Adding a ninth engine moves only the keys it wins (~1/9).
	moved := 0
	for k := uint64(0); k < 8000; k++ {
		if a, b := rendezvous(k, 8), rendezvous(k, 9); a != b {
			if b != 8 {
				t.Fatalf("key %d moved from %d to %d, not to the new engine", k, a, b)
			}
			moved++
		}
	}
	if moved < 600 || moved > 1200 {
		t.Fatalf("%d of 8000 keys moved, want ~889", moved)
	}
}
