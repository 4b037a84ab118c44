package raftnode

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/raftnode/forwardpb"
)

// forwardServer is the leader side of write forwarding.
type forwardServer struct {
	forwardpb.UnimplementedForwardServer
	n *Node
}

func registerForward(s *grpc.Server, n *Node) {
	forwardpb.RegisterForwardServer(s, &forwardServer{n: n})
}

// Apply proposes the forwarded command locally; it never forwards again
// (a follower that is no longer talking to the leader retries itself).
func (f *forwardServer) Apply(ctx context.Context, req *forwardpb.ApplyRequest) (*forwardpb.ApplyResponse, error) {
	r, err := f.n.submitLocal(ctx, req.GetCommand())
	resp := &forwardpb.ApplyResponse{Code: toCode(err), Index: r.Index, Changed: uint32(r.Changed), Duplicate: r.Duplicate, Policy: policyBytes(r.Policy)}
	if err != nil {
		resp.Message = err.Error()
	}
	return resp, nil
}

// Restore receives a snapshot stream and restores the cluster from it.
func (f *forwardServer) Restore(stream grpc.ClientStreamingServer[forwardpb.RestoreChunk, forwardpb.RestoreResponse]) error {
	pr, pw := io.Pipe()
	go func() {
		for {
			c, err := stream.Recv()
			if err == io.EOF {
				pw.Close()
				return
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := pw.Write(c.GetData()); err != nil {
				return
			}
		}
	}()
	idx, err := f.n.restoreLocal(stream.Context(), pr)
	pr.Close()
	resp := &forwardpb.RestoreResponse{Code: toCode(err), Index: idx}
	if err != nil {
		resp.Message = err.Error()
	}
	return stream.SendAndClose(resp)
}

// forwardLeaderPoll is how often a forwarded write checks whether the
// leader it was sent to is still this node's leader. Well under the LAN
// election timeout, so a write abandons a dead leader about as soon as a new
// one is known.
const forwardLeaderPoll = 50 * time.Millisecond

// leaderClient returns a Forward client for the current leader.
func (n *Node) leaderClient() (forwardpb.ForwardClient, string, error) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return nil, "", ErrNoLeader
	}
	if string(id) == n.cfg.NodeID {
		return nil, "", fmt.Errorf("%w: this node is the leader", ErrNotLeader)
	}
	// Gossip's view first; when gossip cannot see the leader (a
	// gossip-only partition, this node restarted behind one), the address
	// it last advertised, kept in the data directory.
	var addr string
	if m := n.member(string(id)); m != nil {
		addr = m.meta.GRPC
	}
	if addr == "" {
		addr = n.peers.get(string(id))
	}
	if addr == "" {
		return nil, "", fmt.Errorf("%w: leader %s has no known gRPC address yet", ErrNoLeader, id)
	}
	cc, err := n.dial(addr)
	if err != nil {
		return nil, "", err
	}
	return forwardpb.NewForwardClient(cc), addr, nil
}

// forward sends one command to the leader. A transport failure is
// ambiguous (the leader may have committed it) and wraps ErrForward, which
// submit retries with the same request id.
func (n *Node) forward(ctx context.Context, cmd []byte) (r fsm.Result, err error) {
	c, addr, err := n.leaderClient()
	if err != nil {
		return r, err
	}
	n.metrics.forwarded.Add(1)
	// A leader that died without closing its connections (a host or
	// container gone, a partition) leaves the call hanging until the
	// caller's whole retry budget is spent. Abandon the attempt as soon as
	// this node sees a different leader (or none): the retry then goes to
	// the new leader with the same request id, so it cannot apply twice.
	_, leaderID := n.raft.LeaderWithID()
	attempt, cancel := context.WithCancel(ctx)
	defer cancel()
	var moved atomic.Bool
	go func() {
		t := time.NewTicker(forwardLeaderPoll)
		defer t.Stop()
		for {
			select {
			case <-attempt.Done():
				return
			case <-t.C:
				if _, id := n.raft.LeaderWithID(); id != leaderID {
					moved.Store(true)
					cancel()
					return
				}
			}
		}
	}()
	resp, err := c.Apply(attempt, &forwardpb.ApplyRequest{Command: cmd})
	if err != nil {
		if moved.Load() && ctx.Err() == nil {
			return r, fmt.Errorf("%w: leader changed from %s during forward to %s: %v", ErrForward, leaderID, addr, err)
		}
		if ctx.Err() != nil {
			return r, fmt.Errorf("%w: forward to %s: %v", ErrTimeout, addr, err)
		}
		return r, fmt.Errorf("%w: %s: %v", ErrForward, addr, err)
	}
	r.Index, r.Changed, r.Duplicate = resp.GetIndex(), int(resp.GetChanged()), resp.GetDuplicate()
	r.Policy = policyFromBytes(resp.GetPolicy())
	return r, fromCode(resp.GetCode(), resp.GetMessage())
}
