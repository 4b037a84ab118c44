package bench

import (
	"math"
	"slices"
	"testing"
	"time"
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
	d := newDelaySampler(0)
	xs := make([]float64, 10001)
	for i := range xs {
		xs[i] = d.next()
	}
	slices.Sort(xs)
	if med := xs[len(xs)/2]; math.Abs(med-0.00129) > 0.0001 {
		t.Fatalf("median of 10,001 draws %v s, want about the measured 1.29 ms", med)
	}
	f := newDelaySampler(5 * time.Millisecond)
	if a, b := f.next(), f.next(); a != 0.005 || b != 0.005 {
		t.Fatal("a fixed share delay varies")
	}
}

// A gateway's pushes arrive in the order it sent them, whatever delays
// are drawn; another gateway's may overtake them.
func TestSharedState_PushesOfOneGatewayInOrder(t *testing.T) {
	s := newSharedState(0, time.Second, 0)
	for i := range 2000 {
		// settle carries the send order here.
		s.send(float64(i)*0.0001, sharePush{from: []string{"a", "b"}[i%2], settle: []uint64{uint64(i)}})
	}
	last := map[string]uint64{}
	var order []uint64
	s.pending.until(math.Inf(1), func(p sharePush) {
		i := p.settle[0]
		if prev, ok := last[p.from]; ok && i < prev {
			t.Fatalf("push %d of %s arrives after its later push %d", i, p.from, prev)
		}
		last[p.from] = i
		order = append(order, i)
	})
	if len(order) != 2000 {
		t.Fatalf("%d pushes arrived, want 2000", len(order))
	}
	if slices.IsSorted(order) {
		t.Fatal("no gateway's push ever overtook another's: the delays are not drawn")
	}
}
