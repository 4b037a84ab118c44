package raftnode

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/command/fsmpb"
	"github.com/inference-cache/inference-cache/fsm"
)

// Retrying a write until it is committed and applied, or the budget
// (Config.WriteRetry) is spent.

func (n *Node) notLeaderErr() error {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return ErrNoLeader
	}
	return fmt.Errorf("%w: leader is %s", ErrNotLeader, id)
}

// submit encodes c and runs it to completion (submitEncoded).
func (n *Node) submit(ctx context.Context, c *fsmpb.Command) (fsm.Result, error) {
	cmd, err := command.Marshal(c)
	if err != nil {
		return fsm.Result{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return n.submitEncoded(ctx, cmd)
}

// retryBackoff is the jittered wait before retry attempt+1 of a write
// (10–50 ms, growing to 50–250 ms from the fifth attempt): short against
// an election, spread so retries from many callers do not arrive at once.
func retryBackoff(attempt int) time.Duration {
	return time.Duration(10+rand.IntN(40)) * time.Millisecond * time.Duration(min(attempt+1, 5))
}

// submitEncoded runs one encoded command (command.Marshal or
// command.MarshalIngest) to completion: locally when leader, forwarded
// otherwise; retries not-leader / no-leader / transfer-in-progress and
// ambiguous outcomes (same request id, so apply de-duplicates) with jitter
// for at most Config.WriteRetry; then waits for the local FSM to apply it.
// The bytes are never re-encoded on the way.
func (n *Node) submitEncoded(ctx context.Context, cmd []byte) (fsm.Result, error) {
	var err error
	ctx, cancel := context.WithTimeout(ctx, n.cfg.WriteRetry)
	defer cancel()
	for attempt := 0; ; attempt++ {
		var res fsm.Result
		if n.raft.State() == raft.Leader {
			res, err = n.submitLocal(ctx, cmd)
		} else {
			res, err = n.forward(ctx, cmd)
		}
		if err == nil {
			// Read-your-writes on the acknowledging node, unless it has a
			// local fault (health.go): a follower on a full disk would
			// hold the acknowledgement for the whole budget, and its
			// reads are marked stale anyway.
			if n.health.reason() == "" {
				if werr := n.waitApplied(ctx, res.Index); werr != nil {
					n.log.Debug("raftnode: committed but not yet applied locally", "index", res.Index, "err", werr)
				}
			}
			return res, nil
		}
		if !retriable(err) || ctx.Err() != nil {
			if ctx.Err() != nil && retriable(err) {
				err = fmt.Errorf("%w: gave up after %d attempts: %w", ErrTimeout, attempt+1, err)
			}
			return res, err
		}
		n.metrics.retries.Add(1)
		backoff := retryBackoff(attempt)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		case <-n.shutdownCh:
			return res, ErrShutdown
		}
	}
}
