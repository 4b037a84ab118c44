package bench

import "container/heap"

// due is a min-heap of values by a virtual time: what an engine or a
// router must act on once its clock reaches that time (a request's end,
// its first token). The zero value is empty.
type due[T any] struct{ h dueItems[T] }

type dueItem[T any] struct {
	at float64
	v  T
}

type dueItems[T any] []dueItem[T]

func (h dueItems[T]) Len() int           { return len(h) }
func (h dueItems[T]) Less(i, j int) bool { return h[i].at < h[j].at }
func (h dueItems[T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueItems[T]) Push(x any)        { *h = append(*h, x.(dueItem[T])) }
func (h *dueItems[T]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// push adds v, due at virtual time at.
func (d *due[T]) push(at float64, v T) { heap.Push(&d.h, dueItem[T]{at: at, v: v}) }

// until pops every value due by t, earliest first, and passes it to fn
// (which may push more).
func (d *due[T]) until(t float64, fn func(v T)) {
	for len(d.h) > 0 && d.h[0].at <= t {
		fn(heap.Pop(&d.h).(dueItem[T]).v)
	}
}

// pop removes and returns the earliest value queued and its time; the
// heap must not be empty.
func (d *due[T]) pop() (float64, T) {
	x := heap.Pop(&d.h).(dueItem[T])
	return x.at, x.v
}

// len is the number of values not yet due.
func (d *due[T]) len() int { return len(d.h) }

// peek is the earliest time queued; false when nothing is.
func (d *due[T]) peek() (float64, bool) {
	if len(d.h) == 0 {
		return 0, false
	}
	return d.h[0].at, true
}

// each calls fn with every value not yet popped, in no order.
func (d *due[T]) each(fn func(at float64, v T)) {
	for _, x := range d.h {
		fn(x.at, x.v)
	}
}
