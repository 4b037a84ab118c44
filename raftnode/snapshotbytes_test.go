package raftnode_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/raftnode"
)

// Config.SnapshotLogBytes snapshots every node once that much log was
// appended, while raft's entry-count trigger (set out of reach here) would
// not have; with it off, the same load takes no snapshot. A restarted node
// then comes back from that snapshot plus the log after it.
func TestSnapshotLogBytes_SnapshotsOnLogGrowth(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster through elections, restarts or slow disks: the full tier runs it")
	}
	for _, tc := range []struct {
		name  string
		bytes int64
	}{{"on", 256 << 10}, {"off", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) {
				cfg.ExpireInterval = -1
				cfg.SnapshotThreshold = 1 << 30
				cfg.SnapshotInterval = time.Hour
				cfg.SnapshotLogBytes = tc.bytes
			})
			c.StartAll()
			l := c.WaitLeader(15 * time.Second)
			now := time.Now().UnixMilli()
			var idx uint64
			for k := 0; k < 100; k++ { // ~100 entries of ~9 KiB (packed): ~0.9 MiB of log
				var err error
				if idx, err = appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("r", uint64(k)<<20, 512, now))); err != nil {
					t.Fatal(err)
				}
			}
			want := assertSameDigest(t, c, idx)
			for _, i := range c.Running() {
				if b := c.Nodes[i].Metrics().LogAppendBytes; b < 512<<10 {
					t.Fatalf("%s appended %d log bytes: the load is too small for the test", c.Nodes[i].ID, b)
				}
			}
			if tc.bytes > 0 {
				poll.Eventually(t, 10*time.Second, 100*time.Millisecond, func() (bool, string) {
					for _, i := range c.Running() {
						if m := c.Nodes[i].Metrics(); m.SnapshotsByLogBytes == 0 || m.Snapshots == 0 {
							return false, fmt.Sprintf("%s: no snapshot after %d log bytes (limit %d): %+v", c.Nodes[i].ID, m.LogAppendBytes, tc.bytes, m)
						}
					}
					return true, ""
				})
			}
			for _, i := range c.Running() {
				if m := c.Nodes[i].Metrics(); tc.bytes < 0 && (m.SnapshotsByLogBytes != 0 || m.Snapshots != 0) {
					t.Fatalf("%s: %d snapshots with the trigger off", c.Nodes[i].ID, m.Snapshots)
				}
			}
			if tc.bytes < 0 {
				return
			}
			// Each node's snapshot is over half the floor here, so log
			// growth alone decides the next one: raft's entry-count rule
			// is off.
			for _, i := range c.Running() {
				waitEntryRuleOff(t, c.Nodes[i].Node)
			}
			// A follower restarted from its snapshot and log reaches the
			// same state, and knows that snapshot's size at once: the
			// log-growth limit scales with it, not with the floor.
			// A snapshot the kill interrupted leaves a temporary directory
			// (made by hand here); start-up removes it.
			f := follower(c, l)
			c.Kill(f)
			tmp := filepath.Join(c.Nodes[f].Dir, "raft", "snapshots", "3-123-456.tmp")
			if err := os.MkdirAll(tmp, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tmp, "state.bin"), []byte("partial"), 0o644); err != nil {
				t.Fatal(err)
			}
			c.Start(f)
			if _, err := os.Stat(tmp); !os.IsNotExist(err) {
				t.Fatalf("unfinished snapshot %s still there after start (stat: %v)", tmp, err)
			}
			diskIdx, diskBytes := newestSnapshotOnDisk(t, c.Nodes[f].Dir)
			if snapIdx, snapBytes := c.Nodes[f].LastSnapshot(); snapIdx != diskIdx || snapBytes != diskBytes {
				t.Fatalf("%s restarted: last snapshot index %d, %d bytes; its store's newest: index %d, %d bytes",
					c.Nodes[f].ID, snapIdx, snapBytes, diskIdx, diskBytes)
			}
			waitEntryRuleOff(t, c.Nodes[f].Node)
			if d := assertSameDigest(t, c, idx); d != want {
				t.Fatalf("digest after restart %x, want %x", d, want)
			}
		})
	}
}

// waitEntryRuleOff fails unless n turns raft's entry-count snapshot rule
// off within a few seconds (its check runs once a second).
func waitEntryRuleOff(t *testing.T, n *raftnode.Node) {
	t.Helper()
	poll.Eventually(t, 5*time.Second, 50*time.Millisecond, func() (bool, string) {
		th := n.SnapshotThresholdForTest()
		_, b := n.LastSnapshot()
		return th == math.MaxUint64, fmt.Sprintf("entry-count threshold still %d with a %d-byte snapshot", th, b)
	})
}

// newestSnapshotOnDisk reads the index and size of the newest snapshot in
// a node's raft snapshot store (its meta.json files) and fails when there
// is none.
func newestSnapshotOnDisk(t *testing.T, dataDir string) (index, size uint64) {
	t.Helper()
	metas, _ := filepath.Glob(filepath.Join(dataDir, "raft", "snapshots", "*", "meta.json"))
	for _, p := range metas {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ Index, Size uint64 }
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if m.Index > index {
			index, size = m.Index, m.Size
		}
	}
	if index == 0 || size == 0 {
		t.Fatalf("no snapshot in %s", dataDir)
	}
	return index, size
}
