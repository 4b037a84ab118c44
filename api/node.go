package api

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// nodeBackend adapts a *raftnode.Node to Backend: it converts the read
// state and maps raftnode's sentinel errors to gRPC status errors.
type nodeBackend struct{ n *raftnode.Node }

// NewNodeBackend returns the Backend of a raftnode.Node.
func NewNodeBackend(n *raftnode.Node) Backend { return nodeBackend{n} }

func (b nodeBackend) Lookup(req *index.LookupRequest, res *index.Result) { b.n.Lookup(req, res) }
func (b nodeBackend) Credit(p index.Partition, hashes []uint64)          { b.n.Credit(p, hashes) }
func (b nodeBackend) Ready() bool                                        { return b.n.Ready() }
func (b nodeBackend) Policy() policy.Policy                              { return b.n.Policy() }

func (b nodeBackend) ReadState() ReadState {
	rs := b.n.ReadState()
	off, ok := b.n.LeaderOffsetCached() // 0 when unknown: nothing to report
	if ok {
		// Lookups rank with the corrected clock (raftnode Node.Now): what
		// is left of the offset after this node's own correction.
		off -= b.n.ClockCorrection()
	}
	return ReadState{NodeID: rs.NodeID, AppliedIndex: rs.AppliedIndex, Stale: rs.Stale, StaleReason: rs.StaleReason,
		Leader: rs.Leader, LastLeaderContactMs: uint64(rs.LastLeaderContact.Milliseconds()),
		NewestObservedMs: b.n.Index().NewestObservedMs(), ClockOffsetToLeader: off}
}

func (b nodeBackend) Ingest(ctx context.Context, id string, evs []index.BlockEvent) (WriteResult, error) {
	r, err := b.n.Ingest(ctx, id, evs)
	return WriteResult{AppliedIndex: r.Index, Duplicate: r.Duplicate}, NodeError(err)
}

func (b nodeBackend) ReportStats(ctx context.Context, id string, st []index.ReplicaStats) (WriteResult, error) {
	r, err := b.n.ReportStats(ctx, id, st)
	return WriteResult{AppliedIndex: r.Index, Duplicate: r.Duplicate}, NodeError(err)
}

func (b nodeBackend) SetPolicy(ctx context.Context, p policy.Policy) (policy.Policy, error) {
	got, err := b.n.SetPolicy(ctx, p)
	return got, NodeError(err)
}

// NodeError maps a raftnode error to a gRPC status error (SPEC 8):
//
//	ErrNotLeader, ErrNoLeader, ErrTransferInProgress, ErrForward,
//	ErrShutdown                      → UNAVAILABLE (retry, any node)
//	ErrLeadershipLost                → UNAVAILABLE (outcome unknown: retry
//	                                   with the same request id)
//	ErrTimeout, context deadline     → DEADLINE_EXCEEDED
//	context canceled                 → CANCELED
//	ErrInvalid, ErrRejected          → INVALID_ARGUMENT
//	anything else                    → INTERNAL
//
// nil stays nil.
func NodeError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var c codes.Code
	switch {
	case errors.Is(err, raftnode.ErrNotLeader), errors.Is(err, raftnode.ErrNoLeader),
		errors.Is(err, raftnode.ErrTransferInProgress), errors.Is(err, raftnode.ErrForward),
		errors.Is(err, raftnode.ErrShutdown), errors.Is(err, raftnode.ErrLeadershipLost):
		c = codes.Unavailable
	case errors.Is(err, raftnode.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		c = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		c = codes.Canceled
	case errors.Is(err, raftnode.ErrInvalid), errors.Is(err, raftnode.ErrRejected):
		c = codes.InvalidArgument
	default:
		c = codes.Internal
	}
	return status.Error(c, err.Error())
}
