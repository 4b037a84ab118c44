package raftnode

import "github.com/hashicorp/raft"

// countingLogStore counts the appends to the local log (Metrics.LogAppends
// and LogAppendEntries). It sits under raft.NewLogCache, so it sees every
// append and no cached read.
type countingLogStore struct {
	raft.LogStore
	m *metrics
}

func (s countingLogStore) StoreLog(l *raft.Log) error {
	s.m.logAppends.Add(1)
	s.m.logAppendEntries.Add(1)
	return s.LogStore.StoreLog(l)
}

func (s countingLogStore) StoreLogs(ls []*raft.Log) error {
	s.m.logAppends.Add(1)
	s.m.logAppendEntries.Add(uint64(len(ls)))
	return s.LogStore.StoreLogs(ls)
}

// IsMonotonic passes raft.MonotonicLogStore through, which the wrapper
// would otherwise hide.
func (s countingLogStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
