package raftnode

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/provisional"
	"github.com/inference-cache/inference-cache/raftnode/forwardpb"
)

func picksPush(picker string, seq uint64, blocks int) *pb.SharePicksRequest {
	k := &pb.ProvisionalPick{PickId: seq, ReplicaId: "r1", HashScheme: "vllm", ModelId: "m"}
	for i := range blocks {
		k.BlockHashes = append(k.BlockHashes, uint64(1000*seq)+uint64(i))
	}
	return &pb.SharePicksRequest{PickerId: picker, Sequence: seq, Picks: []*pb.ProvisionalPick{k}}
}

// picksCalls keeps every push (each is a delta) in order and packs them
// into calls within the byte budget; a push over it goes alone.
func TestPicksCalls_EveryPushInOrderWithinTheBudget(t *testing.T) {
	a1, a2, big, b1 := picksPush("a", 1, 4), picksPush("a", 2, 4), picksPush("b", 7, 400), picksPush("b", 8, 4)
	budget := proto.Size(a1) + proto.Size(a2)
	calls := picksCalls([]*pb.SharePicksRequest{a1, a2, big, b1}, budget)
	if len(calls) != 3 || len(calls[0]) != 2 || calls[0][0] != a1 || calls[0][1] != a2 || len(calls[1]) != 1 || calls[1][0] != big || len(calls[2]) != 1 || calls[2][0] != b1 {
		t.Fatalf("calls %v", calls)
	}
}

// A peer applies passed-on pushes, dating each pick's expiry from its
// queue age on the sender: a pick with max age 1 s aged 600 ms is held
// 400 ms more; an invalid push is counted refused, the others applied.
func TestShareLoad_AppliesPicksWithTheirAge(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	n := &Node{picks: provisional.New(provisional.Config{Now: func() time.Time { return now }})}
	f := &forwardServer{n: n}
	p := picksPush("gw", 1, 3)
	p.Picks[0].MaxAgeMs = 1000
	bad := picksPush("", 2, 1)
	resp, err := f.ShareLoad(context.Background(), &forwardpb.ShareLoadRequest{Picks: []*pb.SharePicksRequest{p, bad}, PicksAgesMs: []uint32{600, 0}})
	if err != nil || resp.PicksApplied != 1 || resp.PicksRefused != 1 {
		t.Fatalf("ShareLoad = %v, %v", resp, err)
	}
	part := provisional.Partition{Scheme: "vllm", Model: "m"}
	chain := p.Picks[0].BlockHashes
	now = now.Add(399 * time.Millisecond)
	if ms := n.picks.At().Matches(nil, part, chain); len(ms) != 1 || ms[0].Blocks != 3 {
		t.Fatalf("at 399 ms: %v", ms)
	}
	now = now.Add(time.Millisecond)
	if ms := n.picks.At().Matches(nil, part, chain); len(ms) != 0 {
		t.Fatalf("at 400 ms (1 s after the pick): %v, want expired", ms)
	}
}

// A push's load report is held with its picks, on the node it was sent
// to and on a peer it was passed on to; a report the load store has no
// room for is dropped and the push stands; a report breaking a rule
// refuses the whole push naming the field under "load.", and its picks
// are not held.
func TestSharePicks_HoldsThePushesLoadReport(t *testing.T) {
	newNode := func() *Node {
		return &Node{picks: provisional.New(provisional.Config{}), pickers: pickerload.New(pickerload.Config{})}
	}
	withLoad := func(p *pb.SharePicksRequest, picker string, seq uint64, replica string) *pb.SharePicksRequest {
		p.Load = &pb.ReportPickerLoadRequest{PickerId: picker, Sequence: seq, IntervalMs: 1000,
			Loads: []*pb.PickerReplicaLoad{{ReplicaId: replica, PrefillingRequests: 1, PrefillTokens: 48, RunningRequests: 1}}}
		return p
	}
	part := provisional.Partition{Scheme: "vllm", Model: "m"}

	n := newNode()
	p := withLoad(picksPush("gw", 1, 3), "", 1, "r1") // picker id: the push's
	p.SentToNodes = 1
	if _, err := n.SharePicks(p); err != nil {
		t.Fatal(err)
	}
	if ms := n.picks.At().Matches(nil, part, p.Picks[0].BlockHashes); len(ms) != 1 {
		t.Fatalf("picks held: %v", ms)
	}
	if sum := n.pickers.At().Others("other", "r1"); sum.PrefillTokens != 48 || sum.Pickers != 1 {
		t.Fatalf("load held: %+v, want gw's 48 prefill tokens on r1", sum)
	}

	peer := newNode()
	f := &forwardServer{n: peer}
	if resp, err := f.ShareLoad(context.Background(), &forwardpb.ShareLoadRequest{Picks: []*pb.SharePicksRequest{p}}); err != nil || resp.PicksApplied != 1 {
		t.Fatalf("ShareLoad = %v, %v", resp, err)
	}
	if sum := peer.pickers.At().Others("other", "r1"); sum.PrefillTokens != 48 {
		t.Fatalf("peer's load: %+v, want the passed-on push's 48 prefill tokens", sum)
	}

	// A report the load store has no room for is dropped; the push and
	// its picks stand.
	full := &Node{picks: provisional.New(provisional.Config{}), pickers: pickerload.New(pickerload.Config{MaxEntries: 1})}
	big := withLoad(picksPush("gw", 4, 3), "gw", 4, "r1")
	big.Load.Loads = append(big.Load.Loads, &pb.PickerReplicaLoad{ReplicaId: "r2", PrefillTokens: 1})
	if res, err := full.SharePicks(big); err != nil || res.Added != 1 {
		t.Fatalf("push with a report over the load store's room: %+v, %v; want its pick added", res, err)
	}
	if sum := full.pickers.At().Others("other", "r1"); sum.Pickers != 0 {
		t.Fatalf("the load store holds %+v past its room", sum)
	}

	for _, tc := range []struct {
		push  *pb.SharePicksRequest
		field string
	}{
		{withLoad(picksPush("gw", 2, 3), "gw-b", 2, "r1"), "load.picker_id"},
		{withLoad(picksPush("gw", 3, 3), "gw", 3, ""), "load.loads[0].replica_id"},
	} {
		n := newNode()
		_, err := n.SharePicks(tc.push)
		var fe *pickerload.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Fatalf("push %d: err %v, want a field error naming %s", tc.push.Sequence, err, tc.field)
		}
		if ms := n.picks.At().Matches(nil, part, tc.push.Picks[0].BlockHashes); len(ms) != 0 {
			t.Fatalf("push %d refused, yet its picks are held: %v", tc.push.Sequence, ms)
		}
	}
}
