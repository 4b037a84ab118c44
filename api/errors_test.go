package api

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// One table maps errors to gRPC codes, whichever layer the error comes
// from: a backend's raftnode error reaches the client with the code of
// its sentinel (not INTERNAL), and the message is the error's text.
func TestStatusFromError_OneTableForEveryLayer(t *testing.T) {
	cases := []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("%w: election", raftnode.ErrNoLeader), codes.Unavailable},
		{raftnode.ErrNotLeader, codes.Unavailable},
		{raftnode.ErrTransferInProgress, codes.Unavailable},
		{raftnode.ErrForward, codes.Unavailable},
		{raftnode.ErrShutdown, codes.Unavailable},
		{raftnode.ErrLeadershipLost, codes.Unavailable},
		{fmt.Errorf("%w: gave up", raftnode.ErrTimeout), codes.DeadlineExceeded},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{fmt.Errorf("%w: too big", raftnode.ErrInvalid), codes.InvalidArgument},
		{fmt.Errorf("%w: apply refused", raftnode.ErrRejected), codes.InvalidArgument},
		{&RequestError{Limit: "a limit", Detail: "a value"}, codes.InvalidArgument},
		{&policy.FieldError{Field: "maxReplicas", Value: "0", Reason: "must be between 1 and 64"}, codes.InvalidArgument},
		{status.Error(codes.ResourceExhausted, "full"), codes.ResourceExhausted},
		{errors.New("disk on fire"), codes.Internal},
	}
	for _, c := range cases {
		got := StatusFromError(c.err)
		msg := c.err.Error()
		if s, ok := status.FromError(c.err); ok {
			msg = s.Message()
		}
		if status.Code(got) != c.want || status.Convert(got).Message() != msg {
			t.Errorf("StatusFromError(%v) = %v, want %v with the error's text", c.err, got, c.want)
		}
	}
	if StatusFromError(nil) != nil {
		t.Error("nil mapped to an error")
	}
}

// The service maps its backend's errors with that table: a raftnode
// sentinel from any Backend (not only NewNodeBackend's) is the code the
// table gives it.
func TestIngest_BackendErrorsMappedByTheOneTable(t *testing.T) {
	req := &pb.IngestRequest{Events: []*pb.BlockEvent{{Kind: pb.BlockEvent_STORED, ReplicaId: "r", HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1}}}}
	for err, want := range map[error]codes.Code{
		raftnode.ErrNoLeader:       codes.Unavailable,
		raftnode.ErrLeadershipLost: codes.Unavailable,
		raftnode.ErrTimeout:        codes.DeadlineExceeded,
		raftnode.ErrRejected:       codes.InvalidArgument,
	} {
		f := &fakeNode{lookup: match, err: err}
		if _, got := newSvc(f, nil).Ingest(context.Background(), req); status.Code(got) != want {
			t.Errorf("backend error %v: %v, want %v", err, got, want)
		}
	}
}
