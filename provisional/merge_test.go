package provisional_test

import (
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/provisional"
)

func TestMerge_NoHintBecomesProvisionalPrefixMatch(t *testing.T) {
	resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_AFFINITY_HINT, Detail: "affinity",
		Replicas: []*pb.ReplicaHint{{ReplicaId: "r9", Score: 1}},
		Loads:    []*pb.ReplicaLoad{{ReplicaId: "r2", WaitingRequests: 3, RunningRequests: 4, Pressure: 0.5}}}
	n, covered := provisional.Merge(resp, []provisional.Match{{Replica: "r1", Blocks: 2, Tokens: 32, Age: 3 * time.Millisecond}, {Replica: "r2", Blocks: 4, Tokens: 64}}, 0)
	if n != 2 || covered != nil {
		t.Fatalf("merge = %d, %v", n, covered)
	}
	if resp.ReasonCode != pb.ReasonCode_PREFIX_MATCH || resp.Detail != provisional.DetailProvisional {
		t.Fatalf("reason %v detail %q", resp.ReasonCode, resp.Detail)
	}
	// By score (matched tokens): r2 (64) then r1 (32); the affinity hint is gone.
	if len(resp.Replicas) != 2 {
		t.Fatalf("hints %v", resp.Replicas)
	}
	r2, r1 := resp.Replicas[0], resp.Replicas[1]
	if r2.ReplicaId != "r2" || r2.MatchedTokens != 64 || r2.MatchedBlocks != 4 || !r2.Provisional || r2.WaitingRequests != 3 || r2.RunningRequests != 4 || r2.Pressure != 0.5 {
		t.Fatalf("r2 hint %v", r2)
	}
	if r1.ReplicaId != "r1" || r1.MatchedTokens != 32 || !r1.Provisional || r1.AgeMs != 3 || r1.Freshness != 1 {
		t.Fatalf("r1 hint %v", r1)
	}
}

func TestMerge_ConfirmedStandsDeeperProvisionalWins(t *testing.T) {
	resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, Detail: "prefix match",
		Replicas: []*pb.ReplicaHint{{ReplicaId: "r1", Score: 40, MatchedBlocks: 3, MatchedTokens: 48}, {ReplicaId: "r2", Score: 10, MatchedBlocks: 1, MatchedTokens: 16}}}
	n, covered := provisional.Merge(resp, []provisional.Match{{Replica: "r1", Blocks: 3, Tokens: 48}, {Replica: "r2", Blocks: 5, Tokens: 80}}, 1)
	if n != 1 || len(covered) != 1 || covered[0].Replica != "r1" {
		t.Fatalf("merge = %d, covered %v", n, covered)
	}
	// r2's provisional 80 tokens outrank r1's confirmed 40, and the cut
	// to 1 keeps it.
	if len(resp.Replicas) != 1 || resp.Replicas[0].ReplicaId != "r2" || !resp.Replicas[0].Provisional || resp.Replicas[0].MatchedTokens != 80 {
		t.Fatalf("hints %v", resp.Replicas)
	}
	if resp.Detail != "prefix match"+provisional.DetailAlsoProvisional {
		t.Fatalf("detail %q", resp.Detail)
	}
}

func TestMerge_NothingToMerge(t *testing.T) {
	resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT, Detail: "no match"}
	if n, c := provisional.Merge(resp, nil, 0); n != 0 || c != nil || resp.ReasonCode != pb.ReasonCode_NO_HINT || resp.Detail != "no match" {
		t.Fatalf("merge of nothing changed the answer: %v", resp)
	}
}

// A node cuts the merged answer to the request's max_replicas, but never
// below the hints the index gave it: the confirmed hints stay, ranked
// below a deeper provisional one, and the covered pick is confirmed
// (dropped from the store).
func TestMergeInto_NeverShortensTheAnswer(t *testing.T) {
	s := provisional.New(provisional.Config{})
	part := provisional.Partition{Scheme: "s", Model: "m"}
	chain := []uint64{1, 2, 3, 4, 5}
	if _, err := s.Apply(provisional.Push{PickerID: "g", Sequence: 1, Picks: []provisional.Pick{
		{ID: 1, Replica: "r3", Partition: part, Hashes: chain},
		{ID: 2, Replica: "r1", Partition: part, Hashes: chain[:2]},
	}}); err != nil {
		t.Fatal(err)
	}
	resp := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH,
		Replicas: []*pb.ReplicaHint{{ReplicaId: "r1", Score: 48, MatchedBlocks: 3, MatchedTokens: 48}, {ReplicaId: "r2", Score: 16, MatchedBlocks: 1, MatchedTokens: 16}}}
	if n := s.MergeInto(resp, part, chain, 1); n != 1 {
		t.Fatalf("provisional hints %d, want 1 (r3)", n)
	}
	var got []string
	for _, h := range resp.Replicas {
		got = append(got, h.ReplicaId)
	}
	// r3's 80 provisional tokens first; then the cut to max(1, 2 hints given).
	if len(got) != 2 || got[0] != "r3" || got[1] != "r1" {
		t.Fatalf("hints %v, want [r3 r1]", got)
	}
	// r1's pick (2 blocks) is covered by its confirmed 3: confirmed, gone.
	if ms := s.At().Matches(nil, part, chain); len(ms) != 1 || ms[0].Replica != "r3" {
		t.Fatalf("picks left %v, want r3's alone", ms)
	}
}
