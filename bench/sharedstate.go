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
	// gateways take no turns; turnWait bounds a lookup's wait (s). The
	// lookups that wait are the replay's (waiting).
	turns    *turns.Table
	turnWait float64
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

// nextEvent is the virtual time of the shared state's next event: a
// sender's tick, a gateway's request's first token or end, or a call's
// arrival (+Inf: none yet).
func (s *sharedState) nextEvent() float64 {
	at := math.Inf(1)
	if !math.IsNaN(s.nextTick) {
		at = s.nextTick
	}
	for _, g := range s.gws {
		if x, ok := g.due.peek(); ok {
			at = min(at, x)
		}
	}
	if x, ok := s.pending.peek(); ok {
		at = min(at, x)
	}
	return at
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
		return // the stores' clock never goes back
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
