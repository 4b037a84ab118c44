package raftnode_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/fsm"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/raftnode"
	"github.com/inference-cache/inference-cache/snapshot"
)

func noExpire(_ int, cfg *raftnode.Config) { cfg.ExpireInterval = -1 }

// assertSameDigest waits for every running node to reach idx, then for
// them to stand at one applied index (entries the cluster appends itself,
// such as a new leader's no-op, may still be in flight past idx), and
// compares their digests there.
func assertSameDigest(t *testing.T, c *clustertest.Cluster, idx uint64) uint64 {
	t.Helper()
	c.WaitApplied(idx, 10*time.Second)
	var want uint64
	var firstID string
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		var wantIdx uint64
		for k, i := range c.Running() {
			ai, d := c.Nodes[i].Digest()
			if k == 0 {
				want, wantIdx, firstID = d, ai, c.Nodes[i].ID
				continue
			}
			if ai != wantIdx {
				return false, fmt.Sprintf("applied index differs: %s at %d, %s at %d (writes still flowing?)", c.Nodes[i].ID, ai, firstID, wantIdx)
			}
			if d != want {
				t.Fatalf("%s digest %x at %d, %s has %x", c.Nodes[i].ID, d, ai, firstID, want)
			}
		}
		return true, ""
	})
	return want
}

func TestBootstrap_EveryStartOrderFormsOneCluster(t *testing.T) {
	orders := [][]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}, {1, 0, 2}, {2, 1, 0}}
	if testing.Short() {
		orders = orders[:3] // each node starting first; the full tier runs all six orders
	}
	for _, order := range orders {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			c := clustertest.New(t, 3, noExpire)
			for _, i := range order {
				c.Start(i)
				time.Sleep(150 * time.Millisecond) // the start order under test, spread out as an operator's would be
			}
			l := c.WaitLeader(15 * time.Second)
			c.WaitVoters(3, 10*time.Second)
			terms := map[uint64]bool{}
			for _, i := range c.Running() {
				st := c.Nodes[i].Status()
				if st.LeaderID != c.Nodes[l].ID {
					t.Fatalf("%s follows %q, leader is %s", st.NodeID, st.LeaderID, c.Nodes[l].ID)
				}
				voters := 0
				for _, m := range st.Members {
					if m.Suffrage == "Voter" {
						voters++
					}
				}
				if voters != 3 {
					t.Fatalf("%s sees %d voters: %+v", st.NodeID, voters, st.Members)
				}
				terms[st.Term] = true
			}
			idx, err := appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("a", 1, 4, time.Now().UnixMilli())))
			if err != nil {
				t.Fatal(err)
			}
			assertSameDigest(t, c, idx)
		})
	}
}

func TestIngest_ViaFollowerAckedAfterCommitVisibleEverywhere(t *testing.T) {
	c := clustertest.New(t, 3, noExpire)
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	f := follower(c, l)
	now := time.Now().UnixMilli()
	idx, err := appliedAt(c.Nodes[f].Ingest(c.Ctx(5*time.Second), "req-1", evs("replica-a", 100, 8, now)))
	if err != nil {
		t.Fatal(err)
	}
	// acknowledged: already applied on the node that answered
	if got := c.Nodes[f].ReadState().AppliedIndex; got < idx {
		t.Fatalf("follower acked index %d but applied only %d", idx, got)
	}
	if res := lookup(c.Nodes[f], 100, 8, now); res.Reason != index.PrefixMatch || res.Hints[0].ReplicaID != "replica-a" {
		t.Fatalf("follower lookup right after ack: %+v", res)
	}
	assertSameDigest(t, c, idx)
	for _, i := range c.Running() {
		if res := lookup(c.Nodes[i], 100, 8, now); res.Reason != index.PrefixMatch {
			t.Fatalf("%s: %+v", c.Nodes[i].ID, res)
		}
		if rs := c.Nodes[i].ReadState(); rs.Stale {
			t.Fatalf("%s stale: %+v", c.Nodes[i].ID, rs)
		}
	}
}

