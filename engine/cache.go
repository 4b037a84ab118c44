package engine

// Cache is one engine's KV cache model: at most Capacity blocks (keyed by
// a block hash: a trace hash id in the bench, the engine's own chained
// block hash in the sim engine), evicted least recently used first.
//
// The capacity is shared with running requests, as in vLLM's block pool:
// blocks a running request uses are pinned (never evicted), and the blocks
// it reserves for its output take room that cached prefixes cannot use
// (AdmitPinned's reserve), so a loaded engine caches less.
//
// Recency follows vLLM's prefix cache: when a request's blocks are
// admitted, its first block becomes the most recently used and its last
// block the least of them (vLLM frees a finished request's blocks tail
// first), so a prefix is evicted from its end and a shared head (a system
// prompt) outlives the tails that hang off it. Not safe for concurrent use.
type Cache struct {
	capacity int
	idx      map[uint64]int32
	nodes    []lruNode
	free     []int32
	head     int32 // most recently used; -1 when empty
	tail     int32 // least recently used
	stamp    uint64
	pinned   int // blocks holding at least one pin
}

type lruNode struct {
	key        uint64
	prev, next int32
	mark       uint64 // == Cache.stamp while it belongs to the request being admitted
	pins       int32  // running requests using the block; pinned blocks are never evicted
}

// NewCache returns an empty cache of capacity blocks (at least 1).
func NewCache(capacity int) *Cache {
	capacity = max(capacity, 1)
	return &Cache{capacity: capacity, idx: make(map[uint64]int32, capacity), head: -1, tail: -1}
}

// Capacity is the cache's size in blocks.
func (c *Cache) Capacity() int { return c.capacity }

// Len is the number of cached blocks.
func (c *Cache) Len() int { return len(c.idx) }

// Contains reports whether block h is cached (without touching it).
func (c *Cache) Contains(h uint64) bool { _, ok := c.idx[h]; return ok }

// CachedRun returns the length of the leading run of blocks present in the
// cache: the prefix a request with these blocks would not recompute.
func (c *Cache) CachedRun(blocks []uint64) int {
	for i, h := range blocks {
		if _, ok := c.idx[h]; !ok {
			return i
		}
	}
	return len(blocks)
}

// Admission is what admitting a request's blocks changed.
type Admission struct {
	// Evicted are the blocks removed to make room, least recent first.
	Evicted []uint64
	// Stored are the runs of newly stored blocks, as half-open index
	// ranges [Start, End) into the admitted blocks; block Start−1 (when
	// Start > 0) was present, so it is the run's parent.
	Stored []BlockRun
}

// BlockRun is a half-open range of block positions.
type BlockRun struct{ Start, End int }

// Admit inserts a request's blocks (beyond Capacity only the first
// Capacity are cached) and makes them the most recently used, block 0
// first. Blocks already present are kept; missing ones are stored, evicting
// least recently used blocks that are not part of this request. The
// result's slices are appended to a's (pass a reused Admission to avoid
// allocations; its slices are truncated first).
func (c *Cache) Admit(blocks []uint64, a *Admission) { c.admit(blocks, a, 0, false) }

// AdmitPinned admits like Admit into Capacity − reserve entries (reserve
// is the room the running requests' output blocks take), never evicting a
// pinned block, and pins the leading run of the request's blocks that is
// cached afterwards. When pinned blocks leave too little room, only the
// leading blocks that fit are stored (a block without its parent would be
// useless to a prefix match). It returns the length of the pinned run:
// pass blocks[:n] to Unpin when the request ends.
func (c *Cache) AdmitPinned(blocks []uint64, a *Admission, reserve int) int {
	return c.admit(blocks, a, reserve, true)
}

// Unpin releases one pin of each block (blocks a finished request pinned).
func (c *Cache) Unpin(blocks []uint64) {
	for _, h := range blocks {
		if n, ok := c.idx[h]; ok && c.nodes[n].pins > 0 {
			c.nodes[n].pins--
			if c.nodes[n].pins == 0 {
				c.pinned--
			}
		}
	}
}

// Pinned reports how many pins block h holds (0 when absent).
func (c *Cache) Pinned(h uint64) int {
	if n, ok := c.idx[h]; ok {
		return int(c.nodes[n].pins)
	}
	return 0
}

