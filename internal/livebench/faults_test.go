package livebench

import (
	"strings"
	"testing"
	"time"
)

// The schedule on a 100 s replay, written by hand from its definition:
// the leader at 20 %, every node at 40 %, an engine at 75 %, the proxy
// 15 s before the end. On the shortest span it accepts (80 s), each fault
// is undone before the next starts; a shorter one is refused, saying what
// to change.
func TestPlanFaults(t *testing.T) {
	p, err := planFaults(100 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := faultPlan{leaderKill: 20 * time.Second, allDown: 40 * time.Second, engineKill: 75 * time.Second, proxyTerm: 85 * time.Second}
	if p != want {
		t.Fatalf("plan %+v, want %+v", p, want)
	}
	for _, span := range []time.Duration{80 * time.Second, 81 * time.Second, 10 * time.Minute} {
		p, err := planFaults(span)
		if err != nil {
			t.Fatalf("%v: %v", span, err)
		}
		if !(p.leaderKill+faultNodeBackIn < p.allDown && p.allDown+faultAllDownFor < p.engineKill && p.engineKill < p.proxyTerm && p.proxyTerm < span) {
			t.Errorf("%v: faults overlap: %+v", span, p)
		}
	}
	_, err = planFaults(79 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "span 1m19s, under the 1m20s") || !strings.Contains(err.Error(), "--requests or lower --speedup") {
		t.Fatalf("79 s: %v, want a refusal naming the span, the minimum and the way out", err)
	}
}
