package raftnode_test

import (
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/raftnode"
)

// Config.SnapshotLogBytes snapshots every node once that much log was
// appended, while raft's entry-count trigger (set out of reach here) would
// not have; with it off, the same load takes no snapshot. A restarted node
// then comes back from that snapshot plus the log after it.
func TestSnapshotLogBytes_SnapshotsOnLogGrowth(t *testing.T) {
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
				if idx, err = c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("r", uint64(k)<<20, 512, now)); err != nil {
					t.Fatal(err)
				}
			}
			want := assertSameDigest(t, c, idx)
			for _, i := range c.Running() {
				if b := c.Nodes[i].Metrics().LogAppendBytes; b < 512<<10 {
					t.Fatalf("%s appended %d log bytes: the load is too small for the test", c.Nodes[i].ID, b)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for _, i := range c.Running() {
				m := c.Nodes[i].Metrics()
				for tc.bytes > 0 && m.SnapshotsByLogBytes == 0 && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
					m = c.Nodes[i].Metrics()
				}
				if tc.bytes > 0 && (m.SnapshotsByLogBytes == 0 || m.Snapshots == 0) {
					t.Fatalf("%s: no snapshot after %d log bytes (limit %d): %+v", c.Nodes[i].ID, m.LogAppendBytes, tc.bytes, m)
				}
				if tc.bytes < 0 && (m.SnapshotsByLogBytes != 0 || m.Snapshots != 0) {
					t.Fatalf("%s: %d snapshots with the trigger off", c.Nodes[i].ID, m.Snapshots)
				}
			}
			if tc.bytes < 0 {
				return
			}
			// A follower restarted from its snapshot and log reaches the
			// same state.
			f := follower(c, l)
			c.Kill(f)
			c.Start(f)
			if d := assertSameDigest(t, c, idx); d != want {
				t.Fatalf("digest after restart %x, want %x", d, want)
			}
		})
	}
}
