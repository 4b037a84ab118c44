package raftnode

import (
	"cmp"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// bootstrapIfExpected runs each membership tick until this node holds
// Raft state: a configuration read with servers sets the advertised
// "has Raft state" flag; with BootstrapExpect, the node tries to
// bootstrap (contract §8).
func (n *Node) bootstrapIfExpected() {
	if n.hasState.Load() {
		return
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil && len(f.Configuration().Servers) > 0 {
		n.setHasState()
	} else if n.cfg.BootstrapExpect > 0 {
		n.tryBootstrap()
	}
}

func (n *Node) setHasState() {
	if !n.hasState.Swap(true) {
		n.ml.UpdateNode(time.Second)
	}
}

// tryBootstrap bootstraps with planBootstrap's configuration, if any, and
// then advertises that this node holds Raft state.
func (n *Node) tryBootstrap() {
	servers := planBootstrap(n.cfg.NodeID, n.gossipSnapshot(), n.cfg.BootstrapExpect)
	if servers == nil {
		return
	}
	err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if err != nil && err != raft.ErrCantBootstrap {
		n.log.Error("raftnode: bootstrap failed", "err", err)
		return
	}
	ids := make([]string, len(servers))
	for i, s := range servers {
		ids[i] = string(s.ID)
	}
	n.log.Info("raftnode: bootstrapped cluster", "servers", ids, "already", err == raft.ErrCantBootstrap)
	n.setHasState()
}

// planBootstrap is the configuration a server without Raft state (self)
// bootstraps with, or nil while it waits: it bootstraps when expect
// servers without Raft state (self included) see each other alive in
// gossip g and no visible server holds state. Every such server
// bootstraps with the identical configuration: all visible servers, as
// voters, sorted by id; raft's BootstrapCluster writes the same entry at
// index 1 on each, so they form one cluster whatever the start order. A
// server that sees a peer with state waits to be added instead. Pure
// (membershipplan.go).
func planBootstrap(self string, g map[string]member, expect int) []raft.Server {
	if expect <= 0 {
		return nil
	}
	servers := []raft.Server{}
	for id, m := range g {
		if !m.alive {
			continue
		}
		if m.meta.State && id != self {
			return nil // a cluster exists: its leader will add us
		}
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(m.meta.Raft)})
	}
	if _, ok := g[self]; !ok || len(servers) < expect {
		return nil
	}
	slices.SortFunc(servers, func(a, b raft.Server) int { return cmp.Compare(a.ID, b.ID) })
	return servers
}
