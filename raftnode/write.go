package raftnode

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// The typed write API: one method per write operation, each encoding its
// command once and handing the bytes to submitEncoded.

// WriteResult is the outcome of a committed write.
type WriteResult struct {
	// Index is the log index the write applied at (for a duplicate, the
	// index of the original application).
	Index uint64
	// Duplicate is true when the request id had already been applied
	// within the de-duplication window: the write was acknowledged as a
	// retry and its payload not applied again (contract §8.5).
	Duplicate bool
}

// Ingest commits a batch of validated block events (contract §6.3) once it is
// committed by a quorum and applied on this node, and says at which log
// index and whether the request id was a duplicate. Concurrent calls on
// the leader share log entries (group commit); a follower forwards to the
// leader. requestID "" gets a fresh id; a retried requestID applies once.
// The events are encoded once, here (command.MarshalIngest). Errors:
// ErrInvalid, ErrTimeout, ErrNoLeader (no leader within the retry
// budget), ErrRejected, ErrShutdown.
func (n *Node) Ingest(ctx context.Context, requestID string, evs []index.BlockEvent) (WriteResult, error) {
	if requestID == "" {
		requestID = n.NewRequestID()
	}
	cmd, err := command.MarshalIngest(requestID, evs)
	if err != nil {
		return WriteResult{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	r, err := n.submitEncoded(ctx, cmd)
	return WriteResult{Index: r.Index, Duplicate: r.Duplicate}, err
}

// ReportStats commits replica stats like Ingest.
func (n *Node) ReportStats(ctx context.Context, requestID string, st []index.ReplicaStats) (WriteResult, error) {
	if requestID == "" {
		requestID = n.NewRequestID()
	}
	r, err := n.submit(ctx, command.StatsCommand(requestID, st))
	return WriteResult{Index: r.Index, Duplicate: r.Duplicate}, err
}

// SetPolicy commits p and returns the committed policy with its new
// Version (previous + 1). p is checked where a policy enters the system
// (api.PolicyFromPB, policy.Parse) and again at apply (fsm), which refuses
// an invalid one on every node alike: ErrRejected naming the knob (on
// the leader a *policy.FieldError stays in the chain), the policy in
// force unchanged.
func (n *Node) SetPolicy(ctx context.Context, p policy.Policy) (policy.Policy, error) {
	r, err := n.submit(ctx, command.SetPolicyCommand(n.NewRequestID(), p))
	if err != nil {
		return policy.Policy{}, err
	}
	if r.Policy == nil {
		return n.Policy(), nil
	}
	return *r.Policy, nil
}

// Expire commits an expire command with nowMs (normally the leader's
// ticker does this; exposed for tests and operators). Returns the index.
func (n *Node) Expire(ctx context.Context, nowMs int64) (uint64, error) {
	r, err := n.submit(ctx, command.ExpireCommand(n.NewRequestID(), nowMs))
	return r.Index, err
}

func policyBytes(p *policy.Policy) []byte {
	if p == nil {
		return nil
	}
	b, _ := proto.Marshal(fsmpb.PolicyToPB(*p))
	return b
}

func policyFromBytes(b []byte) *policy.Policy {
	if len(b) == 0 {
		return nil
	}
	var q fsmpb.Policy
	if proto.Unmarshal(b, &q) != nil {
		return nil
	}
	p := fsmpb.PolicyFromPB(&q)
	return &p
}

// RecordStreamPositions commits engine stream positions (contract §6.11)
// like Ingest; the FSM keeps the latest per replica id. Errors as Ingest.
func (n *Node) RecordStreamPositions(ctx context.Context, requestID string, ps []*fsmpb.StreamPosition) (WriteResult, error) {
	if requestID == "" {
		requestID = n.NewRequestID()
	}
	r, err := n.submit(ctx, command.StreamPositionsCommand(requestID, ps))
	return WriteResult{Index: r.Index, Duplicate: r.Duplicate}, err
}

// StreamPositions returns the stream positions this node's FSM holds for
// ids, in the order asked, leaving out ids without one (contract §6.11). A
// local read: a follower may be behind the leader.
func (n *Node) StreamPositions(ids []string) []*fsmpb.StreamPosition {
	return n.fsm.StreamPositions(ids)
}
