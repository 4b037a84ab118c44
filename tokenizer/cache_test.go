package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// idsOf is a word's made-up ids for these tests: one per byte, offset by
// the word's length, so that different words have different ids.
func idsOf(w string) []uint32 {
	ids := make([]uint32, len(w))
	for i := range len(w) {
		ids[i] = uint32(w[i]) + uint32(len(w))<<8
	}
	return ids
}

func cached(c *wordCache, w string) ([]uint32, bool) {
	dst := []uint32{7}
	out, ok := c.appendCached(dst, w)
	if !ok {
		if len(out) != 1 {
			panic("a miss changed dst")
		}
		return nil, false
	}
	if out[0] != 7 {
		panic("a hit overwrote dst")
	}
	return out[1:], true
}

func TestWordCache_AppendsTheStoredIDs(t *testing.T) {
	c := newWordCache(16)
	for _, w := range []string{"a", " the", "ünïcödé", strings.Repeat("x", maxCachedWordBytes)} {
		c.put(w, idsOf(w))
	}
	c.put("empty", nil)
	for _, w := range []string{"a", " the", "ünïcödé", strings.Repeat("x", maxCachedWordBytes)} {
		got, ok := cached(c, w)
		if !ok || !cmp.Equal(got, idsOf(w)) {
			t.Errorf("%q: %v, %v; want %v", w, got, ok, idsOf(w))
		}
	}
	if got, ok := cached(c, "empty"); !ok || len(got) != 0 {
		t.Errorf("empty ids: %v, %v; want a hit with none", got, ok)
	}
	for _, w := range []string{"b", " th", "the", strings.Repeat("x", maxCachedWordBytes-1)} {
		if _, ok := cached(c, w); ok {
			t.Errorf("%q: a hit for a word never stored", w)
		}
	}
	long := strings.Repeat("y", maxCachedWordBytes+1)
	c.put(long, idsOf(long))
	if _, ok := cached(c, long); ok {
		t.Errorf("a word over %d bytes was cached", maxCachedWordBytes)
	}
	var disabled *wordCache
	disabled.put("a", []uint32{1})
	if _, ok := cached(disabled, "a"); ok {
		t.Error("a disabled cache hit")
	}
}

// Words whose hashes share a slot's tag are told apart by their bytes.
func TestWordCache_SameHashDifferentWords(t *testing.T) {
	c := newWordCache(16)
	const h = 0x1234_5678_0000_0003
	c.insert("left", h, []uint32{1})
	c.insert("right", h, []uint32{2, 3})
	c.insert("left", h, []uint32{9}) // already there: kept as first stored
	g := c.cur.Load()
	for w, want := range map[string][]uint32{"left": {1}, "right": {2, 3}} {
		off, ok := g.find(w, h)
		if !ok || !cmp.Equal(g.appendIDs(nil, off), want) {
			t.Errorf("%q: found %v, ids %v; want %v", w, ok, g.appendIDs(nil, off), want)
		}
	}
	if _, ok := g.find("lefty", h); ok {
		t.Error("a word never stored found by its hash")
	}
	if g.n != 2 {
		t.Errorf("%d entries, want 2", g.n)
	}
}

// The cache keeps what was used during the last capacity insertions: a
// hit in the previous generation moves the word into the current one.
func TestWordCache_GenerationsKeepRecentlyUsedWords(t *testing.T) {
	c := newWordCache(4)
	w := func(i int) string { return fmt.Sprintf("w%d", i) }
	for i := range 5 { // w4 starts a new generation
		c.put(w(i), idsOf(w(i)))
	}
	if got, ok := cached(c, w(0)); !ok || !cmp.Equal(got, idsOf(w(0))) {
		t.Fatalf("w0 from the previous generation: %v, %v", got, ok)
	}
	for i := 5; i < 8; i++ { // w7 starts a third generation: w1..w3 go
		c.put(w(i), idsOf(w(i)))
	}
	for i := range 8 {
		_, ok := cached(c, w(i))
		if want := i == 0 || i >= 4; ok != want {
			t.Errorf("%s cached: %v, want %v", w(i), ok, want)
		}
	}
}

// A generation whose arena fills is full before its entry count.
func TestWordCache_FullArenaStartsAGeneration(t *testing.T) {
	c := newWordCache(2)
	a, b := strings.Repeat("a", maxCachedWordBytes), strings.Repeat("b", maxCachedWordBytes)
	ida, idb := make([]uint32, maxCachedWordBytes), make([]uint32, maxCachedWordBytes)
	for i := range ida {
		ida[i], idb[i] = uint32(i), uint32(1000+i)
	}
	c.put(a, ida)
	c.put(b, idb)
	if c.cur.Load().n != 1 || c.prev.Load() == nil {
		t.Fatalf("the second long entry did not start a generation")
	}
	for w, want := range map[string][]uint32{a: ida, b: idb} {
		if got, ok := cached(c, w); !ok || !cmp.Equal(got, want) {
			t.Errorf("%.8q...: ids differ or missing (%v)", w, ok)
		}
	}
	c.put("n", make([]uint32, 0x10000))
	if _, ok := cached(c, "n"); ok {
		t.Error("an entry of more than 65535 ids was cached")
	}
}

// Readers and writers at once (run under -race): every hit is the word's
// own ids, across generation swaps.
func TestWordCache_ConcurrentReadersAndWriters(t *testing.T) {
	c := newWordCache(64)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4000 {
				w := fmt.Sprintf("%d-%s", (i*7+g*13)%300, strings.Repeat("z", i%11))
				if got, ok := cached(c, w); ok {
					if !cmp.Equal(got, idsOf(w)) {
						t.Errorf("%q: ids %v, want %v", w, got, idsOf(w))
						return
					}
					continue
				}
				c.put(w, idsOf(w))
			}
		}()
	}
	wg.Wait()
}
