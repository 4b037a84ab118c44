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
// it failing; on a follower, for the leader, no contact for longer than
// twice the heartbeat timeout.
func (n *Node) raftContactProblem(id string) string {
	if n.raft.State() == raft.Leader {
		n.contact.mu.Lock()
		since, failing := n.contact.failing[id]
		n.contact.mu.Unlock()
		if failing {
			return fmt.Sprintf("the leader's Raft heartbeats to it fail (last contact %s ago)", time.Since(since).Round(100*time.Millisecond))
		}
		return ""
	}
	if _, leader := n.raft.LeaderWithID(); string(leader) == id {
		if lc := n.raft.LastContact(); !lc.IsZero() && time.Since(lc) > 2*n.cfg.Timing.HeartbeatTimeout {
			return fmt.Sprintf("no Raft contact from it for %s", time.Since(lc).Round(100*time.Millisecond))
		}
	}
	return ""
}
