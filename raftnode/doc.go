// Package raftnode replicates the inference-cache index with hashicorp/raft
// (contract §8, §13): raft-boltdb/v2 log and stable store (bbolt with
// NoFreelistSync and the map freelist, wrapped in raft.NewLogCache), a file
// snapshot store in the BoltDB format of package snapshot, a TCP transport,
// memberlist gossip for discovery and bootstrap_expect, leader-side group
// commit, follower-to-leader write forwarding over gRPC, a leader-only
// expire ticker and opt-in dead-server cleanup.
//
// The write path is Node.Ingest / ReportStats / SetPolicy → (forward to the
// leader) → group commit → Raft log → fsm.FSM → index.Index. Reads never
// touch Raft: Node.Index (or Lookup) serves from the local copy and
// Node.ReadState says how stale it may be.
//
// Errors are this package's sentinels (ErrNotLeader, ErrNoLeader,
// ErrTimeout, …); callers never import hashicorp/raft. See DESIGN.md.
package raftnode
