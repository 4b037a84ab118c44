package bench

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/provisional"
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

// A gateway's calls arrive in the order it sent them, whatever delays are
// drawn (those sent while one is in flight arrive together, after it);
// another gateway's may overtake them.
func TestSharedState_PushesOfOneGatewayInOrder(t *testing.T) {
	s := newSharedState(0, time.Second, 0, 1)
	arrival := make([]float64, 2000)
	from := func(i int) string { return []string{"a", "b"}[i%2] }
	for i := range arrival {
		// settle carries the send order here.
		s.send(float64(i)*0.0001, sharePush{from: from(i), settle: []uint64{uint64(i)}})
	}
	var order []uint64
	s.pending.until(math.Inf(1), func(p sharePush) {
		arrival[p.settle[0]] = p.at
		order = append(order, p.settle[0])
	})
	if len(order) != len(arrival) {
		t.Fatalf("%d pushes arrived, want %d", len(order), len(arrival))
	}
	for i := 2; i < len(arrival); i++ {
		if arrival[i] < arrival[i-2] {
			t.Fatalf("push %d of %s arrives at %v, before its earlier push %d at %v", i, from(i), arrival[i], i-2, arrival[i-2])
		}
	}
	if slices.IsSorted(order) {
		t.Fatal("no gateway's push ever overtook another's: the delays are not drawn")
	}
}

// A sender with a call in flight gathers what comes meanwhile into one
// call, sent when the first is answered; a load report waits for a picks
// push in flight that carries one.
func TestSharedState_OneCallInFlightPerSender(t *testing.T) {
	s := newSharedState(2*time.Millisecond, time.Second, 0, 1)
	pick := func(carries bool) sharePush {
		p := sharePush{from: "a", picks: &provisional.Push{}}
		if carries {
			p.load = &pickerload.Report{}
		}
		return p
	}
	s.send(1.000, pick(true))            // in flight until 1.002
	s.send(1.001, pick(false))           // gathered: sent at 1.002, arrives 1.004
	s.send(1.0015, pick(true))           // the same call
	s.send(1.0016, sharePush{from: "a"}) // a report: waits for the carrying call, 1.004, then 2 ms
	s.send(1.0100, pick(false))          // nothing in flight: at once
	var got []float64
	s.pending.until(math.Inf(1), func(p sharePush) { got = append(got, p.at) })
	want := []float64{1.002, 1.004, 1.004, 1.006, 1.012}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Fatalf("arrivals %v, want %v", got, want)
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
