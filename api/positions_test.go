package api

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// fakePositions holds positions like the FSM.
type fakePositions struct {
	held map[string]*fsmpb.StreamPosition
}

func (f *fakePositions) RecordStreamPositions(_ context.Context, _ string, ps []*fsmpb.StreamPosition) (raftnode.WriteResult, error) {
	for _, p := range ps {
		f.held[p.ReplicaId] = p
	}
	return raftnode.WriteResult{Index: 7}, nil
}

func (f *fakePositions) StreamPositions(ids []string) []*fsmpb.StreamPosition {
	var out []*fsmpb.StreamPosition
	for _, id := range ids {
		if p, ok := f.held[id]; ok {
			out = append(out, p)
		}
	}
	return out
}

// Positions are recorded and read back in the order asked; a request no
// record could take is refused whole, naming the field and the limit.
func TestStreamPositions_RecordReadAndRefuse(t *testing.T) {
	fp := &fakePositions{held: map[string]*fsmpb.StreamPosition{}}
	s := NewService(Config{Backend: isoNode{index.New(policy.Default())}, Positions: fp})
	ctx := context.Background()
	resp, err := s.RecordStreamPositions(ctx, &pb.RecordStreamPositionsRequest{Positions: []*pb.StreamPosition{
		{ReplicaId: "a", Seq: 5, BatchHash: 0xa5}, {ReplicaId: "b", Seq: 0, BatchHash: 0xb0}}})
	if err != nil || resp.GetAccepted() != 2 || resp.GetAppliedIndex() != 7 {
		t.Fatalf("record: %v %v", resp, err)
	}
	got, err := s.GetStreamPositions(ctx, &pb.GetStreamPositionsRequest{ReplicaIds: []string{"b", "x", "a"}})
	if err != nil || len(got.GetPositions()) != 2 || got.GetPositions()[0].GetReplicaId() != "b" || got.GetPositions()[1].GetSeq() != 5 || got.GetPositions()[1].GetBatchHash() != 0xa5 {
		t.Fatalf("read: %v %v, want b then a at seq 5", got, err)
	}
	many := make([]*pb.StreamPosition, MaxPositionsPerRequest+1)
	for i := range many {
		many[i] = &pb.StreamPosition{ReplicaId: strings.Repeat("r", 1+i%200), Seq: 1}
	}
	for name, c := range map[string]struct {
		ps   []*pb.StreamPosition
		want string
	}{
		"no replica":   {[]*pb.StreamPosition{{Seq: 1}}, "positions[0].replica_id: missing"},
		"long replica": {[]*pb.StreamPosition{{ReplicaId: strings.Repeat("r", MaxIDBytes+1)}}, "positions[0].replica_id: 257 bytes, the limit is 256"},
		"negative seq": {[]*pb.StreamPosition{{ReplicaId: "a", Seq: -1}}, "positions[0].seq: -1, must be at least 0"},
		"twice":        {[]*pb.StreamPosition{{ReplicaId: "a"}, {ReplicaId: "a", Seq: 2}}, `positions[1].replica_id: "a" is also positions[0]`},
		"too many":     {many, "positions: 4097, the limit is 4096 per request"},
	} {
		_, err := s.RecordStreamPositions(ctx, &pb.RecordStreamPositionsRequest{Positions: c.ps})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT naming %q", name, err, c.want)
		}
	}
	if _, err := NewService(Config{Backend: isoNode{index.New(policy.Default())}}).GetStreamPositions(ctx, &pb.GetStreamPositionsRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("without Positions: %v, want UNIMPLEMENTED", err)
	}
}
