package bench

import (
	"math/rand/v2"
	"time"
)

// DelayQuantile is one point of a measured delay distribution: a fraction
// Q (0 to 1) of the measured delays were at most D.
type DelayQuantile struct {
	Q float64
	D time.Duration
}

// MeasuredShareDelay is this project's push-to-visible delay as measured
// on the live system: a gateway (the real gateway core and SDK, listing
// every node) calls Decision.Start, and a lookup on another node polled
// back to back answers the prompt with the provisional hint (one lookup
// round trip of polling included). A real 3-node cluster on 127.0.0.1
// (--fast-timing) on a 2-core machine, 300 picks per run; each quantile is
// the median of eight runs (BENCHMARKS.md, "provisional residencies", V1).
// The bench draws each push's delay from it (Config.ShareDelay 0).
var MeasuredShareDelay = []DelayQuantile{
	{0, 315 * time.Microsecond},
	{0.10, 635 * time.Microsecond},
	{0.25, 895 * time.Microsecond},
	{0.50, 1290 * time.Microsecond},
	{0.75, 1870 * time.Microsecond},
	{0.90, 2590 * time.Microsecond},
	{0.99, 7840 * time.Microsecond},
	{1, 12640 * time.Microsecond},
}

// delaySampler gives each push its delay (s): fixed when fixed > 0, else
// drawn from the quantiles q by inverse transform, linear between their
// points, from a seeded generator (a run is reproducible).
type delaySampler struct {
	fixed float64
	q     []DelayQuantile
	rng   *rand.Rand
}

// newDelaySampler samples fixed, or MeasuredShareDelay when fixed is 0,
// its draws seeded by seed (Config.Seed).
func newDelaySampler(fixed time.Duration, seed uint64) *delaySampler {
	return &delaySampler{fixed: fixed.Seconds(), q: MeasuredShareDelay, rng: rand.New(rand.NewPCG(seed, 2))}
}

// next is the next push's delay (s).
func (d *delaySampler) next() float64 {
	if d.fixed > 0 || len(d.q) == 0 {
		return d.fixed
	}
	return quantileAt(d.q, d.rng.Float64())
}

// quantileAt is the delay (s) at fraction u of the distribution q (points
// in increasing Q from 0 to 1), linear between the points.
func quantileAt(q []DelayQuantile, u float64) float64 {
	for i := 1; i < len(q); i++ {
		if u <= q[i].Q {
			a, b := q[i-1], q[i]
			f := 0.0
			if b.Q > a.Q {
				f = (u - a.Q) / (b.Q - a.Q)
			}
			return (a.D.Seconds()*(1-f) + b.D.Seconds()*f)
		}
	}
	return q[len(q)-1].D.Seconds()
}
