package raftnode

import "github.com/hashicorp/raft"

// countingLogStore counts the appends to the local log (Metrics.LogAppends,
// LogAppendEntries and LogAppendBytes) and reports each append's outcome
// to the node's health (a failing append marks reads stale, health.go).
// It sits under raft.NewLogCache, so it sees every append and no cached
// read.
type countingLogStore struct {
	raft.LogStore
	m *metrics
	h *health
}

func (s countingLogStore) StoreLog(l *raft.Log) error {
	s.m.logAppends.Add(1)
	s.m.logAppendEntries.Add(1)
	err := s.LogStore.StoreLog(l)
	if err == nil {
		s.m.logAppendBytes.Add(uint64(len(l.Data)))
	}
	s.h.appendDone(err)
	return err
}

func (s countingLogStore) StoreLogs(ls []*raft.Log) error {
	s.m.logAppends.Add(1)
	s.m.logAppendEntries.Add(uint64(len(ls)))
	err := s.LogStore.StoreLogs(ls)
	if err == nil {
		var b uint64
		for _, l := range ls {
			b += uint64(len(l.Data))
		}
		s.m.logAppendBytes.Add(b)
	}
	s.h.appendDone(err)
	return err
}

// IsMonotonic passes raft.MonotonicLogStore through, which the wrapper
// would otherwise hide.
func (s countingLogStore) IsMonotonic() bool { return isMonotonic(s.LogStore) }

// isMonotonic reports whether s is a raft.MonotonicLogStore that says so:
// what a wrapper's IsMonotonic must pass through.
func isMonotonic(s raft.LogStore) bool {
	m, ok := s.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// wrapLogStore, when set (tests only, before New), wraps node nodeID's
// bbolt log store under countingLogStore, e.g. to make appends fail with
// ENOSPC. The wrapper must pass IsMonotonic through if it matters.
var wrapLogStore func(nodeID string, s raft.LogStore) raft.LogStore

// compactChunk bounds the entries one transaction of a log compaction
// deletes (chunkedCompaction).
const compactChunk = 1024

// chunkedCompaction deletes a prefix of the log (raft's compaction after
// a snapshot) in transactions of at most compactChunk entries, oldest
// first, so appends wait for one chunk, not the whole range: bbolt has
// one writer, and a compaction after a large snapshot removes tens of
// thousands of entries and up to twice the snapshot's bytes (the
// log-growth rule), and one bbolt transaction that large blocks appends
// for as long as it takes (BENCHMARKS.md, the compaction figure). Each chunk leaves the log contiguous, so a
// failure part way keeps a valid log that starts later. Any other range
// (a follower truncating a conflicting suffix) is deleted at once.
type chunkedCompaction struct{ raft.LogStore }

func (s chunkedCompaction) DeleteRange(lo, hi uint64) error {
	first, err := s.LogStore.FirstIndex()
	if err != nil || lo > first || hi < lo || hi-lo < compactChunk {
		return s.LogStore.DeleteRange(lo, hi)
	}
	for from := lo; ; from += compactChunk {
		to := hi
		if hi-from >= compactChunk {
			to = from + compactChunk - 1
		}
		if err := s.LogStore.DeleteRange(from, to); err != nil {
			return err
		}
		if to == hi {
			return nil
		}
	}
}

// IsMonotonic passes raft.MonotonicLogStore through.
func (s chunkedCompaction) IsMonotonic() bool { return isMonotonic(s.LogStore) }
