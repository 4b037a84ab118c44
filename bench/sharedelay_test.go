package bench

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/client"
)

// The measured distribution is read back at its own points, linearly
// between them (0.30 is a fifth of the way from p25 to p50), and a drawn
// sample's median is near the measured median.
func TestQuantileAt_LinearBetweenTheMeasuredPoints(t *testing.T) {
	q := []DelayQuantile{{0, time.Millisecond}, {0.25, 2 * time.Millisecond}, {0.5, 4 * time.Millisecond}, {1, 10 * time.Millisecond}}
	for _, c := range []struct{ u, want float64 }{{0, 0.001}, {0.25, 0.002}, {0.30, 0.0024}, {0.5, 0.004}, {0.75, 0.007}, {1, 0.010}} {
		if got := quantileAt(q, c.u); math.Abs(got-c.want) > 1e-12 {
			t.Fatalf("quantileAt(%v) = %v s, want %v", c.u, got, c.want)
		}
	}
	d := newDelaySampler(0, 1)
	xs := make([]float64, 10001)
	for i := range xs {
		xs[i] = d.next()
	}
	slices.Sort(xs)
	if med := xs[len(xs)/2]; math.Abs(med-0.00129) > 0.0001 {
		t.Fatalf("median of 10,001 draws %v s, want about the measured 1.29 ms", med)
	}
	f := newDelaySampler(5*time.Millisecond, 1)
	if a, b := f.next(), f.next(); a != 0.005 || b != 0.005 {
		t.Fatal("a fixed share delay varies")
	}
}

// sharedGateways is n picker-indexer gateways over a fleet of engines,
// sharing one shared state of the given share delay and load-report
// interval, no turns.
func sharedGateways(t *testing.T, n, engines int, delay, every time.Duration) (*sharedState, []*coreRouter) {
	t.Helper()
	cfg := FleetConfig{Engines: engines, CacheBlocks: 256}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	f := NewFleet(cfg, BenchModel, "")
	s := newSharedState(delay, every, 0, 1)
	env := &routerEnv{f: f, view: NewIndexerView(engines), stats: newLookupStats(), seed: 3, picker: client.DefaultPickerConfig(), shared: s}
	var rs []*coreRouter
	for k := range n {
		r, err := newRouter(StrategyPickerIndexer, env, k)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r.(*coreRouter))
	}
	return s, rs
}

// route sends q through gateway r at virtual time at and starts it on
// the engine picked, its first token 10 s later.
func route(r *coreRouter, q *Request, at float64) int {
	e := r.Route(context.Background(), 0, q, at)
	r.Routed(q, e, &Served{FirstTokenAt: at + 10, DoneAt: at + 20})
	return e
}

// A gateway's picks go out through its own SDK sender, one push in
// flight: the first pick's push (carrying the gateway's load report)
// arrives one share delay after the pick; the picks made meanwhile
// gather into the next push, begun when the first arrives and arriving
// one delay after that. Nothing reaches the shared state before.
func TestSharedState_OnePicksPushInFlightPerGateway(t *testing.T) {
	s, rs := sharedGateways(t, 1, 8, 2*time.Millisecond, time.Minute)
	r := rs[0]
	for k, at := range []float64{1.000, 1.0005, 1.001} {
		route(r, req(4*TraceBlockTokens, ids(uint64(100*(k+1)), 4)...), at)
	}
	held := func(at float64) (picks int, prefilling uint32) {
		s.advance(at)
		for e := range r.f.Engines {
			prefilling += s.load.At().Others("another", r.f.ReplicaID(e)).PrefillingRequests
		}
		return len(s.picks.Live(r.id, 0)), prefilling
	}
	for _, c := range []struct {
		at                float64
		picks, prefilling int
	}{{1.0019, 0, 0}, {1.0021, 1, 1}, {1.0039, 1, 1}, {1.0041, 3, 3}} {
		if p, l := held(c.at); p != c.picks || int(l) != c.prefilling {
			t.Fatalf("at %v s the nodes hold %d picks and %d prefilling requests of the gateway, want %d and %d", c.at, p, l, c.picks, c.prefilling)
		}
	}
	if st := r.gw.PickShare().Stats(); st.Pushes != 2 {
		t.Fatalf("%d picks pushes, want 2 (the first pick; then the two gathered)", st.Pushes)
	}
}

// What one gateway pushes is in another's lookups from the next virtual
// instant after it arrives: one share delay after the first gateway's
// pick of a new 8-block prefix, the second gateway's decision counts
// those 4,096 tokens as cached on that engine; a moment before, nothing.
func TestSharedState_APickReachesTheOtherGatewayAfterTheDelay(t *testing.T) {
	for _, c := range []struct {
		after  float64
		cached int
	}{{0.0049, 0}, {0.0051, 8 * TraceBlockTokens}} {
		_, rs := sharedGateways(t, 2, 8, 5*time.Millisecond, time.Minute)
		e0 := route(rs[0], req(9*TraceBlockTokens, append(ids(500, 8), 900)...), 1)
		rs[1].Route(context.Background(), 1, req(9*TraceBlockTokens, append(ids(500, 8), 901)...), 1+c.after)
		got := -1
		for _, cost := range rs[1].last.Costs {
			if cost.Replica == rs[1].f.ReplicaID(e0) {
				got = cost.CachedTokens
			}
		}
		if got != c.cached {
			t.Errorf("%v s after gateway 0's pick on engine %d, gateway 1 counts %d tokens cached there, want %d", c.after, e0, got, c.cached)
		}
	}
}

// A push reaches the nodes at a later virtual instant only: a pick at
// 1 s with a 1 ms delay is not held at 1.001 s, is at 1.002 s; with a
// 5 ms delay, only after 1.005 s; with the measured delays (0), not
// before their least, 0.315 ms, and by their greatest, 12.64 ms.
func TestSharedState_PushesReachLaterInstantsOnly(t *testing.T) {
	for _, c := range []struct {
		delay        time.Duration
		hidden, seen float64
	}{{time.Millisecond, 1.001, 1.002}, {5 * time.Millisecond, 1.005, 1.006}, {0, 1.000315, 1.01265}} {
		s, rs := sharedGateways(t, 1, 4, c.delay, time.Minute)
		s.advance(0.5)
		route(rs[0], req(4*TraceBlockTokens, ids(7, 4)...), 1)
		s.advance(c.hidden)
		if n := len(s.picks.Live(rs[0].id, 0)); n != 0 {
			t.Errorf("delay %v: at %v s the nodes hold %d picks, want none yet", c.delay, c.hidden, n)
		}
		s.advance(c.seen)
		if n := len(s.picks.Live(rs[0].id, 0)); n != 1 {
			t.Errorf("delay %v: at %v s the nodes hold %d picks, want the one", c.delay, c.seen, n)
		}
	}
}

// The share delays a run draws follow its seed: the same seed draws the
// same delays, another seed others (the runs of --runs differ in them).
func TestDelaySampler_DrawsFollowTheSeed(t *testing.T) {
	draw := func(seed uint64) []float64 {
		d := newDelaySampler(0, seed)
		out := make([]float64, 8)
		for i := range out {
			out[i] = d.next()
		}
		return out
	}
	if a, b := draw(3), draw(3); !slices.Equal(a, b) {
		t.Fatalf("seed 3 drew %v, then %v", a, b)
	}
	if a, b := draw(3), draw(4); slices.Equal(a, b) {
		t.Fatalf("seeds 3 and 4 drew the same delays %v", a)
	}
}
