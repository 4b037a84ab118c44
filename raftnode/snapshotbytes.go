package raftnode

import (
	"errors"
	"math/rand/v2"
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
// between two snapshots. Every node runs it: snapshots are local.
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
	for {
		select {
		case <-n.shutdownCh:
			return
		case <-t.C:
		}
		// The base first: snapshotDone may move it past a count read
		// before it.
		base := m.snapBase.Load()
		cur := m.logAppendBytes.Load()
		limit := snapshotLogLimit(n.cfg.SnapshotLogBytes, m.lastSnapshotBytes.Load(), jitter)
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