func TestIngest_RetriedRequestIDAppliesOnce(t *testing.T) {
	c := clustertest.New(t, 3, noExpire)
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	f := follower(c, l)
	now := time.Now().UnixMilli()
	i1, err := appliedAt(c.Nodes[f].Ingest(c.Ctx(5*time.Second), "dup", evs("a", 1, 4, now)))
	if err != nil {
		t.Fatal(err)
	}
	_, d1 := c.Nodes[l].Digest()
	// the retry, through another node, is acknowledged at the original
	// index and does not apply again
	w2, err := c.Nodes[l].Ingest(c.Ctx(5*time.Second), "dup", evs("a", 1, 4, now))
	if err != nil {
		t.Fatal(err)
	}
	if w2.Index != i1 || !w2.Duplicate {
		t.Fatalf("retry reported %+v, original index %d", w2, i1)
	}
	// the id reused for other content is refused and applies nothing, on
	// the leader (the FSM's sentinel in the chain) and through a follower
	// (the leader's text), saying "rejected" once
	_, err = c.Nodes[l].Ingest(c.Ctx(5*time.Second), "dup", evs("b", 1, 4, now))
	if !errors.Is(err, raftnode.ErrRejected) || !errors.Is(err, fsm.ErrRequestIDReused) || strings.Count(err.Error(), "rejected") != 1 {
		t.Fatalf("reused id on the leader: %v; want ErrRejected and fsm.ErrRequestIDReused, 'rejected' said once", err)
	}
	_, err = c.Nodes[f].Ingest(c.Ctx(5*time.Second), "dup", evs("c", 1, 4, now))
	if !errors.Is(err, raftnode.ErrRejected) || !strings.Contains(err.Error(), fsm.ErrRequestIDReused.Error()) || strings.Count(err.Error(), "rejected") != 1 {
		t.Fatalf("reused id through a follower: %v; want ErrRejected naming the reuse, 'rejected' said once", err)
	}
	ai, d2 := c.Nodes[l].Digest()
	if d1 != d2 {
		t.Fatal("retried request id changed the state")
	}
	assertSameDigest(t, c, ai)
}

// Group commit: many concurrent callers share log entries.
func TestIngest_ConcurrentCallsAreGroupCommitted(t *testing.T) {
	c := clustertest.New(t, 3, noExpire)
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	var wg sync.WaitGroup
	var maxIdx atomic.Uint64
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 20; k++ {
				idx, err := appliedAt(c.Nodes[l].Ingest(c.Ctx(10*time.Second), "", evs(fmt.Sprint("r", g), uint64(g*1000+k*10), 4, time.Now().UnixMilli())))
				if err != nil {
					t.Error(err)
					return
				}
				for {
					m := maxIdx.Load()
					if idx <= m || maxIdx.CompareAndSwap(m, idx) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	m := c.Nodes[l].Metrics()
	t.Logf("640 ingest calls → %d log entries (%.1f commands/entry)", m.Entries, float64(m.EntryCommands)/float64(m.Entries))
	if m.Entries >= m.EntryCommands {
		t.Errorf("no coalescing: %d entries for %d commands", m.Entries, m.EntryCommands)
	}
	assertSameDigest(t, c, maxIdx.Load())
}

func TestFailover_LeaderStopNewLeaderWritesContinueLookupsServe(t *testing.T) {
	c := clustertest.New(t, 3, noExpire)
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	now := time.Now().UnixMilli()
	idx, err := appliedAt(c.Nodes[follower(c, l)].Ingest(c.Ctx(5*time.Second), "", evs("a", 100, 8, now)))
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(idx, 5*time.Second)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var lookups, misses atomic.Int64
	for _, i := range c.Running() {
		if i == l {
			continue
		}
		nd := c.Nodes[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res := lookup(nd, 100, 8, now)
				lookups.Add(1)
				if res.Reason != index.PrefixMatch {
					misses.Add(1)
				}
				_ = nd.ReadState()
				time.Sleep(200 * time.Microsecond) // paces the lookup load during the failover
			}
		}()
	}
	killed := time.Now()
	c.Kill(l)
	nl := c.WaitLeader(10 * time.Second)
	failover := time.Since(killed)
	t.Logf("failover: new leader %s ready %v after the leader was killed (FastTiming: heartbeat %v)", c.Nodes[nl].ID, failover, raftnode.FastTiming.HeartbeatTimeout)
	idx, err = appliedAt(c.Nodes[follower(c, nl)].Ingest(c.Ctx(5*time.Second), "", evs("b", 500, 4, now)))
	if err != nil {
		t.Fatalf("write after failover: %v", err)
	}
	close(stop)
	wg.Wait()
	if misses.Load() != 0 {
		t.Fatalf("%d of %d lookups on survivors failed during failover", misses.Load(), lookups.Load())
	}
	t.Logf("%d lookups on survivors during failover, all PREFIX_MATCH", lookups.Load())
	assertSameDigest(t, c, idx)
}

func TestRestart_RestoresFromSnapshotAndLogSameDigest(t *testing.T) {
	c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		cfg.SnapshotThreshold = 16
		cfg.TrailingLogs = 8
	})
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	r := follower(c, l)
	var idx uint64
	var err error
	for k := 0; k < 40; k++ {
		if idx, err = appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("a", uint64(k*100), 4, time.Now().UnixMilli()))); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.Nodes[r].Snapshot(c.Ctx(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for k := 40; k < 50; k++ { // a log tail after the snapshot
		if idx, err = appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("b", uint64(k*100), 4, time.Now().UnixMilli()))); err != nil {
			t.Fatal(err)
		}
	}
	want := assertSameDigest(t, c, idx)
	c.Stop(r)
	c.Start(r)
	if !c.Nodes[r].Ready() {
		t.Fatal("not ready after restart")
	}
	c.WaitApplied(idx, 10*time.Second)
	if _, d := c.Nodes[r].Digest(); d != want {
		t.Fatalf("digest after restart %x, want %x", d, want)
	}
}

