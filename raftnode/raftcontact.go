package raftnode

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Raft contact for Status health: gossip alone says a member's process
// answers UDP probes, not that Raft reaches it. The leader watches its
// heartbeats to each follower (raft's FailedHeartbeat/ResumedHeartbeat
// observations); a follower knows its own contact with the leader.

// raftContact tracks the followers whose heartbeats fail, on the leader.
type raftContact struct {
	mu      sync.Mutex
	failing map[string]time.Time // follower id → first failed heartbeat
}

// watchRaftContact registers the heartbeat observer; it runs until
// shutdown.
func (n *Node) watchRaftContact() {
	ch := make(chan raft.Observation, 64)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	n.raft.RegisterObserver(obs)
	n.contact.failing = map[string]time.Time{}
	go func() {
		defer n.wg.Done()
		defer n.raft.DeregisterObserver(obs)
		for {
			select {
			case <-n.shutdownCh:
				return
			case o := <-ch:
				n.contact.mu.Lock()
				switch d := o.Data.(type) {
				case raft.FailedHeartbeatObservation:
					if _, ok := n.contact.failing[string(d.PeerID)]; !ok {
						n.contact.failing[string(d.PeerID)] = d.LastContact
					}
				case raft.ResumedHeartbeatObservation:
					delete(n.contact.failing, string(d.PeerID))
				}
				n.contact.mu.Unlock()
			}
		}
	}()
}

// raftContactProblem says why Raft does not reach member id as far as
// this node can tell ("" = fine or unknown): on the leader, heartbeats to
// it failing, or none answered for longer than contactBound; on a
// follower, for the leader, no contact for longer than contactBound.
func (n *Node) raftContactProblem(id string) string {
	if n.raft.State() == raft.Leader {
		n.contact.mu.Lock()
		since, failing := n.contact.failing[id]
		n.contact.mu.Unlock()
		if failing {
			return fmt.Sprintf("the leader's Raft heartbeats to it fail (last contact %s ago)", time.Since(since).Round(100*time.Millisecond))
		}
		if id != n.cfg.NodeID && n.watch != nil {
			if t, ok := n.watch.lastAnswer(id); ok && time.Since(t) > n.contactBound() {
				return fmt.Sprintf("it has answered no Raft heartbeat for %s", time.Since(t).Round(100*time.Millisecond))
			}
		}
		return ""
	}
	if _, leader := n.raft.LeaderWithID(); string(leader) == id {
		if lc := n.raft.LastContact(); !lc.IsZero() && time.Since(lc) > n.contactBound() {
			return fmt.Sprintf("no Raft contact from it for %s", time.Since(lc).Round(100*time.Millisecond))
		}
	}
	return ""
}

// contactBound is how long Raft may go without contact before Status
// calls a member unhealthy: twice the heartbeat timeout, at least 1 s (a
// GC pause or a busy core must not flip health on loopback timings).
func (n *Node) contactBound() time.Duration {
	return max(2*n.cfg.Timing.HeartbeatTimeout, time.Second)
}
