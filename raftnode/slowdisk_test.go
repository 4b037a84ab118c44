package raftnode_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// slowStore delays every append by *delay (a disk that stalls).
type slowStore struct {
	raft.LogStore
	delay *atomic.Int64
}

func (s slowStore) StoreLog(l *raft.Log) error {
	time.Sleep(time.Duration(s.delay.Load())) // the fault under test: a stalled disk
	return s.LogStore.StoreLog(l)
}

func (s slowStore) StoreLogs(ls []*raft.Log) error {
	time.Sleep(time.Duration(s.delay.Load())) // the fault under test: a stalled disk
	return s.LogStore.StoreLogs(ls)
}

// TestSlowDisk_FollowerBehindReadsStale: a follower whose log appends
// stall falls behind while the leader and the other follower commit. Its
// heartbeats still arrive and raft caps its own commit index at its last
// log entry, so only the leader's commit index (read off AppendEntries)
// shows the lag: its reads must be marked stale and it must stop Serving
// while it is behind for longer than maxStaleness, and recover after.
func TestSlowDisk_FollowerBehindReadsStale(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster through elections, restarts or slow disks: the full tier runs it")
	}
	var delay [3]atomic.Int64
	defer wrapStores(func(i int, s raft.LogStore) raft.LogStore { return slowStore{s, &delay[i]} })()
	c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		p := policy.Default()
		p.MaxStaleness = 300 * time.Millisecond
		cfg.Policy = p
	})
	l, f, now := startWithOneWrite(t, c)
	nf := c.Nodes[f]
	poll.Eventually(t, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		rs := nf.ReadState()
		return nf.Serving() && !rs.Stale, fmt.Sprintf("before the stall, follower serving %v, read state %+v; want fresh and serving", nf.Serving(), rs)
	})

	delay[f].Store(int64(1500 * time.Millisecond))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // writes keep committing on the leader and the other follower
		defer close(done)
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("b", uint64(1000+10*k), 4, now)); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(20 * time.Millisecond) // paces the write load; nothing is asserted after it
		}
	}()
	poll.Eventually(t, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		rs := nf.ReadState()
		return rs.Stale && rs.StaleReason == raftnode.StaleApplyLag && rs.LastLeaderContact < time.Second && !nf.Serving(),
			fmt.Sprintf("stalled follower serving %v, read state %+v; want stale (%q) with leader contact under 1s, not serving", nf.Serving(), rs, raftnode.StaleApplyLag)
	})
	close(stop)
	<-done
	delay[f].Store(0)
	poll.Eventually(t, 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		rs := nf.ReadState()
		return !rs.Stale && nf.Serving(), fmt.Sprintf("after the stall, follower serving %v, read state %+v; want fresh and serving", nf.Serving(), rs)
	})
	idx, err := appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("c", 9000, 4, now)))
	if err != nil {
		t.Fatal(err)
	}
	assertSameDigest(t, c, idx)
}