func TestLaggingNode_CatchesUpBySnapshotInstall(t *testing.T) {
	var restores atomic.Int64
	c := clustertest.New(t, 3, func(i int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		cfg.SnapshotThreshold = 16
		cfg.TrailingLogs = 4
		if i == 2 {
			cfg.Hooks.OnRestore = func(int64, time.Duration, error) { restores.Add(1) }
		}
	})
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	if l == 2 {
		c.Stop(2) // transfer leadership away, keep the lagging node a follower
		c.Start(2)
		l = c.WaitLeader(15 * time.Second)
	}
	c.Kill(2)
	var idx uint64
	var err error
	for k := 0; k < 60; k++ {
		if idx, err = appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("a", uint64(k*100), 4, time.Now().UnixMilli()))); err != nil {
			t.Fatal(err)
		}
	}
	// Both running nodes compact their logs: under load leadership may
	// have moved during the writes, and whichever node leads when the
	// lagging one returns must lack the entries it missed.
	for _, i := range c.Running() {
		if _, _, err := c.Nodes[i].Snapshot(c.Ctx(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	before := restores.Load()
	c.Start(2)
	want := assertSameDigest(t, c, idx)
	if restores.Load() == before {
		t.Fatal("lagging node caught up without a snapshot install")
	}
	if _, d := c.Nodes[2].Digest(); d != want {
		t.Fatalf("digest %x want %x", d, want)
	}
}

func TestExpireAndEviction_IdenticalEverywhere(t *testing.T) {
	c := clustertest.New(t, 3, noExpire)
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	now := time.Now().UnixMilli()
	ttl := c.Nodes[l].Policy().EvictionTTL.Milliseconds()
	if _, err := c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("old", 1, 8, now-ttl-1000)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("new", 1, 8, now)); err != nil {
		t.Fatal(err)
	}
	p := c.Nodes[l].Policy()
	p.MaxResidencies = 20 // capacity eviction inside apply
	if _, err := c.Nodes[follower(c, l)].SetPolicy(c.Ctx(5*time.Second), p); err != nil {
		t.Fatal(err)
	}
	_, err := c.Nodes[follower(c, l)].Ingest(c.Ctx(5*time.Second), "", evs("more", 1000, 8, now))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := c.Nodes[follower(c, l)].Expire(c.Ctx(5*time.Second), now)
	if err != nil {
		t.Fatal(err)
	}
	assertSameDigest(t, c, idx)
	for _, i := range c.Running() {
		sz := c.Nodes[i].Index().Sizes()
		if sz.Residencies > 20 {
			t.Fatalf("%s holds %d residencies over the bound", c.Nodes[i].ID, sz.Residencies)
		}
		if v := c.Nodes[i].Policy().Version; v != 1 {
			t.Fatalf("%s policy version %d", c.Nodes[i].ID, v)
		}
	}
}

// A restore sent to a follower while the leader has just died waits out
// the election (nothing of the stream is read before a leader is known)
// instead of failing at once with no leader or an unreachable old leader.
func TestRestore_WaitsOutAnElection(t *testing.T) {
	c, l, backup, want, now := backedUpCluster(t)
	if _, err := c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("b", 1000, 8, now)); err != nil {
		t.Fatal(err)
	}
	f := follower(c, l)
	c.Kill(l)
	start := time.Now()
	idx, err := c.Nodes[f].Restore(c.Ctx(20*time.Second), bytes.NewReader(backup.Bytes()))
	if err != nil {
		t.Fatalf("restore right after the leader died: %v", err)
	}
	t.Logf("restore committed at index %d, %v after the leader was killed", idx, time.Since(start).Round(time.Millisecond))
	if d := assertSameDigest(t, c, idx); d != want {
		t.Fatalf("digest after restore %x, backup %x", d, want)
	}
}

