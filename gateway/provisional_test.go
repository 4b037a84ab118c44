package gateway

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/prompt"
	"github.com/inference-cache/inference-cache/provisional"
)

// pushingLookup is a fakeLookup that also takes picks pushes, as
// *client.Client does.
type pushingLookup struct {
	fakeLookup
	pmu    sync.Mutex
	pushes []*pb.SharePicksRequest
}

func (s *pushingLookup) SharePicks(_ context.Context, req *pb.SharePicksRequest) (*pb.SharePicksResponse, error) {
	s.pmu.Lock()
	s.pushes = append(s.pushes, req)
	s.pmu.Unlock()
	return &pb.SharePicksResponse{Added: uint32(len(req.Picks))}, nil
}

func (s *pushingLookup) got() []*pb.SharePicksRequest {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return append([]*pb.SharePicksRequest(nil), s.pushes...)
}

// The cluster knows nothing of the prompt (no hint, every time): the
// first request goes by load, and the next request of the same prompt
// goes where the first went, at once, from the gateway's own pick; the
// decision says its hint is provisional.
func TestDecide_SeesItsOwnPickAtOnce(t *testing.T) {
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: &fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}}})
	req := Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc}
	d1, err := g.Decide(context.Background(), req)
	if err != nil || d1.Reason != ReasonLoad || d1.Provisional {
		t.Fatalf("first decision %+v, %v: want by load", d1, err)
	}
	f1 := d1.Start(d1.Replica)
	defer f1.Done()
	d2, err := g.Decide(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	// 64 tokens = 4 full blocks of 16, all on the first pick's replica.
	if d2.Replica != d1.Replica || d2.Reason != "PREFIX_MATCH" || !d2.Provisional || d2.MatchedTokens != 64 {
		t.Fatalf("second decision: %s %s provisional %t matched %d; want %s PREFIX_MATCH provisional, 64 tokens",
			d2.Replica, d2.Reason, d2.Provisional, d2.MatchedTokens, d1.Replica)
	}
}

// A failed request's pick is dropped: the next request is placed by load
// again (away from the replica, which has nothing in flight either way).
func TestFlightFail_DropsThePick(t *testing.T) {
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: &fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}}})
	req := Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc}
	d1, _ := g.Decide(context.Background(), req)
	d1.Start(d1.Replica).Fail()
	if st := g.ProvisionalTable().Stats(); st.Picks != 0 || st.Removed != 1 {
		t.Fatalf("table after Fail: %+v", st)
	}
	d2, _ := g.Decide(context.Background(), req)
	if d2.Provisional || d2.Reason != ReasonLoad {
		t.Fatalf("after a failed pick: %s provisional %t", d2.Reason, d2.Provisional)
	}
}

// The confirmed index reaching the pick's depth on its replica drops the
// pick: the hint is then the index's (not provisional).
func TestDecide_ConfirmedDropsThePick(t *testing.T) {
	lk := &fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}}
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: lk})
	req := Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc}
	d1, _ := g.Decide(context.Background(), req)
	defer d1.Start(d1.Replica).Done()
	lk.mu.Lock()
	lk.resp = prefixMatch(d1.Replica, 64)
	lk.resp.Replicas[0].MatchedBlocks = 4
	lk.mu.Unlock()
	d2, _ := g.Decide(context.Background(), req)
	if d2.Replica != d1.Replica || d2.Provisional {
		t.Fatalf("confirmed: %s provisional %t", d2.Replica, d2.Provisional)
	}
	if st := g.ProvisionalTable().Stats(); st.Picks != 0 || st.Confirmed != 1 {
		t.Fatalf("table after confirmation: %+v", st)
	}
}

// A pick is pushed as it is made, with the lookup's key (the content
// fingerprint, contract §3) and partition; a failed request pushes its
// removal; the full state lists the live picks.
func TestGateway_PushesEachPick(t *testing.T) {
	lk := &pushingLookup{fakeLookup: fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}}}
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(40)}}, Lookup: lk, TenantID: "team",
		Provisional: ProvisionalConfig{Push: client.PickShareConfig{FullStateInterval: 50 * time.Millisecond}}})
	defer g.Close()
	req := Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc}
	d, _ := g.Decide(context.Background(), req)
	f := d.Start(d.Replica)
	want, err := fingerprint.AppendSaltedBlockHashes(nil, seq(40), 16, "")
	if err != nil {
		t.Fatal(err)
	}
	var first *pb.ProvisionalPick
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		for _, p := range lk.got() {
			if !p.FullState && len(p.Picks) == 1 {
				first = p.Picks[0]
				return true, ""
			}
		}
		return false, "the pick not pushed"
	})
	if first.ReplicaId != d.Replica || first.ModelId != "m" || first.TenantId != "team" || first.HashScheme != "vllm" ||
		len(first.BlockHashes) != 2 || first.BlockHashes[0] != want[0] || first.BlockHashes[1] != want[1] {
		t.Fatalf("pushed %v, want replica %s, m/team/vllm, hashes %v", first, d.Replica, want)
	}
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		ps := lk.got()
		for _, p := range ps {
			if p.FullState && len(p.Picks) == 1 && p.Picks[0].PickId == first.PickId {
				return true, ""
			}
		}
		return false, "no full state listing the live pick"
	})
	f.Fail()
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		for _, p := range lk.got() {
			if len(p.Removed) == 1 && p.Removed[0] == first.PickId {
				return true, ""
			}
		}
		return false, "the removal not pushed"
	})
	for _, p := range lk.got() {
		if p.GetPickerId() != g.PickerID() && g.PickerID() != "" {
			t.Fatalf("push under picker id %q, gateway's is %q", p.GetPickerId(), g.PickerID())
		}
	}
}

