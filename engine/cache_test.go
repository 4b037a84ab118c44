package engine

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
	if len(a.Evicted) != 0 || !slices.Equal(a.Stored, []BlockRun{{Start: 0, End: 3}}) {
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
	if !slices.Equal(a.Evicted, []uint64{3}) || !slices.Equal(a.Stored, []BlockRun{{Start: 1, End: 3}}) {
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
	if !slices.Equal(a.Evicted, []uint64{5}) || !slices.Equal(a.Stored, []BlockRun{{Start: 2, End: 3}}) {
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
	if !slices.Equal(a.Evicted, []uint64{9}) || !slices.Equal(a.Stored, []BlockRun{{Start: 2, End: 3}}) {
		t.Fatalf("admission %+v, want evicted [9], stored [2,3)", a)
	}
}

func TestCache_StoredRunsSplitAroundPresentBlocks(t *testing.T) {
	c := NewCache(10)
	admit(t, c, 5)
	a := admit(t, c, 1, 5, 6, 7)
	if !slices.Equal(a.Stored, []BlockRun{{Start: 0, End: 1}, {Start: 2, End: 4}}) {
		t.Fatalf("stored %v, want [0,1) and [2,4)", a.Stored)
	}
}

func TestCache_RequestLongerThanTheCacheKeepsItsHead(t *testing.T) {
	c := NewCache(2)
	a := admit(t, c, 1, 2, 3)
	if !slices.Equal(a.Stored, []BlockRun{{Start: 0, End: 2}}) || c.Len() != 2 || c.CachedRun([]uint64{1, 2, 3}) != 2 {
		t.Fatalf("admission %+v, len %d: want the first 2 blocks cached", a, c.Len())
	}
}

// Fits counts the pinned blocks of other requests against the room and
// the request's own pinned blocks once: capacity 4 with [1 2] pinned
// leaves room for a request of two new blocks, or of [1 2] plus two
// more, but not three new ones; with a reserve of 1 the second no longer
// fits either; [1 3] with a reserve of 1 does (1 is
// already pinned), [1 3 4] does not.
func TestCache_FitsCountsOtherRequestsPins(t *testing.T) {
	c := NewCache(4)
	var a Admission
	if n := c.AdmitPinned([]uint64{1, 2}, &a, 0); n != 2 {
		t.Fatalf("pinned %d blocks, want 2", n)
	}
	if c.PinnedBlocks() != 2 {
		t.Fatalf("PinnedBlocks %d, want 2", c.PinnedBlocks())
	}
	cases := []struct {
		blocks  []uint64
		reserve int
		want    bool
	}{
		{[]uint64{3, 4}, 0, true},
		{[]uint64{3, 4, 5}, 0, false},
		{[]uint64{1, 2, 3, 4}, 0, true},
		{[]uint64{1, 2, 3, 4}, 1, false},
		{[]uint64{1, 3}, 1, true},
		{[]uint64{1, 3, 4}, 1, false},
		{[]uint64{1, 2, 3, 4, 5}, 0, false},
	}
	for _, tc := range cases {
		if got := c.Fits(tc.blocks, tc.reserve); got != tc.want {
			t.Errorf("Fits(%v, reserve %d) = %v, want %v", tc.blocks, tc.reserve, got, tc.want)
		}
	}
	c.Unpin([]uint64{1, 2})
	if c.PinnedBlocks() != 0 || !c.Fits([]uint64{3, 4, 5, 6}, 0) {
		t.Fatalf("after Unpin: PinnedBlocks %d, Fits(4 new) %v; want 0, true", c.PinnedBlocks(), c.Fits([]uint64{3, 4, 5, 6}, 0))
	}
}

// Drop removes only unpinned blocks: a cancelled prefill's blocks leave
// the cache once unpinned, a block another request still pins stays.
func TestCache_DropLeavesPinnedBlocks(t *testing.T) {
	c := NewCache(8)
	var a Admission
	c.AdmitPinned([]uint64{1, 2}, &a, 0)    // a running request
	c.AdmitPinned([]uint64{1, 2, 3}, &a, 0) // the cancelled one
	c.Unpin([]uint64{1, 2, 3})
	c.Drop([]uint64{1, 2, 3, 99})
	if got := c.Keys(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("cache %v after Drop, want [1 2] (still pinned)", got)
	}
	if c.Pinned(1) != 1 || c.PinnedBlocks() != 2 {
		t.Fatalf("pins of 1: %d, PinnedBlocks %d; want 1, 2", c.Pinned(1), c.PinnedBlocks())
	}
}
