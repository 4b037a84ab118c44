package api

import (
	"context"

	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// nodeBackend adapts a *raftnode.Node to Backend: it converts the read
// state; its errors are raftnode's, which the service maps with
// StatusFromError.
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
	return WriteResult{AppliedIndex: r.Index, Duplicate: r.Duplicate}, err
}

func (b nodeBackend) ReportStats(ctx context.Context, id string, st []index.ReplicaStats) (WriteResult, error) {
	r, err := b.n.ReportStats(ctx, id, st)
	return WriteResult{AppliedIndex: r.Index, Duplicate: r.Duplicate}, err
}

func (b nodeBackend) SetPolicy(ctx context.Context, p policy.Policy) (policy.Policy, error) {
	return b.n.SetPolicy(ctx, p)
}
