package raftnode

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/inference-cache/inference-cache/command"
	"github.com/inference-cache/inference-cache/snapshot"
)

// contract §9.5: a corrupt snapshot or log is detected and refused with a clear
// error; the node does not start with silently wrong state. Snapshots
// carry their own checksums (snapshot package, and raft's CRC of the
// file store); log entries carry command.SealEntry's. What is checked here:
// at start, every entry of the local log (its position seal, logseal.go,
// and its own checksum), and that a node with
// snapshots still has its Raft term and vote (a lost raft.db would let
// it vote twice in one term); while running, a damaged entry reaching the
// FSM stops the node (Fatal).

// ErrCorruptState: the node's Raft data on disk is damaged; it does not
// start (or stops). Replace its data directory: the cluster re-sends the
// state (docs/operations.md, "Replacing a dead node").
var ErrCorruptState = errors.New("raftnode: raft data on disk is damaged")

// keyCurrentTerm is where hashicorp/raft keeps the current term in the
// stable store.
var keyCurrentTerm = []byte("CurrentTerm")

// checkRaftState verifies the local log's sealed entries and that the
// stable store still holds a term when snapshots exist.
func checkRaftState(store *raftboltdb.BoltStore, snaps raft.SnapshotStore) error {
	metas, err := snaps.List()
	if err != nil {
		return fmt.Errorf("%w: list snapshots: %v", ErrCorruptState, err)
	}
	if len(metas) > 0 {
		term, err := store.GetUint64(keyCurrentTerm)
		if err != nil || term == 0 {
			return fmt.Errorf("%w: snapshots up to index %d exist but raft.db holds no current term (err %v): the log and stable store were lost or truncated",
				ErrCorruptState, metas[0].Index, err)
		}
	}
	first, err := store.FirstIndex()
	if err != nil {
		return fmt.Errorf("%w: read the log's first index: %v", ErrCorruptState, err)
	}
	last, err := store.LastIndex()
	if err != nil {
		return fmt.Errorf("%w: read the log's last index: %v", ErrCorruptState, err)
	}
	if first == 0 {
		return nil
	}
	var l raft.Log
	for i := first; i <= last; i++ {
		if err := store.GetLog(i, &l); errors.Is(err, raft.ErrLogNotFound) {
			continue // a user restore leaves a gap below its index
		} else if err != nil {
			return fmt.Errorf("%w: log entry %d of %d..%d: %v", ErrCorruptState, i, first, last, err)
		}
		if err := checkPos(i, &l); err != nil {
			return err
		}
		if l.Type != raft.LogCommand {
			continue
		}
		if _, err := command.VerifyEntry(l.Data); err != nil {
			return fmt.Errorf("%w: log entry %d (term %d): %v", ErrCorruptState, i, l.Term, err)
		}
	}
	return nil
}

// checkBoltFile walks raft.db's page graph before raft-boltdb opens it:
// bbolt trusts its pages, and a damaged file (a torn write, a truncation)
// made it panic with an assertion in a background goroutine, which no
// recover can catch. A missing or empty file is a new node's.
func checkBoltFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Size() == 0 {
		return nil
	}
	if err := snapshot.CheckBoltFile(path); err != nil {
		// The check is the snapshot package's; "snapshot corrupt" would
		// mislead about which file is damaged.
		return fmt.Errorf("%w: %s: %s", ErrCorruptState, path, strings.TrimPrefix(err.Error(), snapshot.ErrCorrupt.Error()+": "))
	}
	return nil
}

// newRaft is raft.NewRaft with its panics (it panics on some damaged
// snapshot stores and logs, e.g. "log not found" after falling back to an
// older snapshot) and its errors loading state (every snapshot failing
// raft's CRC or the FSM's restore: "failed to load any existing
// snapshots"; a term or last log it cannot read) turned into
// ErrCorruptState. Configuration errors pass through.
func newRaft(rc *raft.Config, f raft.FSM, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("%w: raft could not load its state: %v", ErrCorruptState, p)
		}
	}()
	r, err = raft.NewRaft(rc, f, logs, stable, snaps, trans)
	if err != nil && isLoadError(err) {
		err = fmt.Errorf("%w: raft could not load its state: %v", ErrCorruptState, err)
	}
	return r, err
}

// isLoadError reports whether a raft.NewRaft error is about the state on
// disk (hashicorp/raft's messages for loading snapshots, the term, the
// last vote and the last log) rather than the configuration.
func isLoadError(err error) bool {
	msg := err.Error()
	for _, s := range []string{"failed to load", "failed to find last log", "failed to get last log", "snapshot"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// fail marks the node's state untrustworthy: Fatal closes, Ready turns
// false, and the owner is expected to stop the node.
func (n *Node) fail(err error) {
	n.fatalOnce.Do(func() {
		n.fatalErr = fmt.Errorf("%w: %w", ErrCorruptState, err)
		n.ready.Store(false)
		n.log.Error("raftnode: stopping: this node's state can no longer be trusted; replace its data directory", "err", err)
		close(n.fatalCh)
	})
}

// Fatal is closed when the node hit damaged Raft data while running (a
// log entry failing its checksum); FatalErr then says what. The node
// applies nothing more; stop it (the server exits non-zero).
func (n *Node) Fatal() <-chan struct{} { return n.fatalCh }

// FatalErr is the error that closed Fatal (nil before), wrapping
// ErrCorruptState.
func (n *Node) FatalErr() error {
	select {
	case <-n.fatalCh:
		return n.fatalErr
	default:
		return nil
	}
}