func TestProvisional_OffRecordsNothing(t *testing.T) {
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Provisional: ProvisionalConfig{Off: true}})
	d, _ := g.Decide(context.Background(), Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc})
	d.Start(d.Replica).Done()
	if g.ProvisionalTable() != nil {
		t.Fatal("a table with Off")
	}
	if _, err := New(Config{Provisional: ProvisionalConfig{MaxAge: time.Millisecond}}); err == nil {
		t.Fatal("max age 1 ms accepted")
	}
}

// A Sink gets each pick and removal synchronously, on the gateway's own
// sequence, with the table's clock injected (a simulation's virtual
// clock): the pick expires at its max age on that clock.
func TestProvisional_SinkAndVirtualClock(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var got []provisional.Push
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: &pushingLookup{fakeLookup: fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}}},
		Provisional: ProvisionalConfig{MaxAge: time.Second, Now: func() time.Time { return now }, Sink: func(p provisional.Push) { got = append(got, p) }}})
	defer g.Close()
	if g.PickShare() != nil {
		t.Fatal("an SDK pusher with a Sink")
	}
	req := Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc}
	d, _ := g.Decide(context.Background(), req)
	f := d.Start(d.Replica)
	if len(got) != 1 || len(got[0].Picks) != 1 || got[0].Picks[0].Replica != d.Replica || len(got[0].Picks[0].Hashes) != 4 || got[0].Picks[0].MaxAge != time.Second {
		t.Fatalf("sink got %+v", got)
	}
	now = now.Add(999 * time.Millisecond)
	if d2, _ := g.Decide(context.Background(), req); !d2.Provisional {
		t.Fatal("pick gone before its max age on the virtual clock")
	}
	now = now.Add(time.Millisecond)
	if d2, _ := g.Decide(context.Background(), req); d2.Provisional {
		t.Fatal("pick held past its max age on the virtual clock")
	}
	f.Fail()
	if len(got) != 2 || len(got[1].Removed) != 1 || got[1].Removed[0] != got[0].Picks[0].ID || got[1].Sequence <= got[0].Sequence {
		t.Fatalf("sink got %+v", got)
	}
}

// slowNode takes lookups, load reports and picks pushes as a node does,
// holding each push for delay before it applies it, and records every
// report that counts a replica's requests before the pushes that explain
// them were applied.
type slowNode struct {
	fakeLookup
	delay time.Duration

	smu        sync.Mutex
	applied    map[string]uint32 // picks held, per replica
	reports    int
	ahead      []string
	lastLoaded uint32 // requests in the last report
}

func (s *slowNode) SharePicks(_ context.Context, req *pb.SharePicksRequest) (*pb.SharePicksResponse, error) {
	time.Sleep(s.delay)
	s.smu.Lock()
	defer s.smu.Unlock()
	if !req.FullState {
		for _, k := range req.Picks {
			s.applied[k.ReplicaId]++
		}
	}
	return &pb.SharePicksResponse{Added: uint32(len(req.Picks))}, nil
}

func (s *slowNode) ReportPickerLoad(_ context.Context, req *pb.ReportPickerLoadRequest) (*pb.ReportPickerLoadResponse, error) {
	s.smu.Lock()
	defer s.smu.Unlock()
	s.reports++
	s.lastLoaded = 0
	for _, l := range req.Loads {
		s.lastLoaded += l.RunningRequests
		if l.RunningRequests > s.applied[l.ReplicaId] {
			s.ahead = append(s.ahead, fmt.Sprintf("%s: %d requests reported, %d picks held", l.ReplicaId, l.RunningRequests, s.applied[l.ReplicaId]))
		}
	}
	return &pb.ReportPickerLoadResponse{Accepted: uint32(len(req.Loads))}, nil
}

