package raftnode

import (
	"slices"
	"time"
)

// Re-joins: memberlist never probes a member it declared dead again, and
// push-pull only reaches live ones, so after a gossip-only partition every
// side can keep the others dead forever while Raft works. While a voter of
// the Raft configuration is missing from the live member table, the node
// joins again, every rejoinEvery (rejoinEveryLocal on loopback), through
// the --join addresses and the missing voters' last gossip addresses.
const (
	rejoinEvery      = 10 * time.Second
	rejoinEveryLocal = 2 * time.Second
	rejoinLogEvery   = time.Minute
)

func (n *Node) rejoinInterval() time.Duration {
	if n.cfg.Timing.LocalGossip {
		return rejoinEveryLocal
	}
	return rejoinEvery
}

// missingVoters lists the servers of the Raft configuration (this one
// aside) that gossip does not report alive, with the gossip addresses
// known for them.
func (n *Node) missingVoters() (ids, addrs []string) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil, nil
	}
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		if id == n.cfg.NodeID {
			continue
		}
		m := n.members[id]
		if m != nil && m.alive {
			continue
		}
		ids = append(ids, id)
		if m != nil && m.gossip != "" {
			addrs = append(addrs, m.gossip)
		}
	}
	return ids, addrs
}

// maybeRejoin starts a gossip join in the background when voters are
// missing (one at a time: a join to an address that drops packets waits
// out memberlist's TCP timeout).
func (n *Node) maybeRejoin() {
	ids, addrs := n.missingVoters()
	if len(ids) == 0 || !n.rejoining.CompareAndSwap(false, true) {
		return
	}
	targets := slices.Clone(n.cfg.Join)
	for _, a := range addrs {
		if !slices.Contains(targets, a) {
			targets = append(targets, a)
		}
	}
	if len(targets) == 0 {
		n.rejoining.Store(false)
		return
	}
	n.rejoins.Add(1)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.rejoining.Store(false)
		k, err := n.ml.Join(targets)
		now := time.Now().UnixNano()
		if last := n.rejoinLogged.Load(); now-last >= int64(rejoinLogEvery) && n.rejoinLogged.CompareAndSwap(last, now) {
			n.log.Info("raftnode: re-joining gossip: voters missing from the member table (logged at most once a minute)",
				"missing", ids, "targets", targets, "contacted", k, "err", err)
		}
	}()
}
