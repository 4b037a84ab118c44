package bench

import (
	"math"
	"time"

	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/provisional"
	"github.com/inference-cache/inference-cache/turns"
)

// sharedState is the cluster's shared soft state as lookuproute-sdk's
// gateways see it, on the replay's virtual clock: the real stores of the
// nodes, pickerload.Store (each gateway's in-flight load, contract
// §5.11) and provisional.Store (each gateway's picks, contract §5.12),
// fed by the gateways' pushes. A gateway pushes its whole in-flight load
// and a delta of its picks whenever they change (a pick, a first token,
// an end), and its full state every period for repair; every push
// reaches the stores after the share delay and is visible to lookups at
// later virtual instants only, so requests of one instant never see each
// other through it (at zero delay, from the next instant on).
type sharedState struct {
	base  time.Time
	now   float64       // the stores' virtual clock (s)
	delay *delaySampler // a push's time to every node
	// pipes are each gateway's two senders, as the SDK runs them: its
	// picks pushes (client.PickShare) and its load reports
	// (client.LoadShare), each with one call in flight.
	pipes    map[string]*[2]pipe
	every    float64 // full-state period (s)
	lastTick float64
	load     *pickerload.Store
	picks    *provisional.Store
	pending  due[sharePush]
	gws      []*coreRouter
	// turns is the node's turn table (contract §5.13), nil when the
	// gateways take no turns; turnWait bounds a lookup's wait (s).
	turns    *turns.Table
	turnWait float64
	// queueUntil is when the last lookup that waited got its answer, and
	// queuePicker whose it was: a lookup of another picker that arrives
	// before then waits behind it (turns.Table.Wait's order).
	queueUntil  float64
	queuePicker string
}

// sharePush is one push on its way: a load report, a picks push, or a
// picks push carrying a load report.
type sharePush struct {
	at    float64 // arrival at the nodes (virtual s)
	from  string  // the gateway that sent it
	load  *pickerload.Report
	picks *provisional.Push
	// settle is the turns a load report ends (contract §5.13), taken by
	// turnPicker.
	settle     []uint64
	turnPicker string
}

func newSharedState(delay, every, turnWait time.Duration, seed uint64) *sharedState {
	s := &sharedState{base: time.Unix(0, 0), delay: newDelaySampler(delay, seed), pipes: map[string]*[2]pipe{}, every: every.Seconds(), lastTick: math.Inf(-1)}
	s.load = pickerload.New(pickerload.Config{Now: s.clock})
	s.picks = provisional.New(provisional.Config{Now: s.clock})
	if turnWait > 0 {
		s.turns, s.turnWait = turns.New(turns.Config{Now: s.clock}), turnWait.Seconds()
	}
	return s
}

// takeTurn is picker's lookup at virtual time t taking a turn at the node
// (turns.Table.Wait on the virtual clock): while another picker's turn is
// outstanding, the shared state moves on to the next event that may end
// it (a push's arrival, or the turn's lapse), at most turnWait after t.
// It returns the turn (0: none, the wait ran out) and the wait (s); the
// shared state is then at t + wait.
func (s *sharedState) takeTurn(picker string, t float64) (uint64, float64) {
	at := t
	if s.queueUntil > t && s.queuePicker != picker {
		at = s.queueUntil // behind a waiting lookup of another picker
	}
	defer func() {
		if at > t {
			s.queueUntil, s.queuePicker = at, picker
		}
	}()
	for {
		id, busy, lapse := s.turns.Take(BenchModel, picker)
		if busy == nil {
			return id, at - t
		}
		next := math.Inf(1) // a waiter ahead: the pushes decide
		if !lapse.IsZero() {
			next = lapse.Sub(s.base).Seconds()
		}
		if p, ok := s.pending.peek(); ok && p < next {
			next = p
		}
		if end := t + s.turnWait; next > end || at > end {
			at = max(at, end)
			s.advance(at)
			return 0, end - t
		}
		// Through next: a push arriving at next is what ends the wait.
		at = math.Nextafter(next, math.Inf(1))
		s.advance(at)
	}
}

// clock is the stores' clock: the virtual time as a time.Time.
func (s *sharedState) clock() time.Time { return virtualTime(s.base, s.now) }