// A node never holds a pick's load before the pick (contract §5.12): the
// gateway's load reports go out every 10 ms while each picks push takes
// 20 ms to be applied, yet no report counts a request on a replica
// before that request's pick is held there; once the pushes are in, the
// reports count every request.
func TestGateway_NoLoadBeforeItsPick(t *testing.T) {
	node := &slowNode{fakeLookup: fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}}, delay: 20 * time.Millisecond, applied: map[string]uint32{}}
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: node,
		ShareLoad: client.LoadShareConfig{PickerID: "gw-1", Interval: client.MinLoadShareInterval}})
	defer g.Close()
	req := Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc}
	const picks = 30
	for range picks {
		d, err := g.Decide(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		d.Start(d.Replica) // never ended: every report counts it
		time.Sleep(3 * time.Millisecond)
	}
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		node.smu.Lock()
		defer node.smu.Unlock()
		return node.lastLoaded == picks, fmt.Sprintf("the last report counts %d requests, want %d", node.lastLoaded, picks)
	})
	node.smu.Lock()
	defer node.smu.Unlock()
	if len(node.ahead) > 0 {
		t.Fatalf("%d replica loads (in %d reports) counted requests before their picks were held, first: %s", len(node.ahead), node.reports, node.ahead[0])
	}
}

// The ledger of unpushed picks stays bounded when pushes never come
// (the push queue overflowed, the pusher stopped): entries past
// unsharedMaxAge are counted in the reports and dropped at a sweep.
func TestUnsharedLedger_DropsPicksWhosePushNeverCame(t *testing.T) {
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}},
		Lookup: &pushingLookup{fakeLookup: fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}}}})
	defer g.Close()
	p := &g.prov
	p.order.Lock()
	for id := uint64(1); id <= 10; id++ {
		p.holdLoad(id, "a", 100, 0)
	}
	for id, u := range p.unshared {
		u.at = u.at.Add(-2 * unsharedMaxAge) // never pushed
		p.unshared[id] = u
	}
	for id := uint64(11); id < 11+unsharedSweepEvery; id++ {
		p.holdLoad(id, "b", 100, 0)
	}
	for id := uint64(1); id <= 10; id++ {
		if _, ok := p.unshared[id]; ok {
			t.Fatalf("pick %d, older than %v, still in the ledger after a sweep", id, unsharedMaxAge)
		}
	}
	if n := len(p.unshared); n != unsharedSweepEvery {
		t.Fatalf("ledger holds %d picks, want the %d fresh ones", n, unsharedSweepEvery)
	}
	p.order.Unlock()
}

// A pick carries the tokens its decision counted as cached on the
// replica (the second request finds the first's four blocks), and the
// request's first token goes out as a Prefilled delta naming the pick:
// what the cluster needs to count a queued prefix once.
func TestProvisional_PickCarriesCachedTokensAndFirstToken(t *testing.T) {
	var got []provisional.Push
	g := newGW(t, Config{Prompts: fakePrompts{p: prompt.Prompt{TokenIDs: seq(64)}}, Lookup: &pushingLookup{fakeLookup: fakeLookup{resp: &pb.LookupRouteResponse{ServedBy: "n1"}}},
		Provisional: ProvisionalConfig{Sink: func(p provisional.Push) { got = append(got, p) }}})
	defer g.Close()
	req := Request{OpenAI: chatReq(t, `{"model": "m", "messages": [{"role": "user", "content": "x"}]}`), Candidates: abc}
	d1, _ := g.Decide(context.Background(), req)
	f1 := d1.Start(d1.Replica)
	d2, _ := g.Decide(context.Background(), req)
	f2 := d2.Start(d2.Replica)
	if len(got) != 2 || got[0].Picks[0].CachedTokens != 0 || d2.Replica != d1.Replica || d2.MatchedTokens != 64 || got[1].Picks[0].CachedTokens != 64 {
		t.Fatalf("picks %+v; second decision %s with %d matched, want %s with 64", got, d2.Replica, d2.MatchedTokens, d1.Replica)
	}
	f2.FirstToken()
	f2.FirstToken()
	if len(got) != 3 || len(got[2].Prefilled) != 1 || got[2].Prefilled[0] != f2.PickID() || got[2].Prefilled[0] != got[1].Picks[0].ID {
		t.Fatalf("after the first token: %+v", got)
	}
	if live := g.ProvisionalTable().Live(g.ProvisionalPickerID(), 0); len(live) != 2 || live[0].Prefilled || !live[1].Prefilled {
		t.Fatalf("own table %+v, want only the second prefilled", live)
	}
	f1.Done()
	f2.Done()
}
