package raftnode

import (
	"context"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
)

// SetWrapLogStoreForTest sets the wrapper nodes started afterwards put
// around their bbolt log store (nil: none) and returns a func restoring
// the previous one. Not safe to call while nodes start.
func SetWrapLogStoreForTest(f func(nodeID string, s raft.LogStore) raft.LogStore) (restore func()) {
	old := wrapLogStore
	wrapLogStore = f
	return func() { wrapLogStore = old }
}

// SubmitEncodedForTest runs an already encoded command (command.Marshal
// or command.MarshalIngest output) through n's write path as Ingest does
// after encoding: proposed on the leader,
// forwarded from a follower, retried, acknowledged once applied on n.
// Returns the log index it applied at.
func (n *Node) SubmitEncodedForTest(ctx context.Context, cmd []byte) (uint64, error) {
	r, err := n.submitEncoded(ctx, cmd)
	return r.Index, err
}

// SnapshotThresholdForTest is raft's entry-count snapshot threshold in
// force on n (snapshotbytes.go turns it off for large snapshots).
func (n *Node) SnapshotThresholdForTest() uint64 { return n.raft.ReloadableConfig().SnapshotThreshold }

// ReconcileRoundsForTest is how many reconcile passes n made as leader
// (reconcile.go): a test waits for rounds instead of sleeping.
func (n *Node) ReconcileRoundsForTest() uint64 { return n.reconcileRounds.Load() }

// SetWrapGossipTransportForTest sets the wrapper nodes started afterwards
// put around their memberlist transport (nil: none) and returns a func
// restoring the previous one. Not safe to call while nodes start.
func SetWrapGossipTransportForTest(f func(nodeID string, t memberlist.Transport) memberlist.Transport) (restore func()) {
	old := wrapGossipTransport
	wrapGossipTransport = f
	return func() { wrapGossipTransport = old }
}

// GossipRejoinsForTest is how many gossip re-joins n started.
func (n *Node) GossipRejoinsForTest() uint64 { return n.rejoins.Load() }

// SetExpireClockForTest sets the clock leaders read for expire commands
// and returns a func restoring time.Now. Not safe while nodes run their
// expire loop concurrently with the call.
func SetExpireClockForTest(f func() time.Time) (restore func()) {
	old := expireClock
	expireClock = f
	return func() { expireClock = old }
}

// SetAckClockForTest sets the clock each node puts in its gossip acks and
// returns a func restoring time.Now.
func SetAckClockForTest(f func(nodeID string) time.Time) (restore func()) {
	old := ackClock
	ackClock = f
	return func() { ackClock = old }
}

// RemovalRecordsForTest is the removal records n's FSM holds (contract
// §8.3).
func (n *Node) RemovalRecordsForTest() map[string]string { return n.fsm.Removals() }
