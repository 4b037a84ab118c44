package raftnode_test

import (
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/raftnode"
)

func TestFourthNodeJoinsAsVoter(t *testing.T) {
	c := clustertest.New(t, 3, noExpire)
	c.StartAll()
	c.WaitLeader(15 * time.Second)
	c.WaitVoters(3, 10*time.Second)
	c.AddNode() // same command line: bootstrap_expect=3, join list
	c.Start(3)
	ids := c.WaitVoters(4, 15*time.Second)
	t.Logf("voters %v", ids)
	l := c.WaitLeader(10 * time.Second)
	idx, err := appliedAt(c.Nodes[3].Ingest(c.Ctx(5*time.Second), "", evs("a", 1, 4, time.Now().UnixMilli())))
	if err != nil {
		t.Fatal(err)
	}
	_ = l
	assertSameDigest(t, c, idx)
}

func TestDeadServerCleanup_NeverBelowThreeVoters(t *testing.T) {
	c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		cfg.DeadServerCleanup = 500 * time.Millisecond
	})
	c.StartAll()
	c.WaitLeader(15 * time.Second)
	c.AddNode()
	c.Start(3)
	c.WaitVoters(4, 15*time.Second)
	l := c.WaitLeader(10 * time.Second)
	victims := []int{}
	for _, i := range c.Running() {
		if i != l && len(victims) < 2 {
			victims = append(victims, i)
		}
	}
	c.Kill(victims[0])
	// Gossip must call it dead, then the grace period pass, on a machine
	// that may be running other packages' tests: allow for a slow verdict.
	ids := c.WaitVoters(3, 30*time.Second)
	t.Logf("after one dead: voters %v", ids)
	c.Kill(victims[1]) // 3 voters, 1 dead: cleanup must not remove it
	// Wait for the verdict the cleanup acts on (gossip calls it dead),
	// then for the grace period, then for two reconcile rounds that
	// started after it: each of them had the server dead past its grace.
	dead := c.Nodes[victims[1]].ID
	waitUntil(t, 30*time.Second, "gossip to report "+dead+" dead", func() bool {
		l := c.WaitLeader(10 * time.Second)
		for _, m := range c.Nodes[l].Status().Members {
			if m.ID == dead {
				return !m.Healthy
			}
		}
		return true
	})
	graceOver := time.Now().Add(500 * time.Millisecond)
	waitUntil(t, 5*time.Second, "the cleanup grace period", func() bool { return time.Now().After(graceOver) })
	r0 := reconcileRounds(c)
	waitUntil(t, 30*time.Second, "two reconcile rounds past the grace period", func() bool { return reconcileRounds(c) >= r0+2 })
	l = c.WaitLeader(10 * time.Second)
	n := 0
	for _, m := range c.Nodes[l].Status().Members {
		if m.Suffrage == "Voter" {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("cleanup went below 3 voters: %d", n)
	}
}

func TestCleanupBudget(t *testing.T) {
	for _, tc := range []struct{ voters, dead, want int }{
		{3, 1, 0}, {4, 1, 1}, {4, 2, 1}, {5, 1, 1}, {5, 2, 2}, {5, 3, 2}, {7, 3, 3}, {7, 5, 3}, {2, 1, 0},
	} {
		if got := raftnode.CleanupBudget(tc.voters, tc.dead); got != tc.want {
			t.Errorf("CleanupBudget(%d voters, %d dead) = %d, want %d", tc.voters, tc.dead, got, tc.want)
		}
	}
}
