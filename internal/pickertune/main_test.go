package main

import (
	"math"
	"testing"
)

// The loss of one scenario, worked by hand: against a best peer p50 of
// 200 ms and p99 of 1000 ms, hit rate 0.5 and a max/mean bound of 1.3.
func TestLoss_PenalisesTheEvaluationsTargets(t *testing.T) {
	sc := &scenario{bestP50: 200, bestP99: 1000, bestHit: 0.5, maxMeanBound: 1.3}
	for _, tc := range []struct {
		name              string
		p50, p99, hit, mm float64
		want              float64
	}{
		// ln(100/200) + ln(1000/1000) = −0.6931; hit 0.5/0.5 = 1 ≥ 0.97; 1.2 ≤ 1.3.
		{"better p50, targets met", 100, 1000, 0.5, 1.2, -0.6931471805599453},
		// ln 1 + ln 2 = 0.6931; hit 0.45/0.5 = 0.9: 10 × 0.07 = 0.7; 1.5 − 1.3: 2 × 0.2 = 0.4.
		{"worse p99, hit and balance missed", 200, 2000, 0.45, 1.5, 0.6931471805599453 + 0.7 + 0.4},
	} {
		if got := loss(tc.p50, tc.p99, tc.hit, tc.mm, sc); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: loss %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Ratios of zero figures stay finite: a zero TTFT or hit rate is a real
// outcome of a tiny trace.
func TestRatio_ZeroFigures(t *testing.T) {
	if r := ratio(0, 0); r != 1 {
		t.Errorf("ratio(0, 0) = %v, want 1", r)
	}
	if r := ratio(3, 0); r != 1e9 {
		t.Errorf("ratio(3, 0) = %v, want 1e9", r)
	}
	if r := ratio(0, 2); r != 0.5e-9 {
		t.Errorf("ratio(0, 2) = %v, want 5e-10", r)
	}
}
