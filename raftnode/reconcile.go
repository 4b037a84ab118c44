package raftnode

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// membershipLoop joins the gossip pool, bootstraps when asked to, keeps
// the advertised "has Raft state" flag current and, on the leader,
// reconciles the Raft configuration with gossip.
func (n *Node) membershipLoop() {
	defer n.wg.Done()
	joined := len(n.cfg.Join) == 0
	lastJoin, lastJoinWarn, lastRejoin := time.Time{}, time.Time{}, time.Now()
	t := time.NewTicker(bootstrapPoll)
	defer t.Stop()
	lastReconcile := time.Time{}
	deadSince := map[string]time.Time{}
	removed := map[string]string{} // trackRemovals
	var inCfg map[string]string    // the configuration's ids at the last tick → gossip nonce then
	for {
		kicked := false
		select {
		case <-n.shutdownCh:
			return
		case <-t.C:
		case <-n.kick:
			kicked = true
		}
		if !joined && n.ml.NumMembers() > 1 {
			// Others joined this node: it is in the pool without its own
			// Join having succeeded (it started first). Losing members
			// later is the re-join's job.
			joined = true
		}
		if !joined && time.Since(lastJoin) > time.Second {
			lastJoin = time.Now()
			if k, err := n.ml.Join(n.cfg.Join); k > 0 {
				joined = true
				n.log.Info("raftnode: joined gossip", "contacted", k)
			} else if err != nil {
				// Peers not up yet is normal at first boot; still
				// failing after joinQuietFor is worth an operator's
				// attention (a wrong gossip key says so here).
				lvl := slog.LevelDebug
				if time.Since(n.started) > joinQuietFor && time.Since(lastJoinWarn) >= joinWarnEvery {
					lvl, lastJoinWarn = slog.LevelWarn, time.Now()
				}
				n.log.Log(context.Background(), lvl, "raftnode: gossip join failed, retrying", "join", n.cfg.Join, "err", err)
			}
		}
		if joined && time.Since(lastRejoin) >= n.rejoinInterval() {
			lastRejoin = time.Now()
			n.maybeRejoin()
		}
		if !n.hasState.Load() {
			if f := n.raft.GetConfiguration(); f.Error() == nil && len(f.Configuration().Servers) > 0 {
				n.setHasState()
			} else if n.cfg.BootstrapExpect > 0 {
				n.tryBootstrap()
			}
		}
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		// One read of the configuration for both: a removal reconcile
		// sees missing has been recorded by then.
		cfg := f.Configuration()
		inCfg = trackRemovals(inCfg, cfg, n.gossipSnapshot(), removed)
		n.fewVoters.Store(countVoters(cfg) < 3)
		n.takeOpRemovals(inCfg, removed)
		if n.leaderReady.Load() && (kicked || time.Since(lastReconcile) >= reconcileInterval) {
			lastReconcile = time.Now()
			n.reconcile(cfg, deadSince, removed)
			n.reconcileRounds.Add(1)
		}
	}
}

// trackRemovals runs on every node, every membership tick: it returns the
// ids of cfg, each with the nonce gossip shows for it alive now ("" when
// not alive or without one), and records in removed (id → nonce) each
// server that left the configuration since prev while gossip showed it
// alive at that previous tick. Dead server cleanup only removes servers
// gossip calls dead, so such a removal is an operator's (RemoveServer) of
// a running process, which reconcile must not undo by adding it back
// while that same process lives. The nonce recorded is the one of the
// previous tick, when the server was still in the configuration: an
// operator or a supervisor that removes a server and starts it again
// wiped within the same tick must not have the new process recorded.
// A new nonce (a node wiped and started again under its id) is a new
// server and is added. An id back in the configuration (an operator's
// AddServer) has its record dropped.
//
// Every node keeps the records, not only the leader, so a follower that
// becomes leader does not re-add either. They live in memory: a node
// started after the removal (or restarted) has none and would re-add a
// removed process still running. A server whose meta carries no nonce (an
// older release) is not recorded.
func trackRemovals(prev map[string]string, cfg raft.Configuration, g map[string]member, removed map[string]string) map[string]string {
	cur := make(map[string]string, len(cfg.Servers))
	for _, s := range cfg.Servers {
		id := string(s.ID)
		cur[id] = ""
		if m, ok := g[id]; ok && m.alive {
			cur[id] = m.meta.Nonce
		}
		delete(removed, id)
	}
	for id, nonce := range prev {
		if _, still := cur[id]; still || nonce == "" {
			continue
		}
		removed[id] = nonce
	}
	return cur
}

