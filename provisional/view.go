package provisional

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Match is one replica's provisional match for a lookup's chain: the
// deepest block of the chain some unexpired pick holds there.
type Match struct {
	Replica string
	// Blocks and Tokens are the match's depth: blocks from the chain's
	// root, and their tokens as the pick counted them.
	Blocks, Tokens uint32
	// Age is how long ago the youngest pick reaching that depth was made.
	Age time.Duration
	// Repeated is the prefill tokens of the chain that picks on the
	// replica still before their first token counted as their own
	// although a pick the node received before them holds the same
	// blocks: siblings placed before either was seen. Pick i with
	// CachedTokens c_i reaching m_i tokens of the chain repeats
	// max(0, min(m_i, M) − c_i), M the deepest m of the picks before it;
	// an engine with prefix caching computes those blocks once (contract
	// §5.10).
	Repeated uint32
	// covered is M so far while Matches ranges over the picks.
	covered uint32
}

// View is a read of the store at one instant (Store.At).
type View struct {
	s   *Store
	now int64
}

// At returns a view at the store clock's current reading.
func (s *Store) At() View { return View{s: s, now: s.now()} }

// Matches appends to dst, per replica, the deepest block of chain (a
// lookup's block hashes, root first, in part's fingerprint) that an
// unexpired pick holds on it; replica id ascending. A chained hash names
// its whole prefix: a pick sharing chain's first block holds chain as far
// as their hashes agree, and a chain of one hash (a lookup by prefix hash
// alone) matches the picks whose last block it is. Picks count for
// Match.Repeated in the order the store received them. It takes a read
// lock and does not allocate when dst has room.
func (v View) Matches(dst []Match, part Partition, chain []uint64) []Match {
	if len(chain) == 0 {
		return dst
	}
	s := v.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	blocks := s.parts[part]
	if blocks == nil {
		return dst
	}
	start := len(dst)
	for _, c := range blocks[chain[0]] {
		h := c.p
		if h.expires <= v.now {
			continue
		}
		depth := int(c.pos) + 1 // a pick's last block: its whole prefix
		if c.pos == 0 {
			depth = commonPrefix(h.hashes, chain)
		}
		m := Match{Replica: h.replica, Blocks: uint32(depth), Tokens: h.cum[depth-1], Age: time.Duration(v.now - h.made)}
		j := start
		for ; j < len(dst) && dst[j].Replica != h.replica; j++ {
		}
		if j == len(dst) {
			m.covered = m.Tokens
			dst = append(dst, m)
			continue
		}
		x := &dst[j]
		if !h.prefilled && h.cached < min(m.Tokens, x.covered) {
			x.Repeated += min(m.Tokens, x.covered) - h.cached
		}
		x.covered = max(x.covered, m.Tokens)
		if m.Blocks > x.Blocks || m.Blocks == x.Blocks && m.Age < x.Age {
			x.Replica, x.Blocks, x.Tokens, x.Age = m.Replica, m.Blocks, m.Tokens, m.Age
		}
	}
	for j := start; j < len(dst); j++ {
		dst[j].covered = 0
	}
	slices.SortFunc(dst[start:], func(a, b Match) int { return strings.Compare(a.Replica, b.Replica) })
	return dst
}

// Live returns picker's unexpired picks, id ascending, each with its Age
// now: the full state a picker sends for repair. Only the picks made
// within hashesWithin of now (0 = all) carry their hashes and counts; the
// older ones are listed by id alone (they keep the pick where it is held:
// their hashes went out in earlier pushes), so a full state's size is
// bounded by the recent picks, not by every pick of the max age.
func (s *Store) Live(picker string, hashesWithin time.Duration) []Pick {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ps := s.pickers[picker]
	if ps == nil {
		return nil
	}
	now := s.now()
	out := make([]Pick, 0, len(ps.picks))
	for _, h := range ps.picks {
		if h.expires <= now {
			continue
		}
		k := Pick{ID: h.id, Replica: h.replica, Partition: h.part, Age: time.Duration(now - h.made), MaxAge: time.Duration(h.expires - h.made),
			CachedTokens: h.cached, Prefilled: h.prefilled}
		if hashesWithin <= 0 || k.Age <= hashesWithin {
			k.Hashes = h.hashes
			if h.cum[len(h.cum)-1] != uint32(16*len(h.cum)) {
				k.Counts = make([]uint32, len(h.cum))
				prev := uint32(0)
				for i, c := range h.cum {
					k.Counts[i], prev = c-prev, c
				}
			}
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b Pick) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Stats returns the counters and sizes.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	blocks, picks := s.blocks, s.picks
	pickers := 0
	for _, ps := range s.pickers {
		if len(ps.picks) > 0 {
			pickers++
		}
	}
	s.mu.RUnlock()
	return Stats{Added: s.added.Load(), Removed: s.removed.Load(), Confirmed: s.confirmed.Load(), Expired: s.expired.Load(),
		Ignored: s.ignored.Load(), Refused: s.refused.Load(), Blocks: blocks, Picks: picks, Pickers: pickers}
}
