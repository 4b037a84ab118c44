package raftnode

import (
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Membership decisions, in the style of hashicorp/raft-autopilot: the
// functions in this file are pure. They do no I/O, read no clock, make
// no Raft call and leave their inputs unchanged. The membership loop
// (reconcile.go) gathers their inputs, one configuration read and one
// gossip snapshot per tick, and applies what they return; bootstrap.go
// does the same for planBootstrap. Their rules are tested with the golden
// cases under testdata/membership.

// membershipInput is what one reconcile round decides from.
type membershipInput struct {
	// Self is this node's id: it is never cleaned up.
	Self string
	// Config is the Raft configuration read this tick.
	Config raft.Configuration
	// Gossip is the member table by id, as gossip shows it this tick.
	Gossip map[string]member
	// Removed maps the id of a process removed while it ran to that
	// process's gossip nonce (noteRemovals).
	Removed map[string]string
	// DeadSince maps a server of the configuration to the time it was
	// first seen dead, as the previous round left it.
	DeadSince map[string]time.Time
	// Now is the time of the round.
	Now time.Time
	// Grace is Config.DeadServerCleanup: how long a server stays dead
	// before it is removed; ≤ 0 turns cleanup off.
	Grace time.Duration
}

// voterAdd is a round's AddVoter: a server missing from the
// configuration, a known one with a new Raft address, or a non-voter
// made a voter.
type voterAdd struct {
	ID, Address string
	// Restarted: id has a removal record under another nonce, so the
	// process removed while it ran is gone and this one is a new server;
	// the record is dropped.
	Restarted bool
}

// membershipChanges is what one reconcile round does, in order.
type membershipChanges struct {
	// Add, when set, is the round's only change: the next round decides
	// from the configuration it produced. Remove is then empty.
	Add *voterAdd
	// Remove lists the dead servers to remove, in this order, stopping at
	// the first RemoveServer that fails.
	Remove []string
	// DeadSince is the dead-since record the next round starts from; the
	// entry of a server in Remove is dropped once its removal succeeds.
	DeadSince map[string]time.Time
	// Voters is the number of voters in the configuration the round read.
	Voters int
}

// planMembership decides one reconcile round (leader only; contract §8):
//
//   - An alive gossip server with a Raft address that is not a voter at
//     that address is added as a voter, the lowest id first, one per
//     round. A process removed while it ran (in.Removed, same nonce) is
//     left out; a new process under its id is added (Restarted).
//   - Otherwise, with in.Grace > 0, every server of the configuration but
//     this one that gossip does not show alive is dead from the earlier of
//     the time recorded and the time gossip saw it die (now for one gossip
//     has never seen); those dead for at least in.Grace are removed in id
//     order, at most CleanupBudget of them.
func planMembership(in membershipInput) membershipChanges {
	c := membershipChanges{DeadSince: maps.Clone(in.DeadSince), Voters: countVoters(in.Config)}
	if c.DeadSince == nil {
		c.DeadSince = map[string]time.Time{}
	}
	if c.Add = planAdd(in); c.Add != nil || in.Grace <= 0 {
		return c
	}
	c.Remove = planCleanup(in, c.DeadSince, c.Voters)
	return c
}

// planAdd is the AddVoter of a round, or nil.
func planAdd(in membershipInput) *voterAdd {
	inCfg := make(map[string]raft.Server, len(in.Config.Servers))
	for _, s := range in.Config.Servers {
		inCfg[string(s.ID)] = s
	}
	for _, id := range slices.Sorted(maps.Keys(in.Gossip)) {
		m := in.Gossip[id]
		if !m.alive || m.meta.Raft == "" {
			continue
		}
		s, ok := inCfg[id]
		if ok && string(s.Address) == m.meta.Raft && s.Suffrage == raft.Voter {
			continue
		}
		restarted := false
		if nonce, was := in.Removed[id]; !ok && was {
			if nonce == m.meta.Nonce {
				continue // the process an operator removed: still running
			}
			restarted = true
		}
		return &voterAdd{ID: id, Address: m.meta.Raft, Restarted: restarted}
	}
	return nil
}

// planCleanup updates deadSince for the servers of the configuration and
// returns those to remove this round.
func planCleanup(in membershipInput, deadSince map[string]time.Time, voters int) []string {
	var dead []string
	inCfg := make(map[string]bool, len(in.Config.Servers))
	for _, s := range in.Config.Servers {
		id := string(s.ID)
		inCfg[id] = true
		if id == in.Self {
			continue
		}
		m, seen := in.Gossip[id]
		switch {
		case seen && m.alive:
			delete(deadSince, id)
			continue
		case seen:
			// A death seen at an earlier round counts, though the server
			// came back and died again between two rounds.
			if t, ok := deadSince[id]; !ok || m.since.Before(t) {
				deadSince[id] = m.since
			}
		default:
			if _, ok := deadSince[id]; !ok {
				deadSince[id] = in.Now
			}
		}
		if in.Now.Sub(deadSince[id]) >= in.Grace {
			dead = append(dead, id)
		}
	}
	for id := range deadSince {
		if !inCfg[id] {
			delete(deadSince, id)
		}
	}
	slices.Sort(dead)
	if b := CleanupBudget(voters, len(dead)); b > 0 {
		return dead[:b]
	}
	return nil
}

// CleanupBudget is how many of dead servers one cleanup round may remove
// from a configuration with voters voters: never more than (voters−1)/2
// at once and never below 3 voters (contract §8).
func CleanupBudget(voters, dead int) int {
	b := min(dead, (voters-1)/2, voters-3)
	return max(b, 0)
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

// noteRemovals is the removal bookkeeping of one membership tick, on
// every node: trackRemovals, then takeOpRemovals of the RemoveServer
// calls pending on this node. It returns the configuration's ids with
// their nonces for the next tick, the removal records after this tick,
// and the pending calls that are settled (to be forgotten).
func noteRemovals(prev map[string]string, cfg raft.Configuration, g map[string]member, removed map[string]string,
	pending map[string]opRemoval, now time.Time) (cur, next map[string]string, settled []string) {
	next = maps.Clone(removed)
	if next == nil {
		next = map[string]string{}
	}
	cur = trackRemovals(prev, cfg, g, next)
	return cur, next, takeOpRemovals(pending, cur, next, now)
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
// started after the removal (or restarted), or one whose ticks never saw
// the server in the configuration alive, has none; the record RemoveServer
// writes through the log covers those (removalRecords). A server whose
// meta carries no nonce (an older release) is not recorded.
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

// removalRecords is the removal records a round decides by: those the
// log holds (RemoveServer writes one before the configuration changes,
// contract §8.3), overlaid by this node's own (trackRemovals,
// takeOpRemovals), which are the newer where both name a server. Neither
// map is changed.
func removalRecords(local, logged map[string]string) map[string]string {
	if len(logged) == 0 {
		return local
	}
	out := maps.Clone(logged)
	maps.Copy(out, local)
	return out
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

// takeOpRemovals moves the RemoveServer calls of this node (pending, by
// id) whose server has left the configuration cur into removed, unless
// trackRemovals recorded it already, so the leader that made a removal
// never re-adds the removed process, even when a membership tick missed
// it alive. It returns the ids of the calls that are settled: moved, or
// older than opRemovalTTL with the server still in cur. Sorted by id.
func takeOpRemovals(pending map[string]opRemoval, cur, removed map[string]string, now time.Time) (settled []string) {
	for _, id := range slices.Sorted(maps.Keys(pending)) {
		r := pending[id]
		if _, in := cur[id]; !in {
			if _, done := removed[id]; !done {
				removed[id] = r.nonce
			}
			settled = append(settled, id)
		} else if now.Sub(r.at) > opRemovalTTL {
			settled = append(settled, id)
		}
	}
	return settled
}
