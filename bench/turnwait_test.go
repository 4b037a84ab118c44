package bench

import (
	"context"
	"math"
	"testing"
	"time"
)

// A lookup that waits for its turn reaches its engine when the wait ends,
// and its TTFT counts from its arrival. Two gateways, pushes taking 5 ms:
// gateway 0's request at 0 s takes the turn; its pick goes in the push
// begun when the full state sent at the senders' first tick (0 s) has
// arrived (5 ms), and reaches the node at 10 ms, settling the turn.
// Gateway 1's sibling, arriving at 1 ms, waits for it, is decided at
// 10 ms on a state that holds the pick, follows it to the same engine, and
// is submitted there at 10 ms: its TTFT is that engine's first token for
// a request submitted at 10 ms behind the first, less its arrival. A
// replay that submitted it at its arrival and added the wait would count
// the 9 ms it queued at the node twice.
func TestTurnWait_TheRequestReachesItsEngineWhenItsWaitEnds(t *testing.T) {
	q0 := Request{Timestamp: 0, InputLength: 9 * TraceBlockTokens, OutputLength: 64, HashIDs: append(ids(500, 8), 900)}
	q1 := Request{Timestamp: 1, InputLength: 9 * TraceBlockTokens, OutputLength: 64, HashIDs: append(ids(500, 8), 901)}
	fc := FleetConfig{Engines: 2, CacheBlocks: 256, PrefillTPS: 10000, DecodeTPS: 40}
	rep, err := Run(context.Background(), Config{Trace: &Trace{Name: "turn", Requests: []Request{q0, q1}}, Gateways: 2, Seed: 3,
		ShareDelay: 5 * time.Millisecond, Strategies: []string{StrategyPickerIndexer}, Fleet: fc})
	if err != nil {
		t.Fatal(err)
	}
	res := rep.Strategies[0]
	e := -1
	for k, n := range res.PerEngine {
		if n == 2 {
			e = k
		}
	}
	if e < 0 {
		t.Fatalf("requests per engine %v: want the sibling to follow the first request's pick", res.PerEngine)
	}
	if err := fc.fill(); err != nil {
		t.Fatal(err)
	}
	eng := NewFleet(fc, BenchModel, "bench-").Engines[e]
	eng.Serve(&q0, 0)
	s1 := eng.Serve(&q1, 0.010)
	want := (s1.FirstTokenAt - 0.001) * 1000
	if got := res.TTFTMs[1]; math.Abs(got-want) > 1e-6 { // sorted: the sibling's is the longer
		t.Fatalf("the sibling's TTFT %.6f ms, want %.6f ms: its first token when submitted at 10 ms (%.6f s), less its arrival at 1 ms",
			got, want, s1.FirstTokenAt)
	}
}
