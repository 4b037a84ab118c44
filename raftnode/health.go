package raftnode

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Local health (contract §8.4 reads and readiness). Raft's LastContact is not
// enough to say a node's reads are fresh: a follower whose disk is full
// keeps answering the leader's heartbeats (they write nothing), so its
// last contact stays a few milliseconds old while every AppendEntries
// with entries fails and its applied index stands still. Three local
// conditions therefore mark reads stale and take the node out of
// readiness (Serving false); lookups are still answered.
//
//   - StaleAppendFailing: the most recent append to the local log failed
//     (ENOSPC, I/O error). Set by the failing append itself, cleared by
//     the next one that succeeds.
//   - StaleCatchingUp: the node started with log entries its state
//     machine had not applied (a restart with a log tail after the
//     snapshot) and has not yet applied them. It ends once a leader is
//     known and everything committed is applied, and the commit index has
//     reached the log end found at start, or maxStaleness after the first
//     leader contact (when that tail was never committed).
//   - StaleApplyLag: a committed entry the state machine applies has
//     stayed unapplied for longer than the policy's maxStaleness.
//
// A follower's own commit index is capped at its last log index, so the
// last two compare the applied index with the larger of it and the
// commit index the leader sent (commitwatch.go): a follower whose log
// itself falls behind while entries stream in is caught too.

// Stale reasons (ReadState.StaleReason); "" when not stale.
const (
	StaleNoLeaderYet   = "no leader contact since start"
	StaleNoLeader      = "no leader contact within maxStaleness"
	StaleLeaderBarrier = "new leader has not applied its predecessors' entries yet"
	StaleAppendFailing = "appends to the local log are failing"
	StaleCatchingUp    = "applying the log found at start"
	StaleApplyLag      = "committed entries unapplied for longer than maxStaleness"
)

const (
	// healthInterval: how often the health monitor samples the applied
	// and commit indexes. StaleApplyLag and the end of StaleCatchingUp are
	// seen up to this late (maxStaleness is at least 100 ms).
	healthInterval = 50 * time.Millisecond
	// pendingScan bounds the entries pending() reads looking for one the
	// FSM applies; more unapplied entries than this count as pending.
	pendingScan = 1024
)

// health holds the local health inputs and the monitor's verdict.
type health struct {
	// Written by countingLogStore (raft's goroutine).
	appendFailing  atomic.Bool
	appendFailures atomic.Uint64
	errMu          sync.Mutex
	lastAppendErr  error
	// lag is the monitor's verdict: "", StaleCatchingUp or StaleApplyLag.
	lag atomic.Pointer[string]
	// leaderCommit is the largest commit index a leader sent this node
	// (commitwatch.go); 0 on a node that never followed.
	leaderCommit atomic.Uint64
}

func (h *health) appendDone(err error) {
	if err == nil {
		if h.appendFailing.Load() {
			h.appendFailing.Store(false)
		}
		return
	}
	h.appendFailures.Add(1)
	h.errMu.Lock()
	h.lastAppendErr = err
	h.errMu.Unlock()
	h.appendFailing.Store(true)
}

// reason is the local reason for staleness, "" when healthy. Cheap.
func (h *health) reason() string {
	if h.appendFailing.Load() {
		return StaleAppendFailing
	}
	if p := h.lag.Load(); p != nil {
		return *p
	}
	return ""
}

func (h *health) setLag(r string) {
	if r == "" {
		h.lag.Store(nil)
		return
	}
	h.lag.Store(&r)
}

// healthSample is what the monitor reads each tick.
type healthSample struct {
	now     time.Time
	applied uint64 // FSM applied index
	commit  uint64 // max(raft's commit index, the leader's as last received)
	contact bool   // leader, or heard from a leader since start
	// commitKnown: this node is the leader or has received a leader's
	// commit index (an AppendEntries; heartbeats carry none), so commit
	// says what the cluster committed, not only what this node knows.
	commitKnown bool
}

// lagTracker is the monitor's state: a pure function of the samples it is
// given (and pending), so tests can drive it without a cluster.
type lagTracker struct {
	bootLast uint64 // last log index found at start
	caughtUp bool   // applied the log found at start
	// knownAt: first sample with a leader's commit index (zero: none
	// yet). Heartbeats alone do not start the clock: a leader backing off
	// from a node that was down sends it heartbeats but no entries (and
	// no commit index) for up to ~10 s, and counting from the first
	// heartbeat once let a restarted node call itself caught up with an
	// empty index.
	knownAt  time.Time
	target   uint64    // a committed index whose apply is awaited (0: none)
	targetAt time.Time // when target was first seen committed
}

// step returns the lag verdict for s: "", StaleCatchingUp or
// StaleApplyLag. pending(from, to) reports whether an entry in (from, to]
// is one the FSM applies (so the FSM lags behind it).
func (t *lagTracker) step(s healthSample, maxStale time.Duration, pending func(from, to uint64) bool) string {
	if s.contact && s.commitKnown && t.knownAt.IsZero() {
		t.knownAt = s.now
	}
	if !t.caughtUp {
		// The log found at start may end in entries that were never
		// committed (a new leader's log is shorter): after maxStaleness
		// with a known commit index below it, stop waiting for them.
		if !s.contact || t.knownAt.IsZero() || pending(s.applied, s.commit) ||
			(s.commit < t.bootLast && s.now.Sub(t.knownAt) <= maxStale) {
			return StaleCatchingUp
		}
		t.caughtUp = true
	}
	if t.target != 0 && !pending(s.applied, t.target) {
		t.target = 0
	}
	if t.target == 0 && pending(s.applied, s.commit) {
		t.target, t.targetAt = s.commit, s.now
	}
	if t.target != 0 && s.now.Sub(t.targetAt) > maxStale {
		return StaleApplyLag
	}
	return ""
}

