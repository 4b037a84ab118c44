package bench

import (
	"context"
	"math"
	"time"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/provisional"
	"github.com/inference-cache/inference-cache/turns"
)

// sharedState is the cluster's shared soft state as lookuproute-sdk's
// gateways see it, on the replay's virtual clock: the real stores of the
// nodes, pickerload.Store (each gateway's in-flight load, contract
// §5.11) and provisional.Store (each gateway's picks, contract §5.12),
// fed by the gateways' own SDK senders (client.PickShare and
// client.LoadShare, driven by hand through Begin and End): a call begins
// when its sender says so, reaches the stores one share delay later,
// applied by the nodes' own rules, and ends there (its answer's way back
// is left out), when the sender may begin the next. What a call brings
// is visible to lookups at later virtual instants only, so requests of
// one instant never see each other through it (at zero delay, from the
// next instant on).
type sharedState struct {
	base  time.Time
	now   float64       // the stores' virtual clock (s)
	delay *delaySampler // a call's time to every node
	// every is the load reports' interval, fullEvery the picks' full
	// states' (s); nextTick and nextFull are the next of each (NaN until
	// the first advance sets the grid).
	every, fullEvery   float64
	nextTick, nextFull float64
	load               *pickerload.Store
	picks              *provisional.Store
	// svc is the nodes' service over the stores (softNode): it takes the
	// calls as a node's gRPC handlers do.
	svc     *api.Service
	pending due[shareCall]
	gws     []*coreRouter
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

// shareCall is one call of a gateway's SDK on its way: a picks push (the
// pick, first tokens and removals, or the full state, with the load
// report it carries) or a load report.
type shareCall struct {
	at     float64 // arrival at the nodes (virtual s)
	r      *coreRouter
	push   *client.PushCall
	report *pb.ReportPickerLoadRequest
	// answer (to a report) and err are the node's, once it arrived.
	answer *pb.ReportPickerLoadResponse
	err    error
}

func newSharedState(delay, every, turnWait time.Duration, seed uint64) *sharedState {
	s := &sharedState{base: time.Unix(0, 0), delay: newDelaySampler(delay, seed), every: every.Seconds(),
		fullEvery: client.DefaultFullStateInterval.Seconds(), nextTick: math.NaN(), nextFull: math.NaN()}
	s.load = pickerload.New(pickerload.Config{Now: s.clock})
	s.picks = provisional.New(provisional.Config{Now: s.clock})
	if turnWait > 0 {
		s.turns, s.turnWait = turns.New(turns.Config{Now: s.clock}), turnWait.Seconds()
	}
	s.svc = api.NewService(api.Config{PickerLoad: softNode{s}, Provisional: softNode{s}, Turns: s.turns, Now: s.clock})
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

// send puts call on its way at virtual time at: it arrives one share
// delay later.
func (s *sharedState) send(at float64, c shareCall) {
	c.at = at + s.delay.next()
	s.pending.push(c.at, c)
}

// advance brings the shared state to virtual time t, event by event in
// time order: the senders' ticks (a load report every interval, a full
// state every full-state interval), the gateways' requests' first
// tokens and ends, and the arrival of every call before t.
func (s *sharedState) advance(t float64) {
	if t < s.now {
		// A lookup that waited for its turn moved the state on; the
		// stores' clock never goes back.
		return
	}
	if math.IsNaN(s.nextTick) {
		s.nextTick = math.Floor(t/s.every) * s.every
		s.nextFull = math.Floor(t/s.fullEvery) * s.fullEvery
	}
	for {
		// The earliest event by t: a tick, a gateway's flight (gw), or an
		// arrival (strictly before t: visible from later instants only).
		at, gw := math.Inf(1), -1
		tick, arrival := false, false
		if s.nextTick <= t {
			at, tick = s.nextTick, true
		}
		for i, g := range s.gws {
			if x, ok := g.due.peek(); ok && x <= t && x < at {
				at, gw, tick = x, i, false
			}
		}
		if x, ok := s.pending.peek(); ok && x < t && x < at {
			at, gw, tick, arrival = x, -1, false, true
		}
		switch {
		case tick:
			s.now = max(s.now, at)
			full := at >= s.nextFull
			if full {
				s.nextFull += s.fullEvery
			}
			s.nextTick += s.every
			for _, g := range s.gws {
				g.tick(at, full)
			}
		case gw >= 0:
			s.now = max(s.now, at)
			s.gws[gw].flightEvent()
		case arrival:
			s.pending.until(at, s.arrive)
		default:
			s.now = t
			return
		}
	}
}

// arrive hands call c to the nodes' service at its arrival (the
// service applies it and ends the turns it settles, as a node's handler
// does), and ends it at its gateway's sender with the answer.
func (s *sharedState) arrive(c shareCall) {
	s.now = max(s.now, c.at)
	if c.push != nil {
		_, c.err = s.svc.SharePicks(context.Background(), c.push.Request)
	} else {
		c.answer, c.err = s.svc.ReportPickerLoad(context.Background(), c.report)
	}
	c.r.ended(c)
}
