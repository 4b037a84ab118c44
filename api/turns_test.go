package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/provisional"
	"github.com/inference-cache/inference-cache/turns"
)

func turnsSvc(wait time.Duration) (*Service, *turns.Table) {
	// No confirmed match; fresh stats for r1 and r2.
	f := &fakeNode{pol: policy.Default(), lookup: func(req *index.LookupRequest, res *index.Result) {
		confirmedOn("", 0)(req, res)
		if req.IncludeLoad {
			res.Loads = append(res.Loads, index.Load{ReplicaID: "r1"}, index.Load{ReplicaID: "r2"})
		}
	}}
	tb := turns.New(turns.Config{Hold: time.Minute})
	share := newFakeShare(0)
	fp := &fakePicks{store: provisional.New(provisional.Config{}), load: share}
	return NewService(Config{Backend: f, Provisional: fp, PickerLoad: share, Turns: tb, TurnWait: wait}), tb
}

func turnLookup(picker string, hashes ...uint64) *pb.LookupRouteRequest {
	r := lookupKey(hashes...)
	r.PickerId, r.TakeTurn, r.IncludeLoad = picker, true, true
	return r
}

// Two gateways' lookups of one instant: the second waits for the first's
// turn, which is settled either by the first's load report after its
// picks push (the push alone does not settle it) or by a picks push that
// carries the load report; either way the second is answered from a state
// that holds the first's pick (a provisional hint on its replica) and its
// load.
func TestLookupRoute_TurnWaitsForTheOtherPickersPick(t *testing.T) {
	pick := func() *pb.SharePicksRequest {
		return &pb.SharePicksRequest{PickerId: "gw-a", Sequence: 1, Picks: []*pb.ProvisionalPick{pickOf(1, "r2", 11, 12, 13)}}
	}
	load := func(turn uint64) *pb.ReportPickerLoadRequest {
		return &pb.ReportPickerLoadRequest{PickerId: "gw-a", Sequence: 1, IntervalMs: 1000,
			Loads: []*pb.PickerReplicaLoad{{ReplicaId: "r2", PrefillingRequests: 1, PrefillTokens: 48}}, SettledTurns: []uint64{turn}}
	}
	for _, tc := range []struct {
		name   string
		settle func(t *testing.T, svc *Service, tb *turns.Table, turn uint64)
	}{
		{"PushThenReport", func(t *testing.T, svc *Service, tb *turns.Table, turn uint64) {
			if _, err := svc.SharePicks(context.Background(), pick()); err != nil {
				t.Fatal(err)
			}
			if s := tb.Stats(); s.Settled != 0 || s.Waiting != 1 {
				t.Fatalf("after the picks push: %+v, want gw-b waiting for the load report that settles", s)
			}
			if _, err := svc.ReportPickerLoad(context.Background(), load(turn)); err != nil {
				t.Fatal(err)
			}
		}},
		{"PushCarryingTheReport", func(t *testing.T, svc *Service, _ *turns.Table, turn uint64) {
			p := pick()
			p.Load = load(turn)
			p.Load.PickerId = ""
			if _, err := svc.SharePicks(context.Background(), p); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, tb := turnsSvc(time.Minute)
			a, _ := svc.LookupRoute(context.Background(), turnLookup("gw-a", 11, 12, 13))
			if a.Turn == 0 || a.ReasonCode != pb.ReasonCode_NO_HINT {
				t.Fatalf("first lookup: turn %d, %v; want a turn and no hint", a.Turn, a.ReasonCode)
			}
			got := make(chan *pb.LookupRouteResponse, 1)
			go func() {
				b, _ := svc.LookupRoute(context.Background(), turnLookup("gw-b", 11, 12, 13))
				got <- b
			}()
			poll.Eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
				w := tb.Stats().Waiting
				return w == 1, fmt.Sprintf("%d lookups wait for a turn, want gw-b's", w)
			})
			tc.settle(t, svc, tb, a.Turn)
			var b *pb.LookupRouteResponse
			select {
			case b = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("gw-b still waits after gw-a's turn was settled")
			}
			if b.Turn == 0 || b.TurnWaitUs == 0 || b.ReasonCode != pb.ReasonCode_PREFIX_MATCH || len(b.Replicas) != 1 || b.Replicas[0].ReplicaId != "r2" || !b.Replicas[0].Provisional {
				t.Fatalf("gw-b: turn %d, %v %v; want a turn and gw-a's pick as a provisional hint on r2", b.Turn, b.ReasonCode, b.Replicas)
			}
			if len(b.Loads) != 2 || b.Loads[1].ReplicaId != "r2" || b.Loads[1].OthersPrefillTokens != 48 || b.Loads[0].OthersPrefillTokens != 0 {
				t.Fatalf("gw-b's loads %v, want gw-a's 48 prefill tokens on r2", b.Loads)
			}
		})
	}
}

// A turn nobody settles costs the next picker at most the node's turn
// wait: it is answered then, without a turn. A lookup without take_turn,
// or without a picker id, never waits.
func TestLookupRoute_TurnWaitIsBounded(t *testing.T) {
	svc, _ := turnsSvc(30 * time.Millisecond)
	svc.LookupRoute(context.Background(), turnLookup("gw-dead", 1, 2))
	start := time.Now()
	b, _ := svc.LookupRoute(context.Background(), turnLookup("gw-b", 1, 2))
	if b.Turn != 0 || b.TurnWaitUs < 30_000 || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("turn %d after %d µs, want none after the 30 ms wait", b.Turn, b.TurnWaitUs)
	}
	for _, r := range []*pb.LookupRouteRequest{lookupKey(1, 2), turnLookup("", 1, 2)} {
		if got, _ := svc.LookupRoute(context.Background(), r); got.Turn != 0 || got.TurnWaitUs != 0 {
			t.Fatalf("picker %q take_turn %v: turn %d after %d µs, want neither", r.PickerId, r.TakeTurn, got.Turn, got.TurnWaitUs)
		}
	}
}

// settled_turns past the bound is refused naming the field and the limit,
// in a load report and in a picks push's.
func TestReportPickerLoad_SettledTurnsBound(t *testing.T) {
	svc, _ := turnsSvc(0)
	over := &pb.ReportPickerLoadRequest{PickerId: "gw", Sequence: 1, IntervalMs: 1000, SettledTurns: make([]uint64, MaxSettledTurns+1)}
	_, err := svc.ReportPickerLoad(context.Background(), over)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "settled_turns") || !strings.Contains(err.Error(), "1024") {
		t.Fatalf("err %v, want INVALID_ARGUMENT naming settled_turns and 1024", err)
	}
	_, err = svc.SharePicks(context.Background(), &pb.SharePicksRequest{PickerId: "gw", Sequence: 1, Picks: []*pb.ProvisionalPick{pickOf(1, "r2", 11)}, Load: over})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "load.settled_turns") || !strings.Contains(err.Error(), "1024") {
		t.Fatalf("err %v, want INVALID_ARGUMENT naming load.settled_turns and 1024", err)
	}
}
