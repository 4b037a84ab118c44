package bench

import "testing"

// The TTFT model against hand-worked numbers: prefill 1000 tok/s, decode
// 100 tok/s, one prefill at a time.
func TestEngine_TTFTModelHandWorked(t *testing.T) {
	e := NewEngine(0, FleetConfig{Engines: 1, CacheBlocks: 10, PrefillTPS: 1000, DecodeTPS: 100})
	// A: 1124 tokens (2 full blocks + 100), nothing cached: TTFT 1.124 s;
	// prefill busy until 1.124, then 99 more tokens at 10 ms: done 2.114.
	a := e.Serve(&Request{InputLength: 1124, OutputLength: 100, HashIDs: []uint64{10, 11, 12}}, 0)
	if a.CachedTokens != 0 || !near(a.TTFTS, 1.124) || a.WaitS != 0 || !near(a.DoneAt, 2.114) {
		t.Fatalf("A %+v, want 0 cached, TTFT 1.124, done 2.114", a)
	}
	// B at 0.5: both full blocks cached, but its last token is always
	// computed, so its last block is too: 512 cached, 512 to prefill
	// (0.512 s) after waiting 0.624 for A's prefill: TTFT 1.136.
	b := e.Serve(&Request{InputLength: 1024, OutputLength: 0, HashIDs: []uint64{10, 11}}, 0.5)
	if b.CachedTokens != 512 || !near(b.WaitS, 0.624) || !near(b.TTFTS, 1.136) {
		t.Fatalf("B %+v, want 512 cached, wait 0.624, TTFT 1.136", b)
	}
	// C at 0.6: 4 blocks, only block 10 cached (512), 1536 to prefill after
	// waiting for B's prefill (to 1.636, 1.036 s): TTFT 2.572.
	c := e.Serve(&Request{InputLength: 2048, OutputLength: 0, HashIDs: []uint64{10, 20, 21, 22}}, 0.6)
	if c.CachedTokens != 512 || !near(c.WaitS, 1.036) || !near(c.TTFTS, 2.572) {
		t.Fatalf("C %+v, want 512 cached, wait 1.036, TTFT 2.572", c)
	}
	if l := e.Load(1.0); l != 3 {
		t.Fatalf("load at 1.0 = %d, want 3 (A, B, C in flight)", l)
	}
	// At 2.2: A done (2.114), B done (1.636), C finishes at 3.172.
	if l := e.Load(2.2); l != 1 {
		t.Fatalf("load at 2.2 = %d, want 1", l)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
