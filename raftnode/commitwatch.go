package raftnode

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// commitWatch is the Raft transport with the leader's commit index read
// off every AppendEntries this node receives (heartbeats carry none: raft
// sends them with LeaderCommitIndex 0 and takes them on a fast path that
// skips Consumer; the replication that follows a commit carries it). Raft
// caps a follower's own commit index at its last log index, so a follower
// whose log append is slow (or whose disk stalls) while entries stream in
// sees no gap between "committed" and "applied"; the leader's figure
// shows how far behind it really is (health.go, StaleApplyLag).
//
// It also wraps AppendEntries, which raft uses for the leader's
// heartbeats (replication goes through pipelines): the time each peer
// last answered one tells Status that Raft no longer reaches a follower
// long before the transport's 10 s dial timeout turns into a failed
// heartbeat. Every other method, and the optional interfaces raft asserts
// (WithClose, WithPreVote), are the embedded transport's.
type commitWatch struct {
	*raft.NetworkTransport
	leaderCommit *atomic.Uint64
	ch           chan raft.RPC
	// answered: peer id → unix ns of its last answered AppendEntries
	// since started (unix ns: when this node last became leader).
	answered sync.Map
	started  atomic.Int64
}

// AppendEntries is the transport's, recording when target answered.
func (w *commitWatch) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := w.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		w.answered.Store(id, time.Now().UnixNano())
	}
	return err
}

// restartAnswers forgets every recorded answer and counts each peer as
// answering at now: a new leader's heartbeats start from there.
func (w *commitWatch) restartAnswers(now time.Time) {
	w.answered.Range(func(k, _ any) bool {
		w.answered.Delete(k)
		return true
	})
	w.started.Store(now.UnixNano())
}

// lastAnswer is when peer id last answered an AppendEntries since this
// node last became leader, or when it became leader if the peer has not
// answered since (false: this node has not been leader).
func (w *commitWatch) lastAnswer(id string) (time.Time, bool) {
	v, ok := w.answered.Load(raft.ServerID(id))
	if !ok {
		if s := w.started.Load(); s != 0 {
			return time.Unix(0, s), true // none since this node became leader
		}
		return time.Time{}, false
	}
	return time.Unix(0, v.(int64)), true
}

// newCommitWatch forwards t's RPCs to raft through a channel of its own
// until done closes, recording each AppendEntries' LeaderCommitIndex (the
// largest seen) in leaderCommit.
func newCommitWatch(t *raft.NetworkTransport, leaderCommit *atomic.Uint64, done <-chan struct{}) *commitWatch {
	w := &commitWatch{NetworkTransport: t, leaderCommit: leaderCommit, ch: make(chan raft.RPC)}
	go func() {
		in := t.Consumer()
		for {
			select {
			case rpc := <-in:
				w.observe(rpc)
				select {
				case w.ch <- rpc:
				case <-done:
					return
				}
			case <-done:
				return
			}
		}
	}()
	return w
}

func (w *commitWatch) observe(rpc raft.RPC) {
	ae, ok := rpc.Command.(*raft.AppendEntriesRequest)
	if !ok {
		return
	}
	for c := ae.LeaderCommitIndex; ; {
		old := w.leaderCommit.Load()
		if c <= old || w.leaderCommit.CompareAndSwap(old, c) {
			return
		}
	}
}

// Consumer returns the forwarded RPCs.
func (w *commitWatch) Consumer() <-chan raft.RPC { return w.ch }