// backedUpCluster starts 3 nodes, writes blocks 1..8 of replica "a" and
// returns the cluster, its leader, a backup taken on a follower, the
// digest it holds and the write's timestamp.
func backedUpCluster(t *testing.T) (*clustertest.Cluster, int, *bytes.Buffer, uint64, int64) {
	t.Helper()
	c := clustertest.New(t, 3, noExpire)
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	now := time.Now().UnixMilli()
	idx, err := appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("a", 1, 8, now)))
	if err != nil {
		t.Fatal(err)
	}
	want := assertSameDigest(t, c, idx)
	var backup bytes.Buffer
	if err := c.Nodes[follower(c, l)].Backup(&backup); err != nil {
		t.Fatal(err)
	}
	return c, l, &backup, want, now
}

func TestBackupRestore_WholeClusterAndBadFilesRefused(t *testing.T) {
	c, l, backup, want, now := backedUpCluster(t)
	meta, err := snapshot.Inspect(bytes.NewReader(backup.Bytes()), t.TempDir())
	if err != nil || meta.Digest != want {
		t.Fatalf("inspect: %+v %v", meta, err)
	}
	if _, err := c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("b", 1000, 8, now)); err != nil {
		t.Fatal(err)
	}
	// bad files are refused before anything changes
	bad := bytes.Clone(backup.Bytes())
	bad[len(bad)/2] ^= 1
	if _, err := c.Nodes[follower(c, l)].Restore(c.Ctx(10*time.Second), bytes.NewReader(bad)); err == nil || !errors.Is(err, raftnode.ErrInvalid) {
		t.Fatalf("corrupt backup: %v", err)
	} else {
		t.Logf("corrupt backup refused: %v", err)
	}
	if _, err := c.Nodes[l].Restore(c.Ctx(10*time.Second), bytes.NewReader(backup.Bytes()[:backup.Len()-5])); !errors.Is(err, snapshot.ErrTruncated) {
		t.Fatalf("truncated backup: %v", err)
	}
	idx, err := c.Nodes[follower(c, l)].Restore(c.Ctx(20*time.Second), bytes.NewReader(backup.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(idx, 10*time.Second)
	for _, i := range c.Running() {
		if res := lookup(c.Nodes[i], 1000, 8, now); res.Reason == index.PrefixMatch {
			t.Fatalf("%s still has data written after the backup", c.Nodes[i].ID)
		}
		if res := lookup(c.Nodes[i], 1, 8, now); res.Reason != index.PrefixMatch {
			t.Fatalf("%s lost the backup's data: %+v", c.Nodes[i].ID, res)
		}
	}
	if d := assertSameDigest(t, c, idx); d != want {
		t.Fatalf("digest after restore %x, backup %x", d, want)
	}
}
