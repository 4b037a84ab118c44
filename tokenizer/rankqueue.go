package tokenizer

// defaultLongWord is the number of symbols above which a word is merged
// with a rankQueue rather than a mergeHeap. Below it the two cost about the
// same (the heap is small and cache-resident); above it the heap's log n
// sift per pop dominates: merging 32 KiB of spaces, one pre-token for the
// Llama 3 and Qwen patterns, took 11 ms with the heap and takes 1.6 ms with
// the rankQueue (tokenizer benchmarks, 2-core VM).
const defaultLongWord = 64

// rankQueue pops merge candidates in exactly mergeHeap's order — by rank,
// then leftmost position — but is built for long words. A rank is one line
// of the merge list, so it names one rule (left, right → id): candidates of
// one rank differ only in position, and are kept as positions in one
// bucket per rank, while a small heap orders the ranks present. A long word
// is dominated by a few pairs (a run of spaces, of one letter, of digits)
// whose candidates arrive in increasing position, so a bucket is almost
// always a FIFO and its pushes and pops are O(1); positions that arrive out
// of order go to a per-bucket heap, so any arrival order stays exact.
type rankQueue struct {
	ranks   []rankRef        // min-heap by rank of the non-empty buckets
	index   map[uint32]int32 // rank → bucket, for every rank in ranks
	buckets []rankBucket     // kept across calls with their slices
	free    []int32          // buckets not in use
	last    rankRef          // the last pushed rank and its bucket
	lastOK  bool             // last is valid
}

// rankRef is one element of rankQueue.ranks.
type rankRef struct {
	rank   uint32
	bucket int32
}

// rankBucket holds the queued positions of one rank.
type rankBucket struct {
	left, right, id uint32
	fifo            []int32 // increasing positions; fifo[head:] are queued
	head            int
	heap            []int32 // min-heap of positions that arrived out of order
}

// reset empties the queue for a new word, keeping its storage.
func (q *rankQueue) reset() {
	if q.index == nil {
		q.index = make(map[uint32]int32)
	} else {
		clear(q.index)
	}
	q.ranks, q.free, q.lastOK = q.ranks[:0], q.free[:0], false
	for i := range q.buckets {
		b := &q.buckets[i]
		b.fifo, b.head, b.heap = b.fifo[:0], 0, b.heap[:0]
		q.free = append(q.free, int32(i))
	}
}

func (q *rankQueue) push(it mergeItem) {
	var bi int32
	if q.lastOK && q.last.rank == it.rank {
		bi = q.last.bucket
	} else {
		var ok bool
		if bi, ok = q.index[it.rank]; !ok {
			if n := len(q.free); n > 0 {
				bi, q.free = q.free[n-1], q.free[:n-1]
			} else {
				bi = int32(len(q.buckets))
				q.buckets = append(q.buckets, rankBucket{})
			}
			b := &q.buckets[bi]
			b.left, b.right, b.id = it.left, it.right, it.id
			q.index[it.rank] = bi
			q.pushRank(rankRef{rank: it.rank, bucket: bi})
		}
		q.last, q.lastOK = rankRef{rank: it.rank, bucket: bi}, true
	}
	b := &q.buckets[bi]
	if b.head == len(b.fifo) {
		b.fifo, b.head = b.fifo[:0], 0
	}
	if len(b.fifo) == 0 || it.pos > b.fifo[len(b.fifo)-1] {
		b.fifo = append(b.fifo, it.pos)
	} else {
		b.heap = pushPos(b.heap, it.pos)
	}
}

// pop removes and returns the least candidate; the queue must not be
// empty.
func (q *rankQueue) pop() mergeTop {
	ref := q.ranks[0]
	b := &q.buckets[ref.bucket]
	var pos int32
	if b.head < len(b.fifo) && (len(b.heap) == 0 || b.fifo[b.head] <= b.heap[0]) {
		pos = b.fifo[b.head]
		b.head++
	} else {
		pos, b.heap = popPos(b.heap)
	}
	it := mergeTop{pos: pos, id: b.id, left: b.left, right: b.right}
	if b.head == len(b.fifo) && len(b.heap) == 0 {
		b.fifo, b.head = b.fifo[:0], 0
		q.popRank()
		delete(q.index, ref.rank)
		q.free = append(q.free, ref.bucket)
		if q.last.rank == ref.rank {
			q.lastOK = false
		}
	}
	return it
}

func (q *rankQueue) pushRank(r rankRef) {
	q.ranks = append(q.ranks, r)
	h := q.ranks
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p].rank <= h[i].rank {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *rankQueue) popRank() {
	h := q.ranks
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1].rank < h[c].rank {
			c++
		}
		if h[i].rank <= h[c].rank {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	q.ranks = h
}

// pushPos and popPos keep h a binary min-heap of positions.
func pushPos(h []int32, pos int32) []int32 {
	h = append(h, pos)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p] <= h[i] {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func popPos(h []int32) (int32, []int32) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1] < h[c] {
			c++
		}
		if h[i] <= h[c] {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	return top, h
}
