// Package fsm is the Raft state machine of inference-cache (contract §6.6, §8, §13):
// the deterministic apply of log entries into an index.Index, the
// de-duplication of retried commands, and the snapshot/restore hooks that
// use the BoltDB format of package snapshot. The entry format itself
// (commands, framing, checksum, decoding) is package command's.
//
// One log entry carries the commands the leader group-committed; each
// command has a request id, and a bounded window of recent ids (part of
// every snapshot) makes a retried command apply once. Apply reads no
// clock and no randomness and never iterates a Go map, so every node that
// applies the same log holds the same index (equal Digest).
//
// FSM implements raft.BatchingFSM. See DESIGN.md.
package fsm