// pending reports whether the log holds, in (from, to], an entry the FSM
// applies (a command or configuration; not a no-op or barrier, which
// leave the FSM's applied index where it was). A missing entry (compacted)
// counts as applied.
func (n *Node) pending(from, to uint64) bool {
	if to <= from {
		return false
	}
	if to-from > pendingScan || to > n.raft.LastIndex() {
		// Entries past the local log are committed (the leader said so)
		// and not yet here: count them as pending; a leader's no-op among
		// them clears once it arrives.
		return true
	}
	var l raft.Log
	for i := from + 1; i <= to; i++ {
		if n.logs.GetLog(i, &l) != nil {
			continue
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return true
		}
	}
	return false
}

// healthLoop samples the indexes every healthInterval, publishes the lag
// verdict and logs each change of the local health reason.
func (n *Node) healthLoop(t *lagTracker) {
	defer n.wg.Done()
	tick := time.NewTicker(healthInterval)
	defer tick.Stop()
	last, since := n.health.reason(), time.Now()
	for {
		select {
		case <-n.shutdownCh:
			return
		case <-tick.C:
		}
		// A follower's own commit index stops at its last log entry; the
		// leader's says how much is committed that it has yet to apply.
		lc := n.health.leaderCommit.Load()
		s := healthSample{now: time.Now(), applied: n.fsm.AppliedIndex(), commit: max(n.raft.CommitIndex(), lc)}
		leader := n.raft.State() == raft.Leader
		s.contact = leader || !n.raft.LastContact().IsZero()
		s.commitKnown = leader || lc > 0
		n.health.setLag(t.step(s, n.fsm.Index().Policy().MaxStaleness, n.pending))
		n.appendHealthChanged(leader)
		r := n.health.reason()
		if r == last {
			continue
		}
		args := []any{"applied_index", s.applied, "commit_index", s.commit, "last_log_index", n.raft.LastIndex(), "previous", last, "for", s.now.Sub(since)}
		if n.health.appendFailing.Load() {
			n.health.errMu.Lock()
			args = append(args, "append_error", n.health.lastAppendErr, "append_failures", n.health.appendFailures.Load())
			n.health.errMu.Unlock()
		}
		if r != "" {
			n.log.Warn("raftnode: not serving: reads marked stale", append([]any{"reason", r}, args...)...)
		} else {
			n.log.Info("raftnode: serving again", args...)
		}
		last, since = r, s.now
	}
}

// Serving reports whether load balancers should send this node traffic:
// it is Ready and its own log and state machine keep up — appends to the
// local log succeed, it has applied the log it found at start, and no
// committed entry has waited longer than the policy's MaxStaleness to be
// applied. Use it for readiness (gRPC health, /readyz). A node that is
// not Serving still answers lookups, with ReadState.Stale set (contract §8.4).
// Losing the leader does not end Serving (every node would lose it at
// once); it makes reads Stale.
func (n *Node) Serving() bool { return n.Ready() && n.health.reason() == "" }

// Health is the node's local health (Node.Health).
type Health struct {
	// Serving is Node.Serving.
	Serving bool
	// Reason is why the node is not Serving while Ready: one of
	// StaleAppendFailing, StaleCatchingUp, StaleApplyLag ("" otherwise).
	Reason string
	// AppendFailures counts failed appends to the local log since start.
	AppendFailures uint64
	// LastAppendError is the most recent failed append's error (nil if
	// none since start), kept after appends succeed again.
	LastAppendError error
}

// Health returns the node's local health, for status and metrics.
func (n *Node) Health() Health {
	h := Health{Serving: n.Serving(), Reason: n.health.reason(), AppendFailures: n.health.appendFailures.Load()}
	n.health.errMu.Lock()
	h.LastAppendError = n.health.lastAppendErr
	n.health.errMu.Unlock()
	return h
}

// stepDownEvery spaces the leadership transfers of a leader whose log
// appends keep failing.
const stepDownEvery = 5 * time.Second

// appendHealthChanged runs every health tick: when the local log's append
// health flips it re-advertises over gossip (so the others report this
// node unhealthy), and a leader whose appends fail hands leadership over:
// it cannot commit anything, and a re-elected full-disk leader would keep
// the cluster from writing.
func (n *Node) appendHealthChanged(leader bool) {
	failing := n.health.appendFailing.Load()
	if failing != n.advertisedAppendFail.Load() {
		n.advertisedAppendFail.Store(failing)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			_ = n.ml.UpdateNode(time.Second)
		}()
	}
	if !failing || !leader {
		return
	}
	if t := time.Now().UnixNano(); t-n.lastStepDown.Load() >= int64(stepDownEvery) {
		n.lastStepDown.Store(t)
		n.log.Warn("raftnode: this leader's log appends fail; transferring leadership")
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.raft.LeadershipTransfer().Error(); err != nil {
				n.log.Warn("raftnode: leadership transfer after failing appends", "err", err)
			}
		}()
	}
}