// countVoters is the number of voters in cfg.
func countVoters(cfg raft.Configuration) int {
	v := 0
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			v++
		}
	}
	return v
}

// opRemoval is a RemoveServer this node made: the removed process's
// gossip nonce, and when.
type opRemoval struct {
	nonce string
	at    time.Time
}

// opRemovalTTL drops a RemoveServer record whose removal never showed in
// the configuration (it failed).
const opRemovalTTL = 30 * time.Second

// takeOpRemovals moves the RemoveServer calls of this node whose server has
// left the configuration cur into removed (the same records trackRemovals
// keeps), so the leader that made a removal never re-adds the removed
// process, even when a membership tick missed it alive.
func (n *Node) takeOpRemovals(cur map[string]string, removed map[string]string) {
	n.opRemoved.Range(func(k, v any) bool {
		id, r := k.(string), v.(opRemoval)
		if _, in := cur[id]; !in {
			if _, done := removed[id]; !done {
				removed[id] = r.nonce
			}
			n.opRemoved.Delete(id)
		} else if time.Since(r.at) > opRemovalTTL {
			n.opRemoved.Delete(id)
		}
		return true
	})
}

// reconcile (leader only) adds alive gossip servers missing from the Raft
// configuration cfg as voters (or updates a changed address), except a
// process removed while running (removed, see trackRemovals), and, when
// DeadServerCleanup > 0, removes servers dead for longer than the grace
// period within the safety rules of SPEC 8.
func (n *Node) reconcile(cfg raft.Configuration, deadSince map[string]time.Time, removed map[string]string) {
	inCfg := map[string]raft.Server{}
	voters := 0
	for _, s := range cfg.Servers {
		inCfg[string(s.ID)] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	g := n.gossipSnapshot()
	ids := make([]string, 0, len(g))
	for id := range g {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		m := g[id]
		if !m.alive || m.meta.Raft == "" {
			continue
		}
		s, ok := inCfg[id]
		if ok && string(s.Address) == m.meta.Raft && s.Suffrage == raft.Voter {
			continue
		}
		if nonce, was := removed[id]; !ok && was {
			if nonce == m.meta.Nonce {
				continue // the process an operator removed: still running
			}
			delete(removed, id) // restarted since: a new server
			n.log.Info("raftnode: removed server restarted; adding it back", "id", id)
		}
		err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(m.meta.Raft), 0, 5*time.Second).Error()
		if err != nil {
			n.log.Warn("raftnode: add voter failed", "id", id, "raft", m.meta.Raft, "err", err)
			return
		}
		n.log.Info("raftnode: added voter from gossip", "id", id, "raft", m.meta.Raft)
		return // one change per round; the next round sees the new config
	}

	if n.cfg.DeadServerCleanup <= 0 {
		return
	}
	now := time.Now()
	var dead []string
	for id := range inCfg {
		if id == n.cfg.NodeID {
			continue
		}
		m, seen := g[id]
		switch {
		case seen && m.alive:
			delete(deadSince, id)
			continue
		case seen:
			if _, ok := deadSince[id]; !ok || m.since.Before(deadSince[id]) {
				deadSince[id] = m.since
			}
		default:
			if _, ok := deadSince[id]; !ok {
				deadSince[id] = now
			}
		}
		if now.Sub(deadSince[id]) >= n.cfg.DeadServerCleanup {
			dead = append(dead, id)
		}
	}
	for id := range deadSince {
		if _, ok := inCfg[id]; !ok {
			delete(deadSince, id)
		}
	}
	slices.Sort(dead)
	budget := CleanupBudget(voters, len(dead))
	for _, id := range dead[:budget] {
		if err := n.raft.RemoveServer(raft.ServerID(id), 0, 5*time.Second).Error(); err != nil {
			n.log.Warn("raftnode: dead server cleanup failed", "id", id, "err", err)
			return
		}
		delete(deadSince, id)
		n.log.Warn("raftnode: removed dead server", "id", id, "grace", n.cfg.DeadServerCleanup, "voters_before", voters)
	}
}

// CleanupBudget is how many of dead servers one cleanup round may remove
// from a configuration with voters voters: never more than (voters−1)/2
// at once and never below 3 voters (SPEC 8).
func CleanupBudget(voters, dead int) int {
	b := min(dead, (voters-1)/2, voters-3)
	return max(b, 0)
}
