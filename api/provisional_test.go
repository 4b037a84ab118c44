package api

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/provisional"
)

// fakePicks is a Provisional over a real store, recording what would be
// passed on to the peers; with load, a push's load report goes there
// after its picks, as a node holds it.
type fakePicks struct {
	store *provisional.Store
	fwd   int
	load  *fakeShare
}

func (f *fakePicks) SharePicks(req *pb.SharePicksRequest) (provisional.Result, error) {
	r, err := f.store.Apply(provisional.FromPB(req))
	if err == nil && !r.Superseded {
		f.fwd++
	}
	if l := req.GetLoad(); l != nil && f.load != nil && err == nil {
		rep := pickerload.FromPB(l)
		rep.PickerID = req.GetPickerId()
		_, err = f.load.store.Put(rep)
	}
	return r, err
}
func (f *fakePicks) Provisional() *provisional.Store { return f.store }

// confirmedOn answers like the index: the chain resolved, and a
// PREFIX_MATCH of depth blocks on replica (none when replica is "").
func confirmedOn(replica string, blocks uint32) func(*index.LookupRequest, *index.Result) {
	return func(req *index.LookupRequest, res *index.Result) {
		res.Chain = req.BlockHashes
		if replica == "" {
			res.Reason, res.Detail = index.NoHint, "no match"
			return
		}
		res.Reason, res.Detail = index.PrefixMatch, "prefix match"
		res.Hints = append(res.Hints, index.Hint{ReplicaID: replica, Score: float64(16 * blocks), MatchedTokens: 16 * blocks, MatchedBlocks: blocks, Freshness: 1})
	}
}

func picksSvc(f *fakeNode, maxBlocks int) (*Service, *fakePicks) {
	f.pol = policy.Default()
	fp := &fakePicks{store: provisional.New(provisional.Config{MaxBlocks: maxBlocks})}
	return NewService(Config{Backend: f, Provisional: fp}), fp
}

func pickOf(id uint64, replica string, hashes ...uint64) *pb.ProvisionalPick {
	return &pb.ProvisionalPick{PickId: id, ReplicaId: replica, HashScheme: "vllm", ModelId: "m", BlockHashes: hashes}
}

func lookupKey(hashes ...uint64) *pb.LookupRouteRequest {
	return &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", BlockHashes: hashes}
}

// A pick pushed to the node is in the next lookup's answer, marked
// provisional, and was passed on; once the index confirms the replica at
// the pick's depth the answer is the index's and the pick is dropped.
func TestSharePicks_LookupAnswersFromBoth(t *testing.T) {
	f := &fakeNode{lookup: confirmedOn("", 0)}
	svc, fp := picksSvc(f, 0)
	resp, err := svc.SharePicks(context.Background(), &pb.SharePicksRequest{PickerId: "gw", Sequence: 1, Picks: []*pb.ProvisionalPick{pickOf(1, "r2", 11, 12, 13)}})
	if err != nil || resp.Added != 1 || fp.fwd != 1 {
		t.Fatalf("SharePicks = %v, %v; passed on %d", resp, err, fp.fwd)
	}
	got, _ := svc.LookupRoute(context.Background(), lookupKey(11, 12, 13, 14))
	if got.ReasonCode != pb.ReasonCode_PREFIX_MATCH || len(got.Replicas) != 1 || !got.Replicas[0].Provisional ||
		got.Replicas[0].ReplicaId != "r2" || got.Replicas[0].MatchedTokens != 48 || !strings.Contains(got.Detail, "provisional") {
		t.Fatalf("lookup = %v, want a provisional PREFIX_MATCH on r2, 48 tokens", got)
	}
	f.lookup = confirmedOn("r2", 3)
	got, _ = svc.LookupRoute(context.Background(), lookupKey(11, 12, 13, 14))
	if len(got.Replicas) != 1 || got.Replicas[0].Provisional || got.Detail != "prefix match" {
		t.Fatalf("confirmed lookup = %v, want the index's hint", got)
	}
	if st := fp.store.Stats(); st.Picks != 0 || st.Confirmed != 1 {
		t.Fatalf("store after confirmation: %+v", st)
	}
}

// A bad push is INVALID_ARGUMENT naming the field; one past the node's
// bound is RESOURCE_EXHAUSTED naming the field and the limit, and what
// the node held is still answered.
func TestSharePicks_RefusalsNameFieldAndLimit(t *testing.T) {
	f := &fakeNode{lookup: confirmedOn("", 0)}
	svc, fp := picksSvc(f, 4)
	_, err := svc.SharePicks(context.Background(), &pb.SharePicksRequest{PickerId: "gw", Sequence: 1, Picks: []*pb.ProvisionalPick{pickOf(1, "")}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "picks[0].replica_id") {
		t.Fatalf("bad push: %v", err)
	}
	if _, err := svc.SharePicks(context.Background(), &pb.SharePicksRequest{PickerId: "gw", Sequence: 2, Picks: []*pb.ProvisionalPick{pickOf(1, "r1", 1, 2, 3)}}); err != nil {
		t.Fatal(err)
	}
	_, err = svc.SharePicks(context.Background(), &pb.SharePicksRequest{PickerId: "gw2", Sequence: 1, Picks: []*pb.ProvisionalPick{pickOf(1, "r2", 7, 8)}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "picks") || !strings.Contains(err.Error(), "limit of 4") {
		t.Fatalf("push past the bound: %v", err)
	}
	got, _ := svc.LookupRoute(context.Background(), lookupKey(1, 2, 3))
	if len(got.Replicas) != 1 || got.Replicas[0].ReplicaId != "r1" || !got.Replicas[0].Provisional {
		t.Fatalf("after a refusal: %v, want r1's pick still answered", got)
	}
	if fp.fwd != 1 {
		t.Fatalf("passed on %d pushes, want 1 (refused ones are not)", fp.fwd)
	}
	if _, err := NewService(Config{Backend: f}).SharePicks(context.Background(), &pb.SharePicksRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("without a store: %v", err)
	}
}
