// Package fsm is the Raft state machine of inference-cache (SPEC 6, 8, 13):
// the command encoding written to the Raft log, the deterministic apply of
// those commands into an index.Index, and the snapshot/restore hooks that
// use the BoltDB format of package snapshot.
//
// One log entry (fsmpb.Entry) carries the commands the leader group-
// committed; each command has a request id, and a bounded window of recent
// ids (part of every snapshot) makes a retried command apply once. Apply
// reads no clock and no randomness and never iterates a Go map, so every
// node that applies the same log holds the same index (equal Digest).
//
// FSM implements raft.BatchingFSM. See DESIGN.md.
package fsm
