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

// Followers measure the leader's clock over gossip probes: a leader 10
// minutes ahead shows as an offset of about +10 minutes on each follower,
// and an offset near 0 when the clocks agree. "About" is within
// offsetSlack: a probe's error is half its round trip, which a loaded
// 2-core machine running the race detector stretches to hundreds of
// milliseconds; the 10-minute step is what the test looks for. Leadership
// may move under that load: each poll takes the leader of the moment
// (and gives it the skewed clock).
func TestClockOffset_FollowersMeasureTheLeadersClock(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster through elections, restarts or slow disks: the full tier runs it")
	}
	const offsetSlack = time.Second
	var skewed atomic.Value // node id whose clock is 10 minutes ahead
	skewed.Store("")
	restore := raftnode.SetAckClockForTest(func(id string) time.Time {
		if id == skewed.Load().(string) {
			return time.Now().Add(10 * time.Minute)
		}
		return time.Now()
	})
	t.Cleanup(restore) // after the cluster's own cleanup: its gossip reads the clock
	c := clustertest.New(t, 3, noExpire)
	c.StartAll()
	c.WaitLeader(15 * time.Second)
	near := func(d, want time.Duration) bool { return (d - want).Abs() < offsetSlack }
	// roles is the leader and a follower of the moment (-1 while there
	// is none), the leader holding the skewed clock when skew is set.
	roles := func(skew bool) (int, int) {
		l := c.WaitLeader(15 * time.Second)
		if skew {
			skewed.Store(c.Nodes[l].ID)
		}
		return l, follower(c, l)
	}
	poll.Eventually(t, 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		l, f := roles(false)
		d, ok := c.Nodes[f].ClockOffsetToLeader()
		if _, self := c.Nodes[l].ClockOffsetToLeader(); self {
			return false, "the leader reports an offset to itself"
		}
		return ok && near(d, 0), fmt.Sprintf("offset to the leader %v (measured %v), want near 0", d, ok)
	})
	poll.Eventually(t, 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		_, f := roles(true)
		d, ok := c.Nodes[f].ClockOffsetToLeader()
		return ok && near(d, 10*time.Minute), fmt.Sprintf("offset to the leader %v (measured %v), want the leader's 10-minute lead", d, ok)
	})
	// The per-lookup copy follows at the next probe, and the read state
	// lookups take carries it (less the follower's own correction: none,
	// its clock agrees with the third node's); the leader's carries none.
	poll.Eventually(t, 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		l, f := roles(true)
		d, ok := c.Nodes[f].LeaderOffsetCached()
		if !ok || !near(d, 10*time.Minute) {
			return false, fmt.Sprintf("cached offset %v (cached %v), want it to follow to 10 minutes", d, ok)
		}
		if _, self := c.Nodes[l].LeaderOffsetCached(); self {
			return false, "the leader caches an offset to itself"
		}
		if rs := c.Nodes[f].ReadState().ClockOffsetToLeader; !near(rs, 10*time.Minute) {
			return false, fmt.Sprintf("ReadState.ClockOffsetToLeader %v, want about 10 min", rs)
		}
		if rs := c.Nodes[l].ReadState().ClockOffsetToLeader; rs != 0 {
			return false, fmt.Sprintf("the leader's read state has an offset to itself: %v", rs)
		}
		return true, ""
	})
}

// A node whose own clock is 10 minutes ahead corrects toward the other
// two (whose clocks agree): its Now is the cluster's time, the others
// apply no correction.
func TestClockCorrection_TheOddClockOutIsCorrected(t *testing.T) {
	c := clustertest.New(t, 3, func(i int, cfg *raftnode.Config) {
		noExpire(i, cfg)
		if i == 0 {
			cfg.Clock = func() time.Time { return time.Now().Add(10 * time.Minute) }
		}
	})
	c.StartAll()
	c.WaitLeader(15 * time.Second)
	poll.Eventually(t, 20*time.Second, 20*time.Millisecond, func() (bool, string) {
		d := c.Nodes[0].ClockCorrection()
		return (d + 10*time.Minute).Abs() < 200*time.Millisecond, fmt.Sprintf("n1 corrects by %v, want about -10 min", d)
	})
	if !c.Nodes[0].ClockTrusted() {
		t.Fatal("n1 computed a cluster median yet reports its clock unchecked")
	}
	if d := time.Until(c.Nodes[0].Now()).Abs(); d > 200*time.Millisecond {
		t.Fatalf("n1's corrected clock is %v off the real time", d)
	}
	for i := 1; i < 3; i++ {
		if d := c.Nodes[i].ClockCorrection(); d != 0 {
			t.Fatalf("node %d with a right clock corrects by %v", i, d)
		}
	}
}
