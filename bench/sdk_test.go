package bench

import (
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// The shared load in virtual time: gateway 0 sends a request of 1,536
// uncached tokens to engine 1 at 10 ms (first token at 200 ms, done at
// 300 ms); every gateway reports at each 50 ms tick. Gateway 1's lookups
// then carry in engine 1's others_*:
//
//	at  40 ms: the 0 ms report, taken before the request: nothing
//	at  60 ms: the 50 ms report: 1 prefilling, 1536 tokens, 1 running
//	at 260 ms: the 250 ms report (first token at 200): 0, 0, 1
//	at 310 ms: the 300 ms report (done at 300): 0, 0, 0
//
// and never gateway 1's own load; engine 0 always 0; others_pickers 1.
func TestSharedLoad_OthersAreTheOtherGatewaysLatestReport(t *testing.T) {
	f := NewFleet(FleetConfig{Engines: 2, CacheBlocks: 8, PrefillTPS: 1000, DecodeTPS: 40}, BenchModel, "bench-")
	s := newSharedLoad(50 * time.Millisecond)
	var gws []*sdkRouter
	for k := 0; k < 2; k++ {
		r := newSDKRouter(f, nil, newLookupStats(), uint64(k), client.DefaultPickerConfig())
		r.share(s, k)
		gws = append(gws, r)
	}
	s.tick(0.010)
	gws[0].last = client.Decision{Replica: f.ReplicaID(1), Index: 1, Costs: make([]client.PickCost, 2)}
	gws[0].last.Costs[1].UncachedTokens = 1536
	gws[0].Routed(&Request{InputLength: 1536}, 1, &Served{FirstTokenAt: 0.200, DoneAt: 0.300})
	for _, tc := range []struct {
		at                        float64
		prefilling, tokens, inRun uint32
	}{{0.040, 0, 0, 0}, {0.060, 1, 1536, 1}, {0.260, 0, 0, 1}, {0.310, 0, 0, 0}} {
		s.tick(tc.at)
		for gw, want := range [][3]uint32{{0, 0, 0}, {tc.prefilling, tc.tokens, tc.inRun}} {
			resp := &pb.LookupRouteResponse{}
			s.inject(resp, f, 1)
			if len(resp.Loads) != 2 {
				t.Fatalf("at %v s: %d loads, want 2", tc.at, len(resp.Loads))
			}
			ld := resp.Loads[gw]
			got := [3]uint32{ld.OthersPrefillingRequests, uint32(ld.OthersPrefillTokens), ld.OthersRunningRequests}
			if got != want || ld.OthersPickers != 1 || ld.ReplicaId != f.ReplicaID(gw) {
				t.Errorf("at %v s, engine %d: others %v from %d pickers (%s), want %v from 1", tc.at, gw, got, ld.OthersPickers, ld.ReplicaId, want)
			}
		}
		// Gateway 0 asks: gateway 1 sent nothing.
		resp := &pb.LookupRouteResponse{Loads: []*pb.ReplicaLoad{{ReplicaId: f.ReplicaID(1), WaitingRequests: 3}}}
		s.inject(resp, f, 0)
		if ld := resp.Loads[0]; ld.OthersRunningRequests != 0 || ld.OthersPrefillingRequests != 0 || ld.WaitingRequests != 3 {
			t.Errorf("at %v s: gateway 0 sees %+v of its own load, or lost the engine's counts", tc.at, ld)
		}
	}
}
