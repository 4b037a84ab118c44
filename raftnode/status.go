package raftnode

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/command"
)

// What a node reports about itself: how fresh its reads are (ReadState,
// per lookup) and its view of the cluster (Status, for operators).

// ReadState says how fresh this node's local reads are (contract §5.8, §8.4).
type ReadState struct {
	// NodeID is this node.
	NodeID string
	// AppliedIndex is the last log index the FSM applied.
	AppliedIndex uint64
	// LastLeaderContact is the time since this node last heard from a
	// leader (0 on the leader; since start when never).
	LastLeaderContact time.Duration
	// Stale: this node's answers may be out of date: never heard from a
	// leader since start, or longer ago than the policy's MaxStaleness; a
	// leader that has not finished its Barrier; or a local fault: appends
	// to its log failing, replaying the log found at start, or committed
	// entries unapplied for longer than MaxStaleness (health.go; the node
	// is then not Serving).
	Stale bool
	// StaleReason says why Stale is set (one of the Stale* constants; ""
	// when not stale). A local fault takes precedence.
	StaleReason string
	// Leader: this node is the leader.
	Leader bool
	// NewestObservedMs is the newest observation time (unix ms) the local
	// index holds (index.Index.NewestObservedMs; 0 = none): the API
	// bounds a lookup's clock by it.
	NewestObservedMs int64
	// ClockOffsetToLeader is the leader's clock minus this node's
	// corrected clock (Now): LeaderOffsetCached less ClockCorrection, as
	// of the last gossip probe; 0 on the leader and before the first
	// probe of the leader answered. Positive: this node is behind.
	// Lookups rank with Now, so this is how far their freshness is off.
	ClockOffsetToLeader time.Duration
}

// ReadState returns the current read freshness. Cheap (atomic loads and
// raft's state reads, no lock of the index); call per lookup.
func (n *Node) ReadState() ReadState {
	rs := ReadState{NodeID: n.cfg.NodeID, AppliedIndex: n.fsm.AppliedIndex(), NewestObservedMs: n.fsm.Index().NewestObservedMs()}
	if off, ok := n.LeaderOffsetCached(); ok {
		rs.ClockOffsetToLeader = off - n.ClockCorrection()
	}
	if n.raft.State() == raft.Leader {
		rs.Leader = true
		if !n.leaderReady.Load() {
			rs.StaleReason = StaleLeaderBarrier
		}
	} else if lc := n.raft.LastContact(); lc.IsZero() {
		rs.LastLeaderContact = time.Since(n.started)
		rs.StaleReason = StaleNoLeaderYet
	} else {
		rs.LastLeaderContact = time.Since(lc)
		if rs.LastLeaderContact > n.fsm.Index().Policy().MaxStaleness {
			rs.StaleReason = StaleNoLeader
		}
	}
	if r := n.health.reason(); r != "" {
		rs.StaleReason = r
	}
	rs.Stale = rs.StaleReason != ""
	return rs
}

// Member is one server as seen by Raft and gossip.
type Member struct {
	ID       string
	RaftAddr string
	GRPCAddr string
	// Suffrage is "Voter", "Nonvoter", "Staging" or "" (gossip only, not in
	// the Raft configuration).
	Suffrage string
	// Healthy: gossip reports the member alive, its log appends succeed
	// (advertised over gossip) and Raft reaches it as far as this node
	// can tell (health.go, raftContact); UnhealthyReason says which failed.
	Healthy         bool
	UnhealthyReason string
}

// Status is the node's view of the cluster (contract §8.10 admin status).
type Status struct {
	NodeID string
	// State is "Leader", "Follower", "Candidate" or "Shutdown".
	State         string
	LeaderID      string
	LeaderAddress string // the leader's gRPC address ("" if unknown)
	LeaderRaft    string // the leader's Raft address
	Term          uint64
	AppliedIndex  uint64 // FSM applied index
	CommitIndex   uint64
	LastLogIndex  uint64
	// LastLeaderContact: 0 on the leader.
	LastLeaderContact time.Duration
	Members           []Member
	// WriteFormat is the log entry format this node writes
	// (command.EntryFormat, the only one): exported as a metric so that a
	// dashboard can tell this release's nodes apart.
	WriteFormat uint32
}

// Status returns the node's current view. Members are sorted by id.
func (n *Node) Status() Status {
	rs := n.ReadState()
	laddr, lid := n.raft.LeaderWithID()
	st := Status{
		NodeID:            n.cfg.NodeID,
		State:             n.raft.State().String(),
		LeaderID:          string(lid),
		LeaderRaft:        string(laddr),
		Term:              n.raft.CurrentTerm(),
		AppliedIndex:      rs.AppliedIndex,
		CommitIndex:       n.raft.CommitIndex(),
		LastLogIndex:      n.raft.LastIndex(),
		LastLeaderContact: rs.LastLeaderContact,
	}
	if m := n.member(string(lid)); m != nil {
		st.LeaderAddress = m.meta.GRPC
	}
	st.Members = n.memberList()
	st.WriteFormat = command.EntryFormat
	return st
}

// Digest returns the FSM's applied index and the 64-bit index digest as a
// consistent pair; equal on every node at an equal applied index.
func (n *Node) Digest() (appliedIndex, digest uint64) { return n.fsm.Digest() }