func (c *Cache) admit(blocks []uint64, a *Admission, reserve int, pin bool) int {
	a.Evicted, a.Stored = a.Evicted[:0], a.Stored[:0]
	limit := max(0, c.capacity-reserve)
	if len(blocks) > limit {
		blocks = blocks[:limit]
	}
	c.stamp++
	missing := 0
	for _, h := range blocks {
		if n, ok := c.idx[h]; ok {
			c.nodes[n].mark = c.stamp
			continue
		}
		missing++
	}
	// Evict from the tail, skipping (never evicting) this request's blocks
	// and pinned ones.
	for n := c.tail; len(c.idx)+missing > limit && n >= 0; {
		prev := c.nodes[n].prev
		if c.nodes[n].mark != c.stamp && c.nodes[n].pins == 0 {
			a.Evicted = append(a.Evicted, c.nodes[n].key)
			c.remove(n)
		}
		n = prev
	}
	// Too little room left: store only the leading blocks that fit.
	cut := len(blocks)
	if room := limit - len(c.idx); room < missing {
		room = max(room, 0)
		for i, h := range blocks {
			if _, ok := c.idx[h]; ok {
				continue
			}
			if room == 0 {
				cut = i
				break
			}
			room--
		}
		blocks = blocks[:cut]
	}
	runStart := -1
	for i, h := range blocks {
		if _, ok := c.idx[h]; ok {
			if runStart >= 0 {
				a.Stored = append(a.Stored, BlockRun{runStart, i})
				runStart = -1
			}
			continue
		}
		if runStart < 0 {
			runStart = i
		}
	}
	if runStart >= 0 {
		a.Stored = append(a.Stored, BlockRun{runStart, len(blocks)})
	}
	// Relink (or insert) in reverse so block 0 ends up at the head.
	for i := len(blocks) - 1; i >= 0; i-- {
		h := blocks[i]
		n, ok := c.idx[h]
		if ok {
			c.unlink(n)
		} else {
			n = c.alloc(h)
			c.nodes[n].mark = c.stamp
			c.idx[h] = n
		}
		c.pushFront(n)
		if pin {
			if c.nodes[n].pins == 0 {
				c.pinned++
			}
			c.nodes[n].pins++
		}
	}
	return len(blocks)
}

// PinnedBlocks is the number of cached blocks at least one running
// request holds (a block shared by several counts once).
func (c *Cache) PinnedBlocks() int { return c.pinned }

// Fits reports whether AdmitPinned(blocks, _, reserve) would store and pin
// every one of blocks: the pinned blocks not in the request, plus the
// request's blocks, fit in Capacity − reserve (unpinned blocks can always
// be evicted).
func (c *Cache) Fits(blocks []uint64, reserve int) bool {
	limit := c.capacity - reserve
	if len(blocks) > limit {
		return false
	}
	c.stamp++
	others := c.pinned // pinned blocks outside the request
	need := 0          // the request's blocks, present (once each) or missing
	for _, h := range blocks {
		n, ok := c.idx[h]
		switch {
		case !ok:
			need++
		case c.nodes[n].mark != c.stamp:
			c.nodes[n].mark = c.stamp
			need++
			if c.nodes[n].pins > 0 {
				others--
			}
		}
	}
	return others+need <= limit
}

// Drop removes blocks that no running request pins (blocks a cancelled
// prefill stored but never computed); pinned and absent blocks are left
// as they are.
func (c *Cache) Drop(blocks []uint64) {
	for _, h := range blocks {
		if n, ok := c.idx[h]; ok && c.nodes[n].pins == 0 {
			c.remove(n)
		}
	}
}

// Keys returns the cached blocks from most to least recently used (for
// tests and diagnostics).
func (c *Cache) Keys() []uint64 {
	out := make([]uint64, 0, len(c.idx))
	for n := c.head; n >= 0; n = c.nodes[n].next {
		out = append(out, c.nodes[n].key)
	}
	return out
}

func (c *Cache) alloc(h uint64) int32 {
	if k := len(c.free); k > 0 {
		n := c.free[k-1]
		c.free = c.free[:k-1]
		c.nodes[n] = lruNode{key: h, prev: -1, next: -1}
		return n
	}
	c.nodes = append(c.nodes, lruNode{key: h, prev: -1, next: -1})
	return int32(len(c.nodes) - 1)
}

func (c *Cache) remove(n int32) {
	c.unlink(n)
	delete(c.idx, c.nodes[n].key)
	c.free = append(c.free, n)
}

func (c *Cache) unlink(n int32) {
	p, x := c.nodes[n].prev, c.nodes[n].next
	if p >= 0 {
		c.nodes[p].next = x
	} else {
		c.head = x
	}
	if x >= 0 {
		c.nodes[x].prev = p
	} else {
		c.tail = p
	}
	c.nodes[n].prev, c.nodes[n].next = -1, -1
}

func (c *Cache) pushFront(n int32) {
	c.nodes[n].prev, c.nodes[n].next = -1, c.head
	if c.head >= 0 {
		c.nodes[c.head].prev = n
	}
	c.head = n
	if c.tail < 0 {
		c.tail = n
	}
}
