package raftnode

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/fsm"
)

// The write path: caller → submit (retry loop) → leader: proposeCh →
// batcher (group commit into one log entry) → raft.Apply → committer
// (waits for the future, hands each caller its fsm.Result);
// follower: forward RPC to the leader's submitLocal.

type proposal struct {
	cmd   []byte // one encoded command (command.Marshal, command.MarshalIngest)
	start time.Time
	done  chan outcome // buffered 1
}

type outcome struct {
	res fsm.Result
	err error
}

type inflightEntry struct {
	fut   raft.ApplyFuture
	props []*proposal
}

// batcher coalesces queued proposals into log entries (leader side).
func (n *Node) batcher() {
	defer n.wg.Done()
	var batch []*proposal
	buf := make([]byte, 0, 64<<10)
	for {
		var first *proposal
		select {
		case first = <-n.proposeCh:
		case <-n.shutdownCh:
			return
		}
		batch = append(batch[:0], first)
		size := len(first.cmd)
		lingered := false
		limit := min(n.cfg.GroupCommitMaxBytes, entryTargetBytes)
	collect:
		for size < limit {
			select {
			case p := <-n.proposeCh:
				batch = append(batch, p)
				size += len(p.cmd) + 8
				continue
			default:
			}
			// Linger only while an earlier entry is still committing:
			// then waiting costs no latency, and it grows the batch.
			if lingered || n.cfg.GroupCommitLinger < 0 || len(n.inflight) == 0 {
				break collect
			}
			lingered = true
			t := time.NewTimer(n.cfg.GroupCommitLinger)
			select {
			case p := <-n.proposeCh:
				batch = append(batch, p)
				size += len(p.cmd) + 8
				lingered = false
			case <-t.C:
			case <-n.shutdownCh:
			}
			t.Stop()
		}
		buf = command.NewEntry(buf)
		for _, p := range batch {
			buf = command.AppendCommand(buf, p.cmd)
		}
		entry := command.SealEntry(make([]byte, 0, len(buf)+9), buf) // a new slice: raft keeps it
		props := slices.Clone(batch)
		n.metrics.entries.Add(1)
		n.metrics.entryCommands.Add(uint64(len(props)))
		fut := n.raft.Apply(entry, applyEnqueueTimeout)
		select {
		case n.inflight <- &inflightEntry{fut: fut, props: props}:
		case <-n.shutdownCh:
			for _, p := range props {
				p.done <- outcome{err: ErrShutdown}
			}
			return
		}
	}
}

// committer waits for entries in commit order and answers their callers.
func (n *Node) committer() {
	defer n.wg.Done()
	for {
		var e *inflightEntry
		select {
		case e = <-n.inflight:
		case <-n.shutdownCh:
			// drain what is left so no caller hangs
			for {
				select {
				case e = <-n.inflight:
					for _, p := range e.props {
						p.done <- outcome{err: ErrShutdown}
					}
				default:
					return
				}
			}
		}
		err := translateApply(e.fut.Error(), n.log)
		var er *fsm.EntryResult
		if err == nil {
			er, _ = e.fut.Response().(*fsm.EntryResult)
			if er == nil || len(er.Results) != len(e.props) {
				err = fmt.Errorf("raftnode: internal: apply returned %T for %d commands", e.fut.Response(), len(e.props))
			}
		}
		now := time.Now()
		for i, p := range e.props {
			if err != nil {
				p.done <- outcome{err: err}
				continue
			}
			r := er.Results[i]
			var rerr error
			if r.Err != nil {
				rerr = translate(r.Err)
			}
			d := now.Sub(p.start)
			n.metrics.commits.Add(1)
			n.metrics.commitNanos.Add(uint64(d))
			if h := n.cfg.Hooks.OnCommit; h != nil {
				h(d, len(e.props))
			}
			p.done <- outcome{res: r, err: rerr}
		}
	}
}

// submitLocal proposes one encoded command on this node (which must be the
// leader) and waits for its outcome. No retries. It serves local writes
// and forwarded ones alike: the bytes go into the entry as they came.
func (n *Node) submitLocal(ctx context.Context, cmd []byte) (fsm.Result, error) {
	if n.raft.State() != raft.Leader {
		return fsm.Result{}, n.notLeaderErr()
	}
	if len(cmd) > n.cfg.GroupCommitMaxBytes {
		return fsm.Result{}, fmt.Errorf("%w: command of %d bytes exceeds the %d byte entry limit", ErrInvalid, len(cmd), n.cfg.GroupCommitMaxBytes)
	}
	p := &proposal{cmd: cmd, start: time.Now(), done: make(chan outcome, 1)}
	select {
	case n.proposeCh <- p:
	case <-ctx.Done():
		return fsm.Result{}, fmt.Errorf("%w: queueing write: %v", ErrTimeout, ctx.Err())
	case <-n.shutdownCh:
		return fsm.Result{}, ErrShutdown
	}
	select {
	case o := <-p.done:
		return o.res, o.err
	case <-ctx.Done():
		// queued or in flight: outcome unknown
		return fsm.Result{}, fmt.Errorf("%w: %w: %v", ErrLeadershipLost, ErrTimeout, ctx.Err())
	case <-n.shutdownCh:
		return fsm.Result{}, ErrShutdown
	}
}
