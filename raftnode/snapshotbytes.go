package raftnode

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
)

// snapshotBytesCheck is how often a node compares the log bytes appended
// since its last snapshot with Config.SnapshotLogBytes (two atomic loads).
const snapshotBytesCheck = time.Second

// snapshotByBytes takes a snapshot whenever the entry data appended to
// the local log since the last snapshot exceed snapshotLogLimit:
// Config.SnapshotLogBytes, or twice the last snapshot's size if more.
// Raft's own trigger counts entries (SnapshotThreshold), and a
// group-committed entry holds from one event to 256 KiB of them, so under
// heavy ingest the log a restart must replay could grow to gigabytes
// between two snapshots. It also switches raft's count rule off while
// snapshots are large (snapshotEntryThreshold). Every node runs it:
// snapshots are local.
//
// The bound is soft: the count starts at zero on start-up (log appended
// before a restart delays the first such snapshot by at most one limit),
// and every snapshot restarts the count when its persist ends, so the log
// appended during a persist is not counted. The limit grows with the
// index (snapshotLogLimit) and is jittered by ±10 % per node: all nodes
// append the same bytes, and snapshots taken at the same moment
// everywhere would turn off the parallel apply (an open view) on every
// node at once.
func (n *Node) snapshotByBytes() {
	defer n.wg.Done()
	if n.cfg.SnapshotLogBytes <= 0 {
		return
	}
	jitter := 0.9 + 0.2*rand.Float64()
	t := time.NewTicker(snapshotBytesCheck)
	defer t.Stop()
	m := &n.metrics
	countRule := n.cfg.SnapshotThreshold // raft's entry-count threshold in force
	for {
		select {
		case <-n.shutdownCh:
			return
		case <-t.C:
		}
		last := m.lastSnapshotBytes.Load()
		countRule = n.setEntryCountRule(countRule, snapshotEntryThreshold(n.cfg.SnapshotThreshold, n.cfg.SnapshotLogBytes, last), last)
		// The base first: snapshotDone may move it past a count read
		// before it.
		base := m.snapBase.Load()
		cur := m.logAppendBytes.Load()
		limit := snapshotLogLimit(n.cfg.SnapshotLogBytes, last, jitter)
		if cur <= base || cur-base < limit {
			continue
		}
		grown := cur - base
		// Counted from here even if a failure intervenes: one attempt
		// per limit, not one per tick. Lost to snapshotDone: that
		// snapshot restarted the count.
		if !m.snapBase.CompareAndSwap(base, cur) {
			continue
		}
		// Blocks this goroutine (only) until the snapshot is persisted;
		// Apply goes on meanwhile (the FSM's view, fsm.Snapshot).
		switch err := n.raft.Snapshot().Error(); {
		case err == nil:
			m.snapshotsByBytes.Add(1)
			n.log.Info("raftnode: snapshot after log growth", "log_bytes", grown, "limit", limit)
		case errors.Is(err, raft.ErrNothingNewToSnapshot), errors.Is(err, raft.ErrRaftShutdown):
		case n.shuttingDown():
			return // the shutdown aborted it (fsm.AbortSnapshots)
		default:
			n.log.Warn("raftnode: snapshot after log growth failed", "log_bytes", grown, "err", err)
		}
	}
}

// snapshotLogLimit is the log growth that triggers the next snapshot:
// SnapshotLogBytes, or twice the last snapshot's size when that is more.
// A snapshot costs about its own size to write (and disables the parallel
// apply while it is open), a restart replays the log after it: past twice
// the snapshot's size, replaying costs more than snapshotting would have,
// and below it a large index would be snapshotted back to back under heavy
// ingest (a trial with 20 M residencies on an overloaded 2-core machine:
// 417 MB snapshots took 100–165 s each). Each log byte thus pays at most
// half a byte of snapshot writing.
func snapshotLogLimit(floor int64, lastSnapshot uint64, jitter float64) uint64 {
	return uint64(float64(max(uint64(floor), 2*lastSnapshot)) * jitter)
}

// entryCountOff is raft's SnapshotThreshold while the entry count must
// not trigger snapshots: no log reaches it.
const entryCountOff = math.MaxUint64

// snapshotEntryThreshold is the entry-count threshold raft should use:
// Config.SnapshotThreshold while the last snapshot is at most half of
// Config.SnapshotLogBytes, and off above that, where log growth alone
// decides (snapshotLogLimit). Raft's count rule knows nothing of entry or
// snapshot sizes: with a 417 MB snapshot and 18 KB entries it fired every
// ~290 MB of log, so an overloaded node wrote snapshots back to back (a
// trial: five 210–265 s snapshots in 30 min on one node) instead of
// every 834 MB as the log-growth limit intends.
func snapshotEntryThreshold(threshold uint64, floor int64, lastSnapshot uint64) uint64 {
	if 2*lastSnapshot > uint64(floor) {
		return entryCountOff
	}
	return threshold
}

// setEntryCountRule makes want raft's SnapshotThreshold when it differs
// from cur (the value in force) and returns the value now in force. Only
// snapshotByBytes changes raft's reloadable config, so the read-modify-
// write below cannot lose another change.
func (n *Node) setEntryCountRule(cur, want, lastSnapshot uint64) uint64 {
	if want == cur {
		return cur
	}
	rc := n.raft.ReloadableConfig()
	rc.SnapshotThreshold = want
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Warn("raftnode: could not change the snapshot entry threshold", "want", want, "err", err)
		return cur
	}
	if want == entryCountOff {
		n.log.Info("raftnode: snapshots now follow log growth only (entry-count rule off while the snapshot is this large)",
			"last_snapshot_bytes", lastSnapshot, "log_bytes_limit", snapshotLogLimit(n.cfg.SnapshotLogBytes, lastSnapshot, 1))
	} else {
		n.log.Info("raftnode: snapshot entry-count rule back on", "threshold", want, "last_snapshot_bytes", lastSnapshot)
	}
	return want
}

// removeUnfinishedSnapshots deletes the temporary directories a snapshot
// that was being written when the process died leaves in the snapshot
// store (raft names them "<id>.tmp" and never reaps them; it only warns
// on every later snapshot). Called at start-up, before the store opens,
// while this process holds the log store's file lock.
func (n *Node) removeUnfinishedSnapshots(raftDir string) {
	dirs, _ := filepath.Glob(filepath.Join(raftDir, "snapshots", "*.tmp"))
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			n.log.Warn("raftnode: could not remove an unfinished snapshot", "dir", d, "err", err)
			continue
		}
		n.log.Info("raftnode: removed a snapshot left unfinished by a crash", "dir", d)
	}
}

// LastSnapshot returns the log index and stream size in bytes of this
// node's newest snapshot (written here, installed from a leader or
// restored at start-up), or zeros before the first. It reads raft's
// in-memory state (Raft.Stats), not the snapshot store: listing the store
// while a snapshot is being written makes raft log a warning per call.
func (n *Node) LastSnapshot() (index, bytes uint64) {
	index, _ = strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
	return index, n.metrics.lastSnapshotBytes.Load()
}

// snapshotDone restarts the log byte count at a finished snapshot,
// whichever trigger took it; the base only moves forward.
func (n *Node) snapshotDone() {
	m := &n.metrics
	for {
		base, cur := m.snapBase.Load(), m.logAppendBytes.Load()
		if cur <= base || m.snapBase.CompareAndSwap(base, cur) {
			return
		}
	}
}
