package raftnode

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// snapshotBytesCheck is how often a node compares the log bytes appended
// since its last snapshot with Config.SnapshotLogBytes (two atomic loads).
const snapshotBytesCheck = time.Second

// snapshotByBytes takes a snapshot whenever Config.SnapshotLogBytes of
// entry data were appended to the local log since the last snapshot.
// Raft's own trigger counts entries (SnapshotThreshold), and a
// group-committed entry holds from one event to 256 KiB of them, so under
// heavy ingest the log a restart must replay could grow to gigabytes
// between two snapshots. Every node runs it: snapshots are local.
//
// The count starts at zero on start-up, so log appended before a restart
// delays the first such snapshot by at most one SnapshotLogBytes.
func (n *Node) snapshotByBytes() {
	defer n.wg.Done()
	limit := n.cfg.SnapshotLogBytes
	if limit <= 0 {
		return
	}
	t := time.NewTicker(snapshotBytesCheck)
	defer t.Stop()
	m := &n.metrics
	for {
		select {
		case <-n.shutdownCh:
			return
		case <-t.C:
		}
		cur := m.logAppendBytes.Load()
		grown := cur - m.snapBase.Load()
		if grown < uint64(limit) {
			continue
		}
		// Counted from here even if raft's own trigger or a failure
		// intervenes: one attempt per SnapshotLogBytes, not one per tick.
		m.snapBase.Store(cur)
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

// snapshotDone restarts the log byte count at a finished snapshot,
// whichever trigger took it.
func (n *Node) snapshotDone() {
	n.metrics.snapBase.Store(n.metrics.logAppendBytes.Load())
}
