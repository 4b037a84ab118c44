package tokenizer

// mergeQueue is the merge loop's priority queue: a mergeHeap for ordinary
// words, a rankQueue (rq non-nil) for long ones. Both pop candidates in
// the same (rank, position) order, so the choice never changes the ids.
type mergeQueue struct {
	h  mergeHeap
	rq *rankQueue
}

func (q *mergeQueue) push(it mergeItem) {
	if q.rq != nil {
		q.rq.push(it)
		return
	}
	q.h.push(it)
}

// pop removes the least candidate. Its rank is not returned: the merge
// loop does not need it, and leaving it out keeps the result in registers.
func (q *mergeQueue) pop() mergeTop {
	if q.rq != nil {
		return q.rq.pop()
	}
	it := q.h.pop()
	return mergeTop{pos: it.pos, id: it.id, left: it.left, right: it.right}
}

// mergeTop is a popped candidate: mergeItem without its rank.
type mergeTop struct {
	pos         int32
	id          uint32
	left, right uint32
}

func (q *mergeQueue) empty() bool {
	if q.rq != nil {
		return len(q.rq.ranks) == 0
	}
	return len(q.h) == 0
}

// mergeHeap is a 4-ary min-heap of merge candidates ordered by rank, then
// position (leftmost first). Four children per node halve the depth of a
// binary heap and keep siblings in one or two cache lines, which matters
// for very long words (a megabyte-long run of one letter is one word); it
// is written out to avoid container/heap's interface calls.
type mergeHeap []mergeItem

func (h mergeHeap) less(i, j int) bool {
	return h[i].rank < h[j].rank || h[i].rank == h[j].rank && h[i].pos < h[j].pos
}

func (h *mergeHeap) push(it mergeItem) {
	*h = append(*h, it)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 4
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeItem {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		first := 4*i + 1
		if first >= n {
			break
		}
		c := first
		for k := first + 1; k < first+4 && k < n; k++ {
			if q.less(k, c) {
				c = k
			}
		}
		if !q.less(c, i) {
			break
		}
		q[i], q[c] = q[c], q[i]
		i = c
	}
	*h = q
	return top
}
