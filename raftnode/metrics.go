package raftnode

import (
	"sync/atomic"
	"time"
)

// Metrics are cumulative counters since start (read with Node.Metrics).
type Metrics struct {
	// ApplyBatches/ApplyCommands/ApplyTime: FSM ApplyBatch calls, commands
	// applied and total time spent applying.
	ApplyBatches, ApplyCommands uint64
	ApplyTime                   time.Duration
	// Entries/EntryCommands: group-commit log entries proposed by this node
	// as leader and the commands they carried.
	Entries, EntryCommands uint64
	// Commits/CommitTime: writes committed as leader and their total
	// submission-to-applied latency.
	Commits    uint64
	CommitTime time.Duration
	// Forwarded: writes this node forwarded to a leader. Retries: write
	// attempts retried.
	Forwarded, Retries uint64
	// CreditsDropped: LFU credit batches dropped (queue full or failure).
	CreditsDropped uint64
	// Snapshots, LastSnapshotBytes, LastSnapshotTime: persisted snapshots.
	Snapshots         uint64
	LastSnapshotBytes uint64
	LastSnapshotTime  time.Duration
	// LogAppends/LogAppendEntries: appends to the local Raft log store
	// (one bbolt transaction and fsync each) and the entries they wrote.
	// Their ratio is the entries per transaction; an append rewrites the
	// log's last bbolt leaf, so the write amplification of large entries
	// is about (3 + ratio) / ratio (raftnode/DESIGN.md).
	LogAppends, LogAppendEntries uint64
	// LogAppendBytes: bytes of entry data appended to the local log since
	// start. SnapshotsByLogBytes: snapshots this node took because the
	// log had grown past its limit since the last one (max of
	// Config.SnapshotLogBytes and twice the last snapshot's size;
	// Snapshots counts every snapshot).
	LogAppendBytes, SnapshotsByLogBytes uint64
	// ExpireClamped: expire commands this node, as leader, bounded to the
	// newest observation plus ExpireClockMargin because its clock was
	// further ahead (leader.go).
	ExpireClamped uint64
	// PickerReports: load reports pickers sent to this node;
	// PickerReportsFromPeers: reports other nodes passed on to it;
	// PickerReportsForwarded: reports it passed on (one per peer reached);
	// PickerReportsDropped: reports it did not pass on to a peer (the
	// peer's queue full or its call failed). The store's own outcomes
	// (stored, ignored, refused, expired) are PickerLoad().Stats().
	PickerReports, PickerReportsFromPeers, PickerReportsForwarded, PickerReportsDropped uint64
	// PicksPushes: provisional picks pushes pickers sent to this node;
	// PicksFromPeers: pushes other nodes passed on to it; PicksForwarded
	// and PicksDropped: pushes it passed on to a peer, or did not (the
	// peer's queue full or its call failed). The store's own counters are
	// Provisional().Stats().
	PicksPushes, PicksFromPeers, PicksForwarded, PicksDropped uint64
}

type metrics struct {
	applyBatches, applyCommands, applyNanos atomic.Uint64
	entries, entryCommands                  atomic.Uint64
	commits, commitNanos                    atomic.Uint64
	forwarded, retries, creditsDropped      atomic.Uint64
	snapshots, lastSnapshotBytes            atomic.Uint64
	lastSnapshotNanos                       atomic.Uint64
	logAppends, logAppendEntries            atomic.Uint64
	// logAppendBytes: entry bytes appended to the local log since start;
	// snapBase: its value at the last snapshot (snapshotbytes.go).
	logAppendBytes, snapBase, snapshotsByBytes atomic.Uint64
	expireClamped                              atomic.Uint64
	pickerReports, pickerFromPeers             atomic.Uint64
	pickerForwarded, pickerDropped             atomic.Uint64
	picksPushes, picksFromPeers                atomic.Uint64
	picksForwarded, picksDropped               atomic.Uint64
}

// Metrics returns the counters.
func (n *Node) Metrics() Metrics {
	m := &n.metrics
	return Metrics{
		ApplyBatches: m.applyBatches.Load(), ApplyCommands: m.applyCommands.Load(),
		ApplyTime: time.Duration(m.applyNanos.Load()),
		Entries:   m.entries.Load(), EntryCommands: m.entryCommands.Load(),
		Commits: m.commits.Load(), CommitTime: time.Duration(m.commitNanos.Load()),
		Forwarded: m.forwarded.Load(), Retries: m.retries.Load(), CreditsDropped: m.creditsDropped.Load(),
		Snapshots: m.snapshots.Load(), LastSnapshotBytes: m.lastSnapshotBytes.Load(),
		LastSnapshotTime: time.Duration(m.lastSnapshotNanos.Load()),
		LogAppends:       m.logAppends.Load(), LogAppendEntries: m.logAppendEntries.Load(),
		LogAppendBytes: m.logAppendBytes.Load(), SnapshotsByLogBytes: m.snapshotsByBytes.Load(),
		ExpireClamped: m.expireClamped.Load(),
		PickerReports: m.pickerReports.Load(), PickerReportsFromPeers: m.pickerFromPeers.Load(),
		PickerReportsForwarded: m.pickerForwarded.Load(), PickerReportsDropped: m.pickerDropped.Load(),
		PicksPushes: m.picksPushes.Load(), PicksFromPeers: m.picksFromPeers.Load(),
		PicksForwarded: m.picksForwarded.Load(), PicksDropped: m.picksDropped.Load(),
	}
}
