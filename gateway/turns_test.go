package gateway

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/prompt"
)

// turnLookup is a sharingLookup that also takes picks pushes, holding
// each until release is closed.
type turnLookup struct {
	sharingLookup
	release chan struct{}
	pushed  chan *pb.SharePicksRequest
}

func (s *turnLookup) SharePicks(ctx context.Context, req *pb.SharePicksRequest) (*pb.SharePicksResponse, error) {
	s.pushed <- req
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &pb.SharePicksResponse{Added: uint32(len(req.Picks))}, nil
}

func (s *turnLookup) settling() (n int, with *pb.ReportPickerLoadRequest) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	for _, r := range s.reports {
		if len(r.SettledTurns) > 0 {
			n++
			if with == nil {
				with = r
			}
		}
	}
	return n, with
}

// A gateway that shares its load and its picks takes a turn with each
// lookup (contract §5.13), and settles it with the first load report
// after the pick's push was answered: that report carries the pick's
// load, so a lookup the turn held reads both.
func TestDecide_TurnSettledByTheReportAfterThePicksPush(t *testing.T) {
	lk := &turnLookup{sharingLookup: sharingLookup{fakeLookup: fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1", Turn: 7, TurnWaitUs: 2500}}},
		release: make(chan struct{}), pushed: make(chan *pb.SharePicksRequest, 16)}
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: lk, ShareLoad: sharePicker("gw-7")})
	defer g.Close()
	d, err := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model":"m","messages":[{"role":"user","content":"x"}]}`), Candidates: abc})
	if err != nil {
		t.Fatal(err)
	}
	if r := lk.reqs[0]; !r.TakeTurn || r.PickerId != "gw-7" {
		t.Fatalf("lookup take_turn %v picker %q, want a turn for gw-7", r.TakeTurn, r.PickerId)
	}
	if !d.Turn || d.TurnWait != 2500*time.Microsecond {
		t.Fatalf("decision turn %v after %v, want the answer's turn after 2.5 ms", d.Turn, d.TurnWait)
	}
	d.Start(d.Replica)
	push := <-lk.pushed
	if len(push.Picks) != 1 {
		t.Fatalf("picks push %v, want the pick", push)
	}
	// Reports go out every 10 ms while the push is unanswered: none may
	// settle the turn, which would let a waiting lookup read a load
	// without its pick.
	n0 := len(lk.reportsNow())
	poll.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, string) {
		n := len(lk.reportsNow())
		return n >= n0+2, fmt.Sprintf("%d reports since the pick, want 2", n-n0)
	})
	if n, _ := lk.settling(); n != 0 {
		t.Fatalf("%d reports settled the turn before the pick's push was answered", n)
	}
	close(lk.release)
	poll.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, string) {
		n, r := lk.settling()
		return n == 1 && slices.Equal(r.SettledTurns, []uint64{7}) && len(r.Loads) == 1 && r.Loads[0].ReplicaId == d.Replica,
			fmt.Sprintf("%d reports settled, the first %v; want one settling turn 7 with the load on %s", n, r, d.Replica)
	})
}

func (s *sharingLookup) reportsNow() []*pb.ReportPickerLoadRequest {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return slices.Clone(s.reports)
}
