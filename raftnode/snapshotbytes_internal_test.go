package raftnode

import "testing"

// The log growth that triggers a snapshot is the configured floor until
// the index's snapshots outgrow half of it, then twice the last
// snapshot's size, scaled by the node's jitter.
func TestSnapshotLogLimit(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name   string
		floor  int64
		last   uint64
		jitter float64
		want   uint64
	}{
		{"no snapshot yet: the floor", 256 * mib, 0, 1, 256 * mib},
		{"small index: the floor", 256 * mib, 100 * mib, 1, 256 * mib},
		{"large index: twice its snapshot", 256 * mib, 417 * mib, 1, 834 * mib},
		{"jitter scales it", 256 * mib, 0, 1.1, 256 * mib * 11 / 10},
		{"jitter scales the snapshot rule too", 256 * mib, 500 * mib, 0.9, 900 * mib},
	} {
		if got := snapshotLogLimit(c.floor, c.last, c.jitter); got != c.want {
			t.Errorf("%s: snapshotLogLimit(%d, %d, %v) = %d, want %d", c.name, c.floor, c.last, c.jitter, got, c.want)
		}
	}
}

// Raft's entry-count rule stays as configured while snapshots are small
// and is off once the last one is over half the log-growth floor.
func TestSnapshotEntryThreshold(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name string
		last uint64
		want uint64
	}{
		{"no snapshot yet", 0, 16384},
		{"small snapshot", 100 * mib, 16384},
		{"half the floor exactly", 128 * mib, 16384},
		{"over half the floor", 128*mib + 1, entryCountOff},
		{"large snapshot", 417 * mib, entryCountOff},
	} {
		if got := snapshotEntryThreshold(16384, 256*mib, c.last); got != c.want {
			t.Errorf("%s: snapshotEntryThreshold(16384, 256 MiB, %d) = %d, want %d", c.name, c.last, got, c.want)
		}
	}
}
