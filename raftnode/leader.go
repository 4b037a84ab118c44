package raftnode

import (
	"context"
	"time"
)

// leaderLoop drains raft's NotifyCh (buffered, so no transition is lost;
// SPEC 13) and runs leader duties only after a Barrier proves every
// earlier entry is applied locally.
func (n *Node) leaderLoop(notify <-chan bool) {
	defer n.wg.Done()
	stop := func() {}
	defer func() { stop() }()
	for {
		select {
		case isLeader := <-notify:
			stop()
			stop = func() {}
			n.leaderReady.Store(false)
			if h := n.cfg.Hooks.OnLeader; h != nil && !isLeader {
				h(false)
			}
			if isLeader {
				ctx, cancel := context.WithCancel(context.Background())
				stop = cancel
				n.wg.Add(1)
				go n.leaderDuties(ctx)
			}
		case <-n.shutdownCh:
			return
		}
	}
}

func (n *Node) leaderDuties(ctx context.Context) {
	defer n.wg.Done()
	start := time.Now()
	for {
		err := n.raft.Barrier(barrierTimeout).Error()
		if err == nil {
			break
		}
		n.log.Warn("raftnode: barrier after election failed", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-n.shutdownCh:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	n.leaderReady.Store(true)
	n.log.Info("raftnode: leader ready", "term", n.raft.CurrentTerm(), "barrier", time.Since(start), "applied_index", n.fsm.AppliedIndex())
	if h := n.cfg.Hooks.OnLeader; h != nil {
		h(true)
	}
	select {
	case n.kick <- struct{}{}:
	default:
	}
	if n.cfg.ExpireInterval < 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(n.cfg.ExpireInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.shutdownCh:
			return
		case <-t.C:
			// The leader's clock goes into the command, so every node
			// expires the same residencies (SPEC 6).
			cmd := expireBytes(n.NewRequestID(), time.Now().UnixMilli())
			c, cancel := context.WithTimeout(ctx, n.cfg.ExpireInterval)
			if _, err := n.submitLocal(c, cmd); err != nil && ctx.Err() == nil {
				n.log.Warn("raftnode: expire command failed", "err", err)
			}
			cancel()
		}
	}
}
