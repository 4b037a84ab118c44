package raftnode_test

import (
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/raftnode"
)

var part = index.Partition{Scheme: "vllm", Model: "m", Tenant: "t"}

func evs(replica string, base uint64, n int, at int64) []index.BlockEvent {
	hs := make([]uint64, n)
	tc := make([]uint32, n)
	for i := range hs {
		hs[i] = base + uint64(i)
		tc[i] = 16
	}
	bg := make([]uint64, n)
	for i := range bg {
		bg[i] = base + 1<<40 + uint64(i)
	}
	// a second replica on a disjoint chain, so the serving set has more
	// than one replica and a match has distinguishing power (contract §5.4)
	return []index.BlockEvent{
		{Kind: index.Stored, ReplicaID: replica, Partition: part, BlockHashes: hs, BlockTokenCounts: tc, ObservedAtMs: at},
		{Kind: index.Stored, ReplicaID: "bg-" + replica, Partition: part, BlockHashes: bg, BlockTokenCounts: tc, ObservedAtMs: at},
	}
}

// lookup asks node nd for the chain base..base+n-1 and returns the hints.
func lookup(nd *clustertest.Node, base uint64, n int, now int64) index.Result {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = base + uint64(i)
	}
	var res index.Result
	nd.Lookup(&index.LookupRequest{Partition: part, BlockHashes: hs, NowMs: now}, &res)
	return res
}

// appliedAt is the log index of a write's result, for tests that need
// only the index.
func appliedAt(r raftnode.WriteResult, err error) (uint64, error) { return r.Index, err }

// reconcileRounds sums the reconcile passes of the running nodes: only a
// leader reconciles, so the sum grows across a change of leader.
func reconcileRounds(c *clustertest.Cluster) uint64 {
	var n uint64
	for _, i := range c.Running() {
		n += c.Nodes[i].ReconcileRoundsForTest()
	}
	return n
}

// threeVoters starts a 3-node cluster and waits until it has a leader l
// and three voters; f is a follower.
func threeVoters(t *testing.T) (c *clustertest.Cluster, l, f int) {
	t.Helper()
	c = clustertest.New(t, 3, noExpire)
	c.StartAll()
	l = c.WaitLeader(15 * time.Second)
	c.WaitVoters(3, 10*time.Second)
	return c, l, follower(c, l)
}

func follower(c *clustertest.Cluster, leader int) int {
	for _, i := range c.Running() {
		if i != leader {
			return i
		}
	}
	return -1
}
