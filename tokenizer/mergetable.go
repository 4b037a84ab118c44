package tokenizer

import "math/bits"

// mergeTable is an open-addressing hash table from a pair of ids to its
// merge rule: one 16-byte slot per probe, so a lookup usually touches a
// single cache line. The merge loop is bound by these lookups (a few per
// character, into a table of tens of thousands of merges that does not fit
// in L1/L2), which is why it is not a Go map.
type mergeTable struct {
	slots []mergeSlot
	shift uint // 64 - log2(len(slots))
	n     int
}

// mergeSlot is one entry; key emptyKey marks a free slot.
type mergeSlot struct {
	key uint64
	mergeRule
}

// emptyKey cannot be a real key: it would need both ids to be 2^32-1,
// which buildBPE refuses.
const emptyKey = ^uint64(0)

// newMergeTable sizes a table for n entries at a load factor of at most ½.
func newMergeTable(n int) *mergeTable {
	size := 16
	for size < 2*n {
		size <<= 1
	}
	t := &mergeTable{slots: make([]mergeSlot, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
	for i := range t.slots {
		t.slots[i].key = emptyKey
	}
	return t
}

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

func (t *mergeTable) home(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> t.shift }

// put inserts or replaces the rule for key (a later duplicate merge
// replaces an earlier one, as in the reference's HashMap collect).
func (t *mergeTable) put(key uint64, r mergeRule) {
	mask := uint64(len(t.slots) - 1)
	for i := t.home(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == key {
			s.mergeRule = r
			return
		}
		if s.key == emptyKey {
			s.key, s.mergeRule = key, r
			t.n++
			return
		}
	}
}

// get returns the rule for the pair (a, b).
func (t *mergeTable) get(a, b uint32) (mergeRule, bool) {
	key := pairKey(a, b)
	mask := uint64(len(t.slots) - 1)
	for i := t.home(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == key {
			return s.mergeRule, true
		}
		if s.key == emptyKey {
			return mergeRule{}, false
		}
	}
}
