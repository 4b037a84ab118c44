package api

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/raftnode"
)

// MaxPositionsPerRequest bounds the positions of one
// RecordStreamPositions and the replica ids of one GetStreamPositions
// (contract §6.11).
const MaxPositionsPerRequest = 4096

// Positions is the engine stream positions as the service needs them
// (contract §6.11); *raftnode.Node is one.
type Positions interface {
	// RecordStreamPositions commits ps through the log, with request ids
	// as Backend.Ingest.
	RecordStreamPositions(ctx context.Context, requestID string, ps []*fsmpb.StreamPosition) (raftnode.WriteResult, error)
	// StreamPositions reads the positions held for ids, in the order
	// asked, leaving out ids without one.
	StreamPositions(ids []string) []*fsmpb.StreamPosition
}

// ErrNoPositions is the stream position calls' answer on a service built
// without Positions (Config.Positions nil).
var ErrNoPositions = status.Error(codes.Unimplemented, "this server holds no stream positions (built without Config.Positions)")

// RecordStreamPositions commits where each replica's engine event stream
// stands (contract §6.11). Errors (StatusFromError): INVALID_ARGUMENT naming
// the field at fault (positions[i].replica_id missing, over MaxIDBytes or
// given twice; positions[i].seq negative; more than
// MaxPositionsPerRequest positions; request_id over MaxRequestIDBytes);
// the write errors of Ingest otherwise.
func (s *Service) RecordStreamPositions(ctx context.Context, req *pb.RecordStreamPositionsRequest) (*pb.RecordStreamPositionsResponse, error) {
	if s.pos == nil {
		return nil, ErrNoPositions
	}
	ps, err := positionsFromPB(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if len(ps) == 0 {
		return &pb.RecordStreamPositionsResponse{AppliedIndex: s.node.ReadState().AppliedIndex}, nil
	}
	start := time.Now()
	wr, err := s.pos.RecordStreamPositions(ctx, req.GetRequestId(), ps)
	s.metrics.CommitDone("positions", time.Since(start), err == nil)
	if err != nil {
		return nil, StatusFromError(err)
	}
	return &pb.RecordStreamPositionsResponse{AppliedIndex: wr.Index, Accepted: uint32(len(ps))}, nil
}

// positionsFromPB validates req and converts its positions.
func positionsFromPB(req *pb.RecordStreamPositionsRequest) ([]*fsmpb.StreamPosition, error) {
	if n := len(req.GetRequestId()); n > MaxRequestIDBytes {
		return nil, fmt.Errorf("request_id: %d bytes, the limit is %d", n, MaxRequestIDBytes)
	}
	in := req.GetPositions()
	if len(in) > MaxPositionsPerRequest {
		return nil, fmt.Errorf("positions: %d, the limit is %d per request", len(in), MaxPositionsPerRequest)
	}
	seen := make(map[string]int, len(in))
	out := make([]*fsmpb.StreamPosition, len(in))
	for i, p := range in {
		id := p.GetReplicaId()
		switch {
		case id == "":
			return nil, fmt.Errorf("positions[%d].replica_id: missing", i)
		case len(id) > MaxIDBytes:
			return nil, fmt.Errorf("positions[%d].replica_id: %d bytes, the limit is %d", i, len(id), MaxIDBytes)
		case p.GetSeq() < 0:
			return nil, fmt.Errorf("positions[%d].seq: %d, must be at least 0", i, p.GetSeq())
		}
		if j, dup := seen[id]; dup {
			return nil, fmt.Errorf("positions[%d].replica_id: %q is also positions[%d]", i, id, j)
		}
		seen[id] = i
		out[i] = &fsmpb.StreamPosition{ReplicaId: id, Seq: p.GetSeq(), BatchHash: p.GetBatchHash()}
	}
	return out, nil
}

// GetStreamPositions returns the positions this node holds for the
// replicas asked, in the order asked, leaving out those without one
// (contract §6.11). A follower answers from its own state, which may be
// behind the leader's. Errors: INVALID_ARGUMENT for more than
// MaxPositionsPerRequest replica ids.
func (s *Service) GetStreamPositions(_ context.Context, req *pb.GetStreamPositionsRequest) (*pb.GetStreamPositionsResponse, error) {
	if s.pos == nil {
		return nil, ErrNoPositions
	}
	if n := len(req.GetReplicaIds()); n > MaxPositionsPerRequest {
		return nil, status.Errorf(codes.InvalidArgument, "replica_ids: %d, the limit is %d per request", n, MaxPositionsPerRequest)
	}
	if !s.node.Ready() {
		return nil, status.Error(codes.Unavailable, "node not ready: its state is still loading")
	}
	held := s.pos.StreamPositions(req.GetReplicaIds())
	resp := &pb.GetStreamPositionsResponse{Positions: make([]*pb.StreamPosition, len(held))}
	for i, p := range held {
		resp.Positions[i] = &pb.StreamPosition{ReplicaId: p.GetReplicaId(), Seq: p.GetSeq(), BatchHash: p.GetBatchHash()}
	}
	return resp, nil
}
