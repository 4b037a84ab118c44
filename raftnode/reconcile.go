package raftnode

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
)

// membershipState is what the membership loop carries from one tick to
// the next for its decisions (membershipplan.go).
type membershipState struct {
	// inConfig maps the configuration's ids at the last tick to the nonce
	// gossip showed for them alive then (trackRemovals).
	inConfig map[string]string
	// removed maps a process removed while it ran to its nonce.
	removed map[string]string
	// deadSince is the dead-server cleanup's record (planMembership).
	deadSince map[string]time.Time
}

// membershipLoop joins the gossip pool, bootstraps when asked to, keeps
// the advertised "has Raft state" flag current and, on the leader,
// reconciles the Raft configuration with gossip. Each tick gathers the
// inputs of the decisions (one configuration read, one gossip snapshot,
// one clock reading), plans (membershipplan.go) and applies the plan.
func (n *Node) membershipLoop() {
	defer n.wg.Done()
	j := gossipJoin{joined: len(n.cfg.Join) == 0, lastRejoin: time.Now()}
	t := time.NewTicker(bootstrapPoll)
	defer t.Stop()
	lastReconcile := time.Time{}
	st := membershipState{removed: map[string]string{}, deadSince: map[string]time.Time{}}
	for {
		kicked := false
		select {
		case <-n.shutdownCh:
			return
		case <-t.C:
		case <-n.kick:
			kicked = true
		}
		n.keepJoined(&j)
		n.bootstrapIfExpected()
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		// One read of the configuration and one gossip snapshot for the
		// removal records and reconcile: a removal reconcile sees missing
		// has been recorded by then.
		cfg := f.Configuration()
		g := n.gossipSnapshot()
		now := time.Now()
		n.fewVoters.Store(countVoters(cfg) < 3)
		pending := n.pendingOpRemovals()
		var settled []string
		st.inConfig, st.removed, settled = noteRemovals(st.inConfig, cfg, g, st.removed, pending, now)
		for _, id := range settled {
			// A newer call for the same id, made since the copy, stays.
			n.opRemoved.CompareAndDelete(id, pending[id])
		}
		if n.leaderReady.Load() && (kicked || now.Sub(lastReconcile) >= reconcileInterval) {
			lastReconcile = now
			n.reconcile(planMembership(membershipInput{
				Self: n.cfg.NodeID, Config: cfg, Gossip: g, Removed: removalRecords(st.removed, n.fsm.Removals()),
				DeadSince: st.deadSince, Now: now, Grace: n.cfg.DeadServerCleanup,
			}), &st)
			n.reconcileRounds.Add(1)
		}
	}
}

// pendingOpRemovals is a copy of n.opRemoved (nil when empty).
func (n *Node) pendingOpRemovals() map[string]opRemoval {
	var p map[string]opRemoval
	n.opRemoved.Range(func(k, v any) bool {
		if p == nil {
			p = map[string]opRemoval{}
		}
		p[k.(string)] = v.(opRemoval)
		return true
	})
	return p
}

// reconcile (leader only) applies one round's changes c through Raft and
// updates st: the one AddVoter, or the dead servers' RemoveServer calls
// in order, stopping at the first that fails (the next round plans
// again from the configuration then).
func (n *Node) reconcile(c membershipChanges, st *membershipState) {
	st.deadSince = c.DeadSince
	if a := c.Add; a != nil {
		if a.Restarted {
			delete(st.removed, a.ID)
			n.log.Info("raftnode: removed server restarted; adding it back", "id", a.ID)
		}
		if err := n.raft.AddVoter(raft.ServerID(a.ID), raft.ServerAddress(a.Address), 0, 5*time.Second).Error(); err != nil {
			n.log.Warn("raftnode: add voter failed", "id", a.ID, "raft", a.Address, "err", err)
			return
		}
		n.log.Info("raftnode: added voter from gossip", "id", a.ID, "raft", a.Address)
		if _, held := n.fsm.Removals()[a.ID]; held && a.Restarted {
			n.forgetRemoval(a.ID)
		}
		return
	}
	for _, id := range c.Remove {
		if err := n.raft.RemoveServer(raft.ServerID(id), 0, 5*time.Second).Error(); err != nil {
			n.log.Warn("raftnode: dead server cleanup failed", "id", id, "err", err)
			return
		}
		delete(st.deadSince, id)
		n.log.Warn("raftnode: removed dead server", "id", id, "grace", n.cfg.DeadServerCleanup, "voters_before", c.Voters)
	}
}

// forgetRemoval drops the log's removal record of id, in the background
// (the membership loop does not wait on a write): the process it kept out
// is gone and a new one under the id is a voter, so the record decides
// nothing more and would only count against fsm.MaxRemovals.
func (n *Node) forgetRemoval(id string) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := n.writeRemoval(ctx, id, ""); err != nil {
			n.log.Warn("raftnode: could not forget the removal record of a re-added server", "id", id, "err", err)
		}
	}()
}
