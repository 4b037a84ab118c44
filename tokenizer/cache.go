package tokenizer

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// maxCachedWordBytes bounds the length of a piece kept in the word cache:
// longer pieces are rare (and for SentencePiece models without a
// pre-tokenizer, whole prompts), so caching them would only evict the
// short, repeated ones that make system prompts cheap.
const maxCachedWordBytes = 256

// Sizes of a cache generation.
const (
	// arenaBytesPerWord is the arena room per entry: a 4-byte header, the
	// word and 4 bytes per id, about 20 bytes for an English word. A
	// generation whose arena fills before its entry count (long words)
	// is full all the same.
	arenaBytesPerWord = 32
	// maxEntryBytes is the largest entry: a 256-byte word of 256 ids.
	maxEntryBytes = 4 + maxCachedWordBytes + 4*maxCachedWordBytes
	// maxCacheCapacity keeps arena offsets within 32 bits.
	maxCacheCapacity = 1 << 24
)

// wordCache is a bounded, concurrency-safe map from a pre-tokenized piece
// to its ids. It keeps two generations: lookups check the current one,
// then the previous one (promoting the hit); when the current one is full
// it becomes the previous one and the old previous one is dropped. So it
// holds at most 2×capacity entries and keeps whatever was used during the
// last capacity insertions, at the cost of one swap instead of LRU
// bookkeeping on every hit.
//
// A prompt looks up every word, so a lookup must cost little more than
// the memory it touches: a generation is an open-addressing table of
// 8-byte slots over one byte arena where each entry's word and ids sit
// together, so that a hit reads two cache lines (a Go map of strings to
// slices reads four: its control word, slot, key bytes and ids). Reads
// take no lock: an entry is written once, before the atomic store that
// publishes its slot, and never changed; writers (misses) take mu. The
// arena holds no pointers, so the garbage collector does not scan it.
type wordCache struct {
	mu       sync.Mutex // serializes insertions
	capacity int
	seed     maphash.Seed
	cur      atomic.Pointer[cacheGen]
	prev     atomic.Pointer[cacheGen]
}

// cacheGen is one generation. A slot is 0 (free) or the top 32 bits of
// the word's hash above the arena offset of its entry plus one. An entry
// is the word's length (2 bytes), its number of ids (2 bytes), the word,
// then the ids (4 bytes each, little-endian). Fewer than half the slots
// are used, so every probe sequence ends at a free slot.
type cacheGen struct {
	slots []atomic.Uint64
	mask  uint64
	arena []byte // its length is fixed: readers never see it change
	used  int    // arena bytes written (under wordCache.mu)
	n     int    // entries (under wordCache.mu)
}

// newWordCache returns a cache of the given capacity (at most
// maxCacheCapacity); capacity <= 0 disables caching.
func newWordCache(capacity int) *wordCache {
	if capacity <= 0 {
		return nil
	}
	c := &wordCache{capacity: min(capacity, maxCacheCapacity), seed: maphash.MakeSeed()}
	c.cur.Store(c.newGen())
	return c
}

func (c *wordCache) newGen() *cacheGen {
	size := 16
	for size < 2*c.capacity {
		size <<= 1
	}
	return &cacheGen{slots: make([]atomic.Uint64, size), mask: uint64(size - 1),
		arena: make([]byte, c.capacity*arenaBytesPerWord+maxEntryBytes)}
}

// appendCached appends the cached ids of w to dst; ok is false (and dst
// unchanged) when w is not cached.
func (c *wordCache) appendCached(dst []uint32, w string) (_ []uint32, ok bool) {
	if c == nil || len(w) > maxCachedWordBytes {
		return dst, false
	}
	h := maphash.String(c.seed, w)
	g := c.cur.Load()
	if off, ok := g.find(w, h); ok {
		return g.appendIDs(dst, off), true
	}
	p := c.prev.Load()
	if p == nil {
		return dst, false
	}
	off, ok := p.find(w, h)
	if !ok {
		return dst, false
	}
	start := len(dst)
	dst = p.appendIDs(dst, off)
	c.insert(w, h, dst[start:])
	return dst, true
}

// put stores a copy of ids for w.
func (c *wordCache) put(w string, ids []uint32) {
	if c == nil || len(w) > maxCachedWordBytes || len(ids) > 0xFFFF {
		return
	}
	c.insert(w, maphash.String(c.seed, w), ids)
}

// insert adds w (hash h) to the current generation unless it is there,
// starting a new generation when the current one is full.
func (c *wordCache) insert(w string, h uint64, ids []uint32) {
	size := 4 + len(w) + 4*len(ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.cur.Load()
	if _, ok := g.find(w, h); ok {
		return
	}
	if g.n >= c.capacity || g.used+size > len(g.arena) {
		c.prev.Store(g)
		g = c.newGen()
		c.cur.Store(g)
	}
	off := g.used
	e := g.arena[off : off+size]
	binary.LittleEndian.PutUint16(e, uint16(len(w)))
	binary.LittleEndian.PutUint16(e[2:], uint16(len(ids)))
	copy(e[4:], w)
	for i, id := range ids {
		binary.LittleEndian.PutUint32(e[4+len(w)+4*i:], id)
	}
	g.used += size
	g.n++
	for i := h & g.mask; ; i = (i + 1) & g.mask {
		if g.slots[i].Load() == 0 {
			g.slots[i].Store(h>>32<<32 | uint64(off+1))
			return
		}
	}
}

// find returns the arena offset of w's entry (hash h).
func (g *cacheGen) find(w string, h uint64) (int, bool) {
	tag := h >> 32
	for i := h & g.mask; ; i = (i + 1) & g.mask {
		s := g.slots[i].Load()
		if s == 0 {
			return 0, false
		}
		if s>>32 != tag {
			continue
		}
		off := int(uint32(s)) - 1
		n := int(binary.LittleEndian.Uint16(g.arena[off:]))
		if n == len(w) && string(g.arena[off+4:off+4+n]) == w {
			return off, true
		}
	}
}

// appendIDs appends the ids of the entry at off to dst.
func (g *cacheGen) appendIDs(dst []uint32, off int) []uint32 {
	n := int(binary.LittleEndian.Uint16(g.arena[off:]))
	k := int(binary.LittleEndian.Uint16(g.arena[off+2:]))
	for p := off + 4 + n; k > 0; k-- {
		dst = append(dst, binary.LittleEndian.Uint32(g.arena[p:]))
		p += 4
	}
	return dst
}
