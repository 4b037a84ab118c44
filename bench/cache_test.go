package bench

import (
	"slices"
	"testing"
)

func admit(t *testing.T, c *Cache, blocks ...uint64) Admission {
	t.Helper()
	var a Admission
	c.Admit(blocks, &a)
	return a
}

// The cache model against a small trace worked by hand (capacity 4).
func TestCache_LRUHandWorked(t *testing.T) {
	c := NewCache(4)
	a := admit(t, c, 1, 2, 3)
	if len(a.Evicted) != 0 || !slices.Equal(a.Stored, []BlockRun{{0, 3}}) {
		t.Fatalf("first admission %+v, want stored [0,3) and nothing evicted", a)
	}
	// Block 0 of a request is the most recently used, its tail the least.
	if got := c.Keys(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("recency %v, want [1 2 3]", got)
	}
	// [1 4 5]: 1 is cached (run 1); 4 and 5 need 2 slots, 1 is free, so the
	// least recently used block not in the request (3) goes.
	if run := c.CachedRun([]uint64{1, 4, 5}); run != 1 {
		t.Fatalf("cached run %d, want 1", run)
	}
	a = admit(t, c, 1, 4, 5)
	if !slices.Equal(a.Evicted, []uint64{3}) || !slices.Equal(a.Stored, []BlockRun{{1, 3}}) {
		t.Fatalf("admission %+v, want evicted [3], stored [1,3)", a)
	}
	if got := c.Keys(); !slices.Equal(got, []uint64{1, 4, 5, 2}) {
		t.Fatalf("recency %v, want [1 4 5 2]", got)
	}
	a = admit(t, c, 6)
	if !slices.Equal(a.Evicted, []uint64{2}) {
		t.Fatalf("evicted %v, want [2]", a.Evicted)
	}
	if got := c.Keys(); !slices.Equal(got, []uint64{6, 1, 4, 5}) {
		t.Fatalf("recency %v, want [6 1 4 5]", got)
	}
	if r1, r2 := c.CachedRun([]uint64{1, 2, 3}), c.CachedRun([]uint64{1, 4, 5}); r1 != 1 || r2 != 3 {
		t.Fatalf("cached runs %d, %d; want 1, 3", r1, r2)
	}
	// [1 4 7]: one missing block and the cache is full: the least recently
	// used block not in the request (5) goes.
	a = admit(t, c, 1, 4, 7)
	if !slices.Equal(a.Evicted, []uint64{5}) || !slices.Equal(a.Stored, []BlockRun{{2, 3}}) {
		t.Fatalf("admission %+v, want evicted [5], stored [2,3)", a)
	}
	if got := c.Keys(); !slices.Equal(got, []uint64{1, 4, 7, 6}) {
		t.Fatalf("recency %v, want [1 4 7 6]", got)
	}
}

func TestCache_NeverEvictsTheAdmittedRequestsBlocks(t *testing.T) {
	c := NewCache(3)
	admit(t, c, 1, 2)
	admit(t, c, 9) // recency 9 1 2: 1 and 2 are older than 9
	// The tail is 2 and then 1, but they belong to the request: they are
	// pinned, so 9 goes although it is the most recently used.
	a := admit(t, c, 1, 2, 3)
	if !slices.Equal(a.Evicted, []uint64{9}) || !slices.Equal(a.Stored, []BlockRun{{2, 3}}) {
		t.Fatalf("admission %+v, want evicted [9], stored [2,3)", a)
	}
}

func TestCache_StoredRunsSplitAroundPresentBlocks(t *testing.T) {
	c := NewCache(10)
	admit(t, c, 5)
	a := admit(t, c, 1, 5, 6, 7)
	if !slices.Equal(a.Stored, []BlockRun{{0, 1}, {2, 4}}) {
		t.Fatalf("stored %v, want [0,1) and [2,4)", a.Stored)
	}
}

func TestCache_RequestLongerThanTheCacheKeepsItsHead(t *testing.T) {
	c := NewCache(2)
	a := admit(t, c, 1, 2, 3)
	if !slices.Equal(a.Stored, []BlockRun{{0, 2}}) || c.Len() != 2 || c.CachedRun([]uint64{1, 2, 3}) != 2 {
		t.Fatalf("admission %+v, len %d: want the first 2 blocks cached", a, c.Len())
	}
}

// The TTFT model against hand-worked numbers: prefill 1000 tok/s, decode
// 100 tok/s, one prefill at a time.
func TestEngine_TTFTModelHandWorked(t *testing.T) {
	e := NewEngine(0, FleetConfig{Engines: 1, CacheBlocks: 10, PrefillTPS: 1000, DecodeTPS: 100})
	// A: 1124 tokens (2 full blocks + 100), nothing cached: TTFT 1.124 s;
	// prefill busy until 1.124, decoding until 2.124.
	a := e.Serve(&Request{InputLength: 1124, OutputLength: 100, HashIDs: []uint64{10, 11, 12}}, 0)
	if a.CachedTokens != 0 || !near(a.TTFTS, 1.124) || a.WaitS != 0 {
		t.Fatalf("A %+v, want 0 cached, TTFT 1.124", a)
	}
	// B at 0.5: both full blocks cached (1024 tokens), nothing to prefill,
	// but it waits for A's prefill: TTFT = wait = 0.624.
	b := e.Serve(&Request{InputLength: 1024, OutputLength: 0, HashIDs: []uint64{10, 11}}, 0.5)
	if b.CachedTokens != 1024 || !near(b.WaitS, 0.624) || !near(b.TTFTS, 0.624) {
		t.Fatalf("B %+v, want 1024 cached, wait and TTFT 0.624", b)
	}
	// C at 0.6: 4 blocks, only block 10 cached (512), 1536 to prefill after
	// waiting 0.524: TTFT 2.06.
	c := e.Serve(&Request{InputLength: 2048, OutputLength: 0, HashIDs: []uint64{10, 20, 21, 22}}, 0.6)
	if c.CachedTokens != 512 || !near(c.WaitS, 0.524) || !near(c.TTFTS, 2.06) {
		t.Fatalf("C %+v, want 512 cached, wait 0.524, TTFT 2.06", c)
	}
	if l := e.Load(1.0); l != 3 {
		t.Fatalf("load at 1.0 = %d, want 3 (A, B, C in flight)", l)
	}
	// At 2.2: A done (2.124), B done (1.124), C finishes at 2.66.
	if l := e.Load(2.2); l != 1 {
		t.Fatalf("load at 2.2 = %d, want 1", l)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
