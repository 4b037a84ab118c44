package raftnode_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/raftnode"
)

// queueOf returns the queue node nd's hint for replica carries in a lookup
// of the chain base..base+7, and whether the replica was hinted at all.
func queueOf(nd *clustertest.Node, replica string, base uint64) (waiting, running uint32, ok bool) {
	res := lookup(nd, base, 8, time.Now().UnixMilli())
	for _, h := range res.Hints {
		if h.ReplicaID == replica {
			return h.WaitingRequests, h.RunningRequests, true
		}
	}
	return 0, 0, false
}

// The engine's queue in ReplicaStats is replicated through the log to
// every node's hints (reported via a follower, so forwarded too), and a
// node restarted after its log was compacted past the stats entry gets it
// back from its snapshot.
func TestReportStats_QueueReplicatedAndRestoredFromSnapshot(t *testing.T) {
	var restores [3]atomic.Int64
	c := clustertest.New(t, 3, func(i int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		cfg.SnapshotThreshold = 16
		cfg.TrailingLogs = 4
		cfg.Hooks.OnRestore = func(int64, time.Duration, error) { restores[i].Add(1) }
	})
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	f := follower(c, l)
	now := time.Now().UnixMilli()
	if _, err := c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("replica-a", 100, 8, now)); err != nil {
		t.Fatal(err)
	}
	idx, err := appliedAt(c.Nodes[f].ReportStats(c.Ctx(5*time.Second), "stats-1", []index.ReplicaStats{{
		ReplicaID: "replica-a", ModelID: part.Model, HashSchemes: []string{part.Scheme}, Pressure: 0.25,
		ObservedAtMs: now, WaitingRequests: 13, RunningRequests: 8,
	}}))
	if err != nil {
		t.Fatal(err)
	}
	assertSameDigest(t, c, idx)
	for _, i := range c.Running() {
		if w, r, ok := queueOf(c.Nodes[i], "replica-a", 100); !ok || w != 13 || r != 8 {
			t.Fatalf("%s: replica-a queue %d/%d (hinted %t), want 13/8", c.Nodes[i].ID, w, r, ok)
		}
	}

	// Push the stats entry out of the log: later writes, a snapshot on
	// every node, then a restart of the follower.
	for k := 0; k < 24; k++ {
		if idx, err = appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("b", uint64(1000+k*100), 4, now))); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitApplied(idx, 10*time.Second)
	for _, i := range c.Running() {
		if _, _, err := c.Nodes[i].Snapshot(c.Ctx(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	want := assertSameDigest(t, c, idx)
	before := restores[f].Load()
	c.Stop(f)
	c.Start(f)
	if restores[f].Load() == before {
		t.Fatal("the restarted node did not restore a snapshot")
	}
	c.WaitApplied(idx, 10*time.Second)
	if _, d := c.Nodes[f].Digest(); d != want {
		t.Fatalf("digest after restart %x, want %x", d, want)
	}
	if w, r, ok := queueOf(c.Nodes[f], "replica-a", 100); !ok || w != 13 || r != 8 {
		t.Fatalf("after restart from snapshot: replica-a queue %d/%d (hinted %t), want 13/8", w, r, ok)
	}
}
