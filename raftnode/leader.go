package raftnode

import (
	"context"
	"time"
)

// leaderLoop drains raft's NotifyCh (buffered, so no transition is lost;
// contract §13.4) and runs leader duties only after a Barrier proves every
// earlier entry is applied locally.
func (n *Node) leaderLoop(notify <-chan bool) {
	defer n.wg.Done()
	stop := func() {}
	defer func() { stop() }()
	for {
		select {
		case isLeader := <-notify:
			stop()
			stop = func() {}
			n.leaderReady.Store(false)
			if h := n.cfg.Hooks.OnLeader; h != nil && !isLeader {
				h(false)
			}
			if isLeader {
				ctx, cancel := context.WithCancel(context.Background())
				stop = cancel
				n.wg.Add(1)
				go n.leaderDuties(ctx)
			}
		case <-n.shutdownCh:
			return
		}
	}
}

func (n *Node) leaderDuties(ctx context.Context) {
	defer n.wg.Done()
	start := time.Now()
	if n.watch != nil {
		// Heartbeat answers count from this term on: one left from an
		// earlier term of this node's would make a follower look silent for
		// that long, none at all would hide one that never answers.
		n.watch.restartAnswers(start)
	}
	for {
		err := n.raft.Barrier(barrierTimeout).Error()
		if err == nil {
			break
		}
		n.log.Warn("raftnode: barrier after election failed", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-n.shutdownCh:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	n.leaderReady.Store(true)
	n.log.Info("raftnode: leader ready", "term", n.raft.CurrentTerm(), "barrier", time.Since(start), "applied_index", n.fsm.AppliedIndex())
	if h := n.cfg.Hooks.OnLeader; h != nil {
		h(true)
	}
	select {
	case n.kick <- struct{}{}:
	default:
	}
	if n.cfg.ExpireInterval < 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(n.cfg.ExpireInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.shutdownCh:
			return
		case <-t.C:
			// The leader's clock goes into the command, so every node
			// expires the same residencies (contract §6.7), bounded by what the
			// index holds (expireNow).
			cmd := expireBytes(n.NewRequestID(), n.expireNow(n.wallNow(expireClock).Add(n.ClockCorrection()).UnixMilli()))
			c, cancel := context.WithTimeout(ctx, n.cfg.ExpireInterval)
			if _, err := n.submitLocal(c, cmd); err != nil && ctx.Err() == nil {
				n.log.Warn("raftnode: expire command failed", "err", err)
			}
			cancel()
		}
	}
}

// ExpireClockMargin bounds the time an expire command carries: at most
// this far past the newest observation the index holds (engines' event
// times and the subscribers' stats, which arrive every few seconds while
// a fleet lives). A leader whose clock runs minutes ahead would otherwise
// expire every residency at once on every node, deterministically and
// wrongly. The cost: in a fleet that stopped reporting altogether,
// residencies seen in the last TTL − margin before it stopped stay until
// reports resume.
const ExpireClockMargin = time.Minute

// expireClock is the leader's clock for expire commands when
// Config.Clock is nil; tests set it (export_test.go) to run a leader whose
// clock is off.
var expireClock = time.Now

// wallNow is Config.Clock's time, or def's when Config.Clock is nil.
func (n *Node) wallNow(def func() time.Time) time.Time {
	if n.cfg.Clock != nil {
		return n.cfg.Clock()
	}
	return def()
}

// expireClampLogEvery rate-limits the warning of a clamped expire.
const expireClampLogEvery = time.Minute

// expireNow is the time the next expire command carries: now, or the
// newest observation plus ExpireClockMargin when now is past that (counted
// in Metrics.ExpireClamped and logged at most once a minute).
func (n *Node) expireNow(now int64) int64 {
	newest := n.fsm.Index().NewestObservedMs()
	limit := newest + ExpireClockMargin.Milliseconds()
	if newest == 0 || now <= limit {
		return now
	}
	n.metrics.expireClamped.Add(1)
	if t := time.Now().UnixNano(); t-n.expireClampLogged.Load() >= int64(expireClampLogEvery) {
		n.expireClampLogged.Store(t)
		n.log.Warn("raftnode: this leader's clock is ahead of the newest observation in the index; the expire command uses the newest observation plus the margin instead (check this server's clock; logged at most once a minute)",
			"leader_now_ms", now, "newest_observed_ms", newest, "ahead", time.Duration(now-newest)*time.Millisecond, "margin", ExpireClockMargin)
	}
	return limit
}
