package raftnode

import (
	"testing"
	"time"
)

func TestClockOffsets_Median(t *testing.T) {
	now := time.Now()
	fresh, old := now.Add(-time.Second), now.Add(-offsetMaxAge-time.Second)
	m := time.Minute
	for _, tc := range []struct {
		name  string
		peers map[string]offsetSample
		want  time.Duration
		ok    bool
	}{
		{"no peers", nil, 0, false},
		{"one peer cannot outvote this node", map[string]offsetSample{"a": {-10 * m, fresh}}, 0, false},
		{"this node 10 min ahead of two agreeing peers", map[string]offsetSample{"a": {-10 * m, fresh}, "b": {-10*m - time.Second, fresh}}, -10 * m, true},
		{"one peer ahead: this node is the median", map[string]offsetSample{"a": {10 * m, fresh}, "b": {0, fresh}}, 0, true},
		{"a stale sample does not count", map[string]offsetSample{"a": {-10 * m, fresh}, "b": {-10 * m, old}}, 0, false},
		{"four clocks: the middle value nearer 0", map[string]offsetSample{"a": {-10 * m, fresh}, "b": {-10 * m, fresh}, "c": {-2 * m, fresh}}, -2 * m, true},
		{"five clocks, two wrong ones", map[string]offsetSample{"a": {3 * m, fresh}, "b": {-4 * m, fresh}, "c": {time.Second, fresh}, "d": {2 * time.Second, fresh}}, time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clockOffsets{by: tc.peers}
			got, ok := c.median(now)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("median = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestCorrectionFor_OnlyBeyondTheThreshold(t *testing.T) {
	for _, tc := range []struct{ m, want time.Duration }{
		{0, 0},
		{ClockCorrectThreshold, 0},
		{-ClockCorrectThreshold, 0},
		{ClockCorrectThreshold + time.Millisecond, ClockCorrectThreshold + time.Millisecond},
		{-10 * time.Minute, -10 * time.Minute},
	} {
		if got := correctionFor(tc.m); got != tc.want {
			t.Errorf("correctionFor(%v) = %v, want %v", tc.m, got, tc.want)
		}
	}
}
