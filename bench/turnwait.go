package bench

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/inference-cache/inference-cache/turns"
)

// waiting is a lookup of lookuproute-sdk waiting at the node for its turn
// (contract §5.13), as a node's lookup waits in turns.Table.Wait: its
// request (the i-th of the trace, q) at gateway r, its place among the
// node's waiters (the real turns.Waiter), when it came (virtual s) and
// when the turn that holds it back lapses (+Inf: a waiter of another
// picker ahead of it holds it back). Its request is decided, and reaches
// its engine, when the wait ends.
type waiting struct {
	i     int
	q     *Request
	r     *coreRouter
	w     *turns.Waiter
	since float64
	lapse float64
}

// takesTurns reports whether the gateway's lookups take turns at the node.
func (r *coreRouter) takesTurns() bool { return r.shared != nil && r.shared.turns != nil }

// askTurn is request i's lookup at gateway r taking a turn at the node at
// virtual time t, the shared state brought there first: true, with the turn in
// r.turn (0 when the table granted none), when it goes at once; false
// when another picker's turn or waiter holds it back, and it joined the
// node's waiters (rp.waiting) for resume to decide.
func (rp *replay) askTurn(r *coreRouter, i int, q *Request, t float64) bool {
	s := r.shared
	s.advance(t)
	picker := r.gw.ProvisionalPickerID()
	id, busy, lapse := s.turns.Take(BenchModel, picker)
	if busy == nil {
		r.turn, r.wait = id, 0
		return true
	}
	rp.waiting = append(rp.waiting, &waiting{i: i, q: q, r: r, w: s.turns.Join(BenchModel, picker), since: t,
		lapse: lapseAt(s, lapse)})
	return false
}

// resume moves the shared state on event by event (a sender's tick, a
// request's first token or end, a call's arrival, a turn's lapse, a
// wait's bound) while lookups wait for their turns and the event comes
// before virtual time until, and after each lets the waiters try again in
// the order they came, as the node wakes its waiters whenever the key's
// turns or waiters change: a waiter whose turn is free, or whose wait
// reached the bound (it goes without a turn), is decided then. Only the
// replay's own cancellation is an error.
func (rp *replay) resume(ctx context.Context, until float64) error {
	for len(rp.waiting) > 0 {
		s := rp.env.shared
		next := s.nextEvent()
		for _, w := range rp.waiting {
			next = min(next, w.lapse, w.since+s.turnWait)
		}
		if next >= until {
			return nil
		}
		// Just past next: a call that arrives at next is visible then.
		at := math.Nextafter(max(next, s.now), math.Inf(1))
		s.advance(at)
		for k := 0; k < len(rp.waiting); {
			w := rp.waiting[k]
			id, busy, lapse := w.w.Take()
			if busy != nil && at < w.since+s.turnWait {
				w.lapse = lapseAt(s, lapse)
				k++
				continue
			}
			w.w.Leave()
			rp.waiting = slices.Delete(rp.waiting, k, k+1)
			w.r.turn, w.r.wait = id, at-w.since
			if err := rp.prepare(ctx, w.i, w.q, at); err != nil {
				return err
			}
			rp.serve(ctx, w.i, w.q, at)
		}
	}
	return nil
}

// lapseAt is a blocking turn's lapse in virtual seconds (+Inf for the
// zero time: a waiter holds the lookup back, and only the pushes and the
// bound end its wait).
func lapseAt(s *sharedState, lapse time.Time) float64 {
	if lapse.IsZero() {
		return math.Inf(1)
	}
	return lapse.Sub(s.base).Seconds()
}