// virtualTime is base plus t virtual seconds.
func virtualTime(base time.Time, t float64) time.Time {
	return base.Add(time.Duration(math.Round(t * float64(time.Second))))
}

// send puts a push of gateway p.from on its way at virtual time at, as
// the SDK sends it: a picks push (p.picks set, with the load report it
// carries, if any) through the gateway's pusher, a load report through its
// reporter. Each sender has one call in flight: what comes meanwhile goes
// in one call once that one is answered (a call is answered when it
// arrives; the answer's way back is left out). A load report also waits
// for a picks push in flight that carries one (client.LoadShare.Carried).
// A call arrives one share delay after it is sent.
func (s *sharedState) send(at float64, p sharePush) {
	ps := s.pipes[p.from]
	if ps == nil {
		ps = &[2]pipe{}
		s.pipes[p.from] = ps
	}
	if p.picks != nil {
		p.at = ps[0].send(at, s.delay.next, p.load != nil)
	} else {
		at = ps[0].carriedUntil(at)
		p.at = ps[1].send(at, s.delay.next, false)
	}
	s.pending.push(p.at, p)
}

// pipe is one sender of a gateway with one call in flight (busyUntil: its
// arrival), and the call that gathers what comes meanwhile (queued: sent
// when the one in flight arrives, arriving at queuedArrival).
type pipe struct {
	busyUntil, queuedArrival float64
	queued                   bool
	// busyCarries, queuedCarries: that call carries a load report.
	busyCarries, queuedCarries bool
}

// send is the arrival of what the sender is given at virtual time at,
// delay the next call's share delay; carries: it holds a load report.
func (c *pipe) send(at float64, delay func() float64, carries bool) float64 {
	c.roll(at)
	if at >= c.busyUntil {
		c.busyUntil, c.busyCarries = at+delay(), carries
		return c.busyUntil
	}
	if !c.queued {
		c.queued, c.queuedCarries = true, false
		c.queuedArrival = c.busyUntil + delay()
	}
	c.queuedCarries = c.queuedCarries || carries
	return c.queuedArrival
}

// roll sends the gathering call once the one in flight arrived.
func (c *pipe) roll(at float64) {
	if c.queued && c.busyUntil <= at {
		c.busyUntil, c.busyCarries, c.queued = c.queuedArrival, c.queuedCarries, false
	}
}

// carriedUntil is when the last call carrying a load report that is in
// flight or gathering at at arrives (at when there is none): the load
// reports wait for it.
func (c *pipe) carriedUntil(at float64) float64 {
	c.roll(at)
	switch {
	case c.queued && c.queuedCarries:
		return c.queuedArrival
	case c.busyUntil > at && c.busyCarries:
		return c.busyUntil
	}
	return at
}

// advance brings the shared state to virtual time t: every gateway's
// events up to t (each pushing at its own time), the full states of the
// period's ticks up to t, and the delivery of every push that arrives
// before t.
func (s *sharedState) advance(t float64) {
	if t < s.now {
		// A lookup that waited for its turn moved the state on; the
		// stores' clock never goes back.
		return
	}
	if s.every > 0 {
		next := math.Floor(t/s.every) * s.every
		first := next
		if !math.IsInf(s.lastTick, -1) {
			first = s.lastTick + s.every
		}
		for tick := first; tick <= next; tick += s.every {
			for _, g := range s.gws {
				g.advance(tick)
				g.pushFull(tick)
			}
			s.lastTick = tick
		}
	}
	for _, g := range s.gws {
		g.advance(t)
	}
	s.pending.until(math.Nextafter(t, math.Inf(-1)), func(p sharePush) {
		// Each push is applied at its own arrival (which dates its
		// expiry); the heap hands them out in arrival order.
		s.now = max(s.now, p.at)
		hold := func() {
			if p.load != nil {
				_, _ = s.load.Put(*p.load)
			}
		}
		if p.picks != nil {
			// A push's report after its picks, by the node's rule.
			_, _ = s.picks.ApplyThen(*p.picks, hold)
		} else {
			hold()
		}
		if s.turns != nil && len(p.settle) > 0 {
			s.turns.Settle(p.turnPicker, p.settle)
		}
	})
	s.now = t
}
