package gateway

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
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
// lookup (contract §5.13) and settles it in the pick's push: the push
// carries the load report with the pick's load, which a node holds after
// the pick, so a lookup the turn held reads both in one push's delay.
// The periodic reports wait while that push is unanswered, and the first
// one after it carries the load and settles the turn again (should the
// push have failed).
func TestDecide_TurnSettledByThePicksPushCarryingItsLoad(t *testing.T) {
	lk := &turnLookup{sharingLookup: sharingLookup{fakeLookup: fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1", Turn: 7, TurnWaitUs: 2500}}},
		release: make(chan struct{}), pushed: make(chan *pb.SharePicksRequest, 16)}
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: lk, ShareLoad: sharePicker("gw-7"),
		Provisional: ProvisionalConfig{Push: client.PickShareConfig{PushTimeout: time.Minute}}})
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
	before := lk.reportsNow()
	d.Start(d.Replica)
	push := <-lk.pushed
	if len(push.Picks) != 1 {
		t.Fatalf("picks push %v, want the pick", push)
	}
	l := push.GetLoad()
	if l == nil || !slices.Equal(l.SettledTurns, []uint64{7}) || len(l.Loads) != 1 || l.Loads[0].ReplicaId != d.Replica || l.Loads[0].PrefillingRequests != 1 || l.Loads[0].PrefillTokens == 0 {
		t.Fatalf("the push's load report %v, want turn 7 settled and the pick's load on %s", l, d.Replica)
	}
	if n := len(before); n > 0 && l.Sequence <= before[n-1].Sequence {
		t.Fatalf("the push's report sequence %d, not above the last report's %d", l.Sequence, before[n-1].Sequence)
	}
	// The ticker fires every 10 ms while the push is unanswered: its
	// reports wait, since one would carry a newer sequence than the
	// push's report without the pick's load, and a node would hold it in
	// the push's report's place. (A report the ticker began before the
	// push may still land meanwhile: its sequence is below the push's,
	// so a node keeps the push's.)
	h0 := g.share.Stats().Held
	poll.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, string) {
		h := g.share.Stats().Held
		return h >= h0+2, fmt.Sprintf("%d reports held since the pick, want 2", h-h0)
	})
	for _, r := range lk.reportsNow() {
		if r.Sequence > l.Sequence {
			t.Fatalf("report %d went out while the push carrying report %d was unanswered", r.Sequence, l.Sequence)
		}
	}
	close(lk.release)
	poll.Eventually(t, 5*time.Second, 5*time.Millisecond, func() (bool, string) {
		n, r := lk.settling()
		return n == 1 && slices.Equal(r.SettledTurns, []uint64{7}) && len(r.Loads) == 1 && r.Loads[0].ReplicaId == d.Replica && r.Sequence > l.Sequence,
			fmt.Sprintf("%d reports settled, the first %v; want one settling turn 7 with the load on %s, after the push's report", n, r, d.Replica)
	})
}

func (s *sharingLookup) reportsNow() []*pb.ReportPickerLoadRequest {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return slices.Clone(s.reports)
}
