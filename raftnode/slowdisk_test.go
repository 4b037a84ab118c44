package raftnode_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// slowStore delays every append by *delay (a disk that stalls).
type slowStore struct {
	raft.LogStore
	delay *atomic.Int64
}

func (s slowStore) StoreLog(l *raft.Log) error {
	time.Sleep(time.Duration(s.delay.Load()))
	return s.LogStore.StoreLog(l)
}

func (s slowStore) StoreLogs(ls []*raft.Log) error {
	time.Sleep(time.Duration(s.delay.Load()))
	return s.LogStore.StoreLogs(ls)
}

// TestSlowDisk_FollowerBehindReadsStale: a follower whose log appends
// stall falls behind while the leader and the other follower commit. Its
// heartbeats still arrive and raft caps its own commit index at its last
// log entry, so only the leader's commit index (read off AppendEntries)
// shows the lag: its reads must be marked stale and it must stop Serving
// while it is behind for longer than maxStaleness, and recover after.
func TestSlowDisk_FollowerBehindReadsStale(t *testing.T) {
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
	waitFor(t, "follower fresh and serving", 10*time.Second, func() bool { return nf.Serving() && !nf.ReadState().Stale })

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
			time.Sleep(20 * time.Millisecond)
		}
	}()
	waitFor(t, "stalled follower stale (apply lag) with fresh leader contact", 10*time.Second, func() bool {
		rs := nf.ReadState()
		return rs.Stale && rs.StaleReason == raftnode.StaleApplyLag && rs.LastLeaderContact < time.Second && !nf.Serving()
	})
	close(stop)
	<-done
	delay[f].Store(0)
	waitFor(t, "follower caught up, fresh and serving", 30*time.Second, func() bool {
		return !nf.ReadState().Stale && nf.Serving()
	})
	idx, err := appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("c", 9000, 4, now)))
	if err != nil {
		t.Fatal(err)
	}
	assertSameDigest(t, c, idx)
}
