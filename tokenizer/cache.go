package tokenizer

import (
	"strings"
	"sync"
)

// maxCachedWordBytes bounds the length of a piece kept in the word cache:
// longer pieces are rare (and for SentencePiece models without a
// pre-tokenizer, whole prompts), so caching them would only evict the
// short, repeated ones that make system prompts cheap.
const maxCachedWordBytes = 256

// wordCache is a bounded, concurrency-safe map from a pre-tokenized piece
// to its ids. It keeps two generations: lookups check the current one,
// then the previous one (promoting the hit); when the current one is full
// it becomes the previous one and the old previous one is dropped. So it
// holds at most 2×capacity entries and keeps whatever was used during the
// last capacity insertions, at the cost of one map swap instead of LRU
// bookkeeping on every hit.
type wordCache struct {
	mu       sync.RWMutex
	capacity int
	cur      map[string][]uint32
	prev     map[string][]uint32
}

// newWordCache returns a cache of the given capacity; capacity <= 0
// disables caching.
func newWordCache(capacity int) *wordCache {
	if capacity <= 0 {
		return nil
	}
	return &wordCache{capacity: capacity, cur: make(map[string][]uint32, capacity)}
}

// get returns the cached ids of w. The slice must not be modified.
func (c *wordCache) get(w string) ([]uint32, bool) {
	if c == nil || len(w) > maxCachedWordBytes {
		return nil, false
	}
	c.mu.RLock()
	ids, ok := c.cur[w]
	inPrev := false
	if !ok {
		ids, inPrev = c.prev[w]
	}
	c.mu.RUnlock()
	if inPrev {
		c.put(w, ids)
		return ids, true
	}
	return ids, ok
}

// put stores a copy of ids for w.
func (c *wordCache) put(w string, ids []uint32) {
	if c == nil || len(w) > maxCachedWordBytes {
		return
	}
	ids = append([]uint32(nil), ids...)
	c.mu.Lock()
	if len(c.cur) >= c.capacity {
		c.prev, c.cur = c.cur, make(map[string][]uint32, c.capacity)
	}
	// Clone: w may be a slice of a large prompt that must not be retained.
	c.cur[strings.Clone(w)] = ids
	c.mu.Unlock()
}
