package raftnode

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/raftnode/forwardpb"
)

// Sentinel errors. Every error a Node method returns wraps at most one of
// them (test with errors.Is); callers never see hashicorp/raft's errors.
var (
	// ErrNotLeader: the operation needs the leader and this node is not
	// (writes are forwarded and retried; admin calls are not).
	ErrNotLeader = errors.New("raftnode: not the leader")
	// ErrNoLeader: no leader is known (election in progress or no quorum).
	ErrNoLeader = errors.New("raftnode: no leader")
	// ErrTransferInProgress: a leadership transfer is under way.
	ErrTransferInProgress = errors.New("raftnode: leadership transfer in progress")
	// ErrLeadershipLost: leadership was lost while the write was in flight;
	// its outcome is unknown. Retrying with the same request id is safe.
	ErrLeadershipLost = errors.New("raftnode: leadership lost, outcome unknown")
	// ErrTimeout: the operation did not finish in its time budget (its
	// outcome may be unknown; writes are de-duplicated by request id).
	ErrTimeout = errors.New("raftnode: timeout")
	// ErrShutdown: the node is shut down.
	ErrShutdown = errors.New("raftnode: shut down")
	// ErrRejected: the state machine refused the command (e.g. an invalid
	// policy); nothing changed.
	ErrRejected = errors.New("raftnode: command rejected")
	// ErrInvalid: the request is invalid (bad policy, oversize command,
	// unknown server).
	ErrInvalid = errors.New("raftnode: invalid request")
	// ErrForward: the leader could not be reached for forwarding.
	ErrForward = errors.New("raftnode: forward to leader failed")
)

// translate maps hashicorp/raft and context errors to the sentinels.
func translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrNotVoter):
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %v", ErrTransferInProgress, err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("%w: %v", ErrLeadershipLost, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %v", ErrShutdown, err)
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	case errors.Is(err, fsm.ErrRejected), errors.Is(err, command.ErrEntryFormat), errors.Is(err, command.ErrDecode):
		return rejectedError{cause: err}
	}
	return err
}

// sentinels are the errors a Node method may wrap (see above).
var sentinels = []error{ErrNotLeader, ErrNoLeader, ErrTransferInProgress, ErrLeadershipLost,
	ErrTimeout, ErrShutdown, ErrRejected, ErrInvalid, ErrForward}

// translateApply is translate for the outcome of the leader's own
// raft.Apply. Raft fails a future with the log store's plain error when
// the leader cannot append the entry (a full disk) and then steps down:
// the entry was neither stored nor replicated, so the write is retried
// elsewhere with the same id, like a lost leadership. The store's error
// (it names server paths) is logged, not sent to the client.
func translateApply(err error, log interface{ Warn(string, ...any) }) error {
	t := translate(err)
	if t == nil {
		return nil
	}
	for _, s := range sentinels {
		if errors.Is(t, s) {
			return t
		}
	}
	log.Warn("raftnode: the leader could not append a write to its log; the write is retried on the next leader", "err", err)
	return fmt.Errorf("%w: the leader could not append the entry to its log", ErrLeadershipLost)
}

// rejectedError is ErrRejected wrapping the FSM's refusal (both stay in
// the chain for errors.Is) with the text said once: "raftnode: command
// rejected: <the FSM's reason>", not "... rejected: fsm: command rejected:
// ...".
type rejectedError struct{ cause error }

func (e rejectedError) Error() string {
	return ErrRejected.Error() + ": " + strings.TrimPrefix(e.cause.Error(), fsm.ErrRejected.Error()+": ")
}

func (e rejectedError) Unwrap() []error { return []error{ErrRejected, e.cause} }

// retriable reports whether a write may be retried (same request id).
func retriable(err error) bool {
	return errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) ||
		errors.Is(err, ErrTransferInProgress) || errors.Is(err, ErrLeadershipLost) ||
		errors.Is(err, ErrForward)
}

func toCode(err error) forwardpb.Code {
	switch {
	case err == nil:
		return forwardpb.Code_OK
	case errors.Is(err, ErrNotLeader):
		return forwardpb.Code_NOT_LEADER
	case errors.Is(err, ErrNoLeader):
		return forwardpb.Code_NO_LEADER
	case errors.Is(err, ErrTransferInProgress):
		return forwardpb.Code_TRANSFER_IN_PROGRESS
	case errors.Is(err, ErrLeadershipLost):
		return forwardpb.Code_LEADERSHIP_LOST
	case errors.Is(err, ErrTimeout):
		return forwardpb.Code_TIMEOUT
	case errors.Is(err, ErrShutdown):
		// the leader is going away: to the follower that is "no leader"
		return forwardpb.Code_NO_LEADER
	case errors.Is(err, ErrRejected):
		return forwardpb.Code_REJECTED
	case errors.Is(err, ErrInvalid):
		return forwardpb.Code_INVALID
	}
	return forwardpb.Code_INTERNAL
}

func fromCode(c forwardpb.Code, msg string) error {
	var base error
	switch c {
	case forwardpb.Code_OK:
		return nil
	case forwardpb.Code_NOT_LEADER:
		base = ErrNotLeader
	case forwardpb.Code_NO_LEADER, forwardpb.Code_SHUTDOWN:
		base = ErrNoLeader
	case forwardpb.Code_TRANSFER_IN_PROGRESS:
		base = ErrTransferInProgress
	case forwardpb.Code_LEADERSHIP_LOST:
		base = ErrLeadershipLost
	case forwardpb.Code_TIMEOUT:
		base = ErrTimeout
	case forwardpb.Code_REJECTED:
		base = ErrRejected
	case forwardpb.Code_INVALID:
		base = ErrInvalid
	default:
		return fmt.Errorf("raftnode: leader: %s", msg)
	}
	// The leader's text starts with the same sentinel: say it once.
	return fmt.Errorf("%w (at leader): %s", base, strings.TrimPrefix(msg, base.Error()+": "))
}
