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
func (s countingLogStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// wrapLogStore, when set (tests only, before New), wraps node nodeID's
// bbolt log store under countingLogStore, e.g. to make appends fail with
// ENOSPC. The wrapper must pass IsMonotonic through if it matters.
var wrapLogStore func(nodeID string, s raft.LogStore) raft.LogStore
