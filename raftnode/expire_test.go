package raftnode_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/raftnode"
)

// The leader's periodic expire command (Config.ExpireInterval) drops
// residencies past the policy's EvictionTTL on every node, with nothing
// but the ticker writing: after the TTL every node holds 0 residencies
// and all digests are equal at equal applied index.
func TestExpireTicker_DropsExpiredResidenciesOnEveryNode(t *testing.T) {
	c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) { cfg.ExpireInterval = 100 * time.Millisecond })
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	p := c.Nodes[l].Policy()
	p.EvictionTTL = time.Second // the policy's smallest TTL
	if _, err := c.Nodes[l].SetPolicy(c.Ctx(5*time.Second), p); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	idx, err := appliedAt(c.Nodes[follower(c, l)].Ingest(c.Ctx(5*time.Second), "", evs("a", 1, 8, written.UnixMilli())))
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(idx, 10*time.Second)
	for _, i := range c.Running() {
		if sz := c.Nodes[i].Index().Sizes(); sz.Residencies != 16 && time.Since(written) < p.EvictionTTL {
			t.Fatalf("%s holds %d residencies right after the write, want 16", c.Nodes[i].ID, sz.Residencies)
		}
	}
	poll.Eventually(t, 15*time.Second, 10*time.Millisecond, func() (bool, string) {
		for _, i := range c.Running() {
			if sz := c.Nodes[i].Index().Sizes(); sz.Residencies != 0 {
				return false, fmt.Sprintf("%s still holds %+v %v after the write with a %v TTL", c.Nodes[i].ID, sz, time.Since(written), p.EvictionTTL)
			}
		}
		return true, ""
	})
	if took := time.Since(written); took < p.EvictionTTL {
		t.Fatalf("residencies gone after %v, before the %v TTL", took, p.EvictionTTL)
	}
	at, _ := c.WaitConverged(10*time.Second, nil)
	if at <= idx {
		t.Fatalf("applied index %d, not past the write's %d: no expire command was committed", at, idx)
	}
	for _, i := range c.Running() {
		if sz := c.Nodes[i].Index().Sizes(); sz.Residencies != 0 || sz.Blocks != 0 {
			t.Fatalf("%s holds %+v after expiry, want no residencies and no blocks", c.Nodes[i].ID, sz)
		}
	}
}

// A leader whose clock runs 11 minutes ahead (past the 10-minute TTL)
// must not expire what was just reported: its expire commands carry at
// most the newest observation plus ExpireClockMargin, every node keeps
// every residency, digests stay equal, and the clamp is counted.
func TestExpireTicker_LeaderClockAheadDoesNotWipeTheIndex(t *testing.T) {
	var skew atomic.Int64
	restore := raftnode.SetExpireClockForTest(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	t.Cleanup(restore) // after the cluster's own cleanup: its leader reads the clock
	c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) { cfg.ExpireInterval = 100 * time.Millisecond })
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	ttl := c.Nodes[l].Policy().EvictionTTL
	written := time.Now().UnixMilli()
	idx, err := appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("a", 1, 8, written)))
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(idx, 10*time.Second)
	skew.Store(int64(ttl + time.Minute))
	// Three clamped expire commands committed by the leader.
	poll.Eventually(t, 15*time.Second, 20*time.Millisecond, func() (bool, string) {
		n := c.Nodes[l].Metrics().ExpireClamped
		return n >= 3, fmt.Sprintf("%d clamped expire commands, want 3", n)
	})
	at, _ := c.WaitConverged(10*time.Second, nil)
	if at <= idx {
		t.Fatalf("applied index %d, not past the write's %d: no expire command was committed", at, idx)
	}
	for _, i := range c.Running() {
		if sz := c.Nodes[i].Index().Sizes(); sz.Residencies != 16 {
			t.Fatalf("%s holds %d residencies after expire commands from a leader %v ahead, want 16", c.Nodes[i].ID, sz.Residencies, ttl+time.Minute)
		}
	}
}
