package peers

import "testing"

// The cache_aware policy, case by case, with the command line's defaults
// (threshold 0.3, imbalance when max − min > 64 and max > 1.5 × min).
func TestSGLangPick(t *testing.T) {
	c := DefaultSGLangConfig()
	for _, tc := range []struct {
		name   string
		prompt int
		ws     []SGLangWorker
		want   int
		reason string
	}{
		{"imbalanced: the least loaded, whatever the match", 1000,
			[]SGLangWorker{{Load: 100, MatchedTokens: 1000}, {Load: 20}, {Load: 35}}, 1, SGLangBalance},
		{"spread over 64 but max ≤ 1.5 × min: balanced", 1000,
			[]SGLangWorker{{Load: 200, MatchedTokens: 400}, {Load: 134, TreeBlocks: 0}}, 0, SGLangCacheHit},
		{"spread of exactly 64: balanced", 1000,
			[]SGLangWorker{{Load: 64, MatchedTokens: 310}, {Load: 0}}, 0, SGLangCacheHit},
		{"match 0.3 is not above the threshold: the smallest tree", 1000,
			[]SGLangWorker{{MatchedTokens: 300, TreeBlocks: 50}, {TreeBlocks: 70}, {TreeBlocks: 20}}, 2, SGLangCacheMiss},
		{"the best match above the threshold", 1000,
			[]SGLangWorker{{MatchedTokens: 301, TreeBlocks: 9}, {MatchedTokens: 512, TreeBlocks: 90}}, 1, SGLangCacheHit},
		{"nothing routed yet: the first smallest tree", 64,
			[]SGLangWorker{{}, {}, {}}, 0, SGLangCacheMiss},
	} {
		got, reason := SGLangPick(c, tc.prompt, tc.ws)
		if got != tc.want || reason != tc.reason {
			t.Errorf("%s: pick %d (%s), want %d (%s)", tc.name, got, reason, tc.want, tc.reason)
		}
	}
}

// The routed view: leading runs, LRU eviction at capacity, sizes.
func TestRoutedBlocks(t *testing.T) {
	r := NewRoutedBlocks(4)
	r.Add("a", []uint64{1, 2, 3})
	if m := r.Match("a", []uint64{1, 2, 9, 3}); m != 2 {
		t.Fatalf("match %d, want 2 (a leading run)", m)
	}
	r.Add("a", []uint64{1, 7}) // 1 refreshed, 7 new: most recent first 7, 1, 3, 2
	r.Add("a", []uint64{8})    // a fifth block evicts the least recent, 2
	if m := r.Match("a", []uint64{1, 2}); m != 1 || r.Size("a") != 4 {
		t.Fatalf("after eviction: match %d, size %d; want 1, 4", m, r.Size("a"))
	}
	if r.Match("b", []uint64{1}) != 0 || r.Size("b") != 0 {
		t.Fatal("an endpoint never routed to holds nothing")
	}
}
