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

// The oracle picks the lowest predicted TTFT: queue wait (the engine's
// prefill backlog) + uncached tokens / prefill speed. Engine 0 holds the
// request's 4 blocks (2048 tokens) behind a queue; engine 1 is idle and
// cold (2048 / 1000 = 2.048 s). Prefill 1000 tokens/s.
func TestOracle_LowestPredictedTTFT(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue []*Request // served on engine 0 at 0, after the request that caches the prefix
		at    float64
		ttft  [2]float64 // predicted, by hand
		want  int
	}{
		// The prefix's own prefill ends at 2.048; at 1 s the wait is 1.048
		// and only the last block is left to prefill (the last token is
		// always computed), 0.512 s: 1.56 < 2.048.
		{"short queue: the cached prefix wins", nil, 1, [2]float64{1.56, 2.048}, 0},
		// A cold 5000-token request behind it: the backlog runs to 7.048,
		// a 6.048 s wait at 1 s plus 0.512 against 2.048 s cold.
		{"long queue: the idle cold engine wins", []*Request{{InputLength: 5000, HashIDs: ids(100, 10)}}, 1,
			[2]float64{6.56, 2.048}, 1},
		// At 5.512 s the same queue has 1.536 s left, plus 0.512: a tie
		// broken by fewer requests in flight (engine 0 has two, engine 1
		// none).
		{"equal TTFT: fewer in flight", []*Request{{InputLength: 5000, HashIDs: ids(100, 10)}}, 5.512,
			[2]float64{2.048, 2.048}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := FleetConfig{Engines: 2, CacheBlocks: 100, PrefillTPS: 1000, DecodeTPS: 1}
			if err := cfg.fill(); err != nil {
				t.Fatal(err)
			}
			f := NewFleet(cfg, "m", "")
			// Long outputs keep every request in flight for the test.
			f.Engines[0].Serve(&Request{InputLength: 2048, OutputLength: 1000, HashIDs: ids(1, 4)}, 0)
			for _, q := range tc.queue {
				q.OutputLength = 1000
				f.Engines[0].Serve(q, 0)
			}
			q := &Request{InputLength: 2048, HashIDs: ids(1, 4)}
			for e, want := range tc.ttft {
				if got := f.Engines[e].PredictTTFT(q, tc.at); !near(got, want) {
					t.Errorf("engine %d: predicted TTFT %v, want %v", e, got, want)
				}
			}
			got := OracleChoice(f, q, tc.at)
			if got != tc.want {
				t.Fatalf("oracle chose %d, want %d", got, tc.want)
			}
			// The prediction is what the engine then does.
			if s := f.Engines[got].Serve(q, tc.at); !near(s.TTFTS, tc.ttft[got]) {
				t.Fatalf("served with TTFT %v, predicted %v", s.TTFTS, tc.ttft[got])
			}
		})
	}
}

// Among engines of equal predicted TTFT the oracle takes the one with
// fewer requests in flight, then the lower id: engine 0 decodes a
// request, engines 1 and 2 are idle; all three are cold for q.
func TestOracle_TiesByFewerInFlightThenLowerID(t *testing.T) {
	cfg := FleetConfig{Engines: 3, CacheBlocks: 100, PrefillTPS: 1000, DecodeTPS: 1}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	f := NewFleet(cfg, "m", "")
	// Prefill [0, 0.512], then decoding for 1000 s.
	f.Engines[0].Serve(&Request{InputLength: 512, OutputLength: 1000, HashIDs: []uint64{7}}, 0)
	q := &Request{InputLength: 1024, HashIDs: []uint64{1, 2}}
	if got := OracleChoice(f, q, 1); got != 1 {
		t.Fatalf("oracle chose %d, want 1 (0 has a request in flight, 1 and 2 tie, lower id)", got)
	}
}
