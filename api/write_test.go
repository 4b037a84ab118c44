package api

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/raftnode"
)

// Ingest and ReportReplicaStats take one path: a batch with a valid entry
// commits it and reports the node's write index; a batch with none
// commits nothing and reports the node's applied index; a failed commit
// is the code the error table gives it; a request over a limit is
// INVALID_ARGUMENT.
func TestWrites_IngestAndStatsShareOnePath(t *testing.T) {
	ev := &pb.BlockEvent{Kind: pb.BlockEvent_STORED, ReplicaId: "r", HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1}}
	bad := &pb.BlockEvent{Kind: pb.BlockEvent_STORED, HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1}}
	st := &pb.ReplicaStats{ReplicaId: "r", ModelId: "m", HashSchemes: []string{"vllm"}}
	badSt := &pb.ReplicaStats{ModelId: "m"}
	type answer struct {
		accepted, rejected int
		applied            uint64
	}
	kinds := []struct {
		name  string
		write func(s *Service, valid, invalid int, id string) (answer, error)
		index uint64 // the fake node's write index for this kind
	}{
		{"Ingest", func(s *Service, valid, invalid int, id string) (answer, error) {
			req := &pb.IngestRequest{RequestId: id}
			for range valid {
				req.Events = append(req.Events, ev)
			}
			for range invalid {
				req.Events = append(req.Events, bad)
			}
			r, err := s.Ingest(context.Background(), req)
			return answer{int(r.GetAccepted()), len(r.GetRejected()), r.GetAppliedIndex()}, err
		}, 43},
		{"ReportReplicaStats", func(s *Service, valid, invalid int, id string) (answer, error) {
			req := &pb.ReportReplicaStatsRequest{RequestId: id}
			for range valid {
				req.Stats = append(req.Stats, st)
			}
			for range invalid {
				req.Stats = append(req.Stats, badSt)
			}
			r, err := s.ReportReplicaStats(context.Background(), req)
			return answer{int(r.GetAccepted()), len(r.GetRejected()), r.GetAppliedIndex()}, err
		}, 44},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			f := &fakeNode{lookup: match}
			s := newSvc(f, nil)
			if got, err := k.write(s, 1, 1, ""); err != nil || got != (answer{1, 1, k.index}) {
				t.Errorf("one valid, one invalid: %+v %v, want 1 accepted, 1 rejected at the write's index %d", got, err, k.index)
			}
			if got, err := k.write(s, 0, 2, ""); err != nil || got != (answer{0, 2, 42}) {
				t.Errorf("nothing valid: %+v %v, want 0 accepted, 2 rejected at the node's applied index 42", got, err)
			}
			if _, err := k.write(s, 1, 0, "\x00"); status.Code(err) != codes.InvalidArgument {
				t.Errorf("request id with a control character: %v, want INVALID_ARGUMENT", err)
			}
			f.err = raftnode.ErrNoLeader
			if _, err := k.write(s, 1, 0, ""); status.Code(err) != codes.Unavailable {
				t.Errorf("no leader: %v, want UNAVAILABLE", err)
			}
		})
	}
}
