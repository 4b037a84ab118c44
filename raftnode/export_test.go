package raftnode

import "github.com/hashicorp/raft"

// SetWrapLogStoreForTest sets the wrapper nodes started afterwards put
// around their bbolt log store (nil: none) and returns a func restoring
// the previous one. Not safe to call while nodes start.
func SetWrapLogStoreForTest(f func(nodeID string, s raft.LogStore) raft.LogStore) (restore func()) {
	old := wrapLogStore
	wrapLogStore = f
	return func() { wrapLogStore = old }
}
