package raftnode

import (
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

func (n *Node) setHasState() {
	if !n.hasState.Swap(true) {
		n.ml.UpdateNode(time.Second)
	}
}

// tryBootstrap bootstraps when BootstrapExpect servers without Raft state
// (this one included) see each other and no visible server holds state.
// Every such server bootstraps with the identical configuration: all
// visible servers sorted by id; raft's BootstrapCluster writes the same
// entry at index 1 on each, so they form one cluster whatever the start
// order. A server that sees a peer with state waits to be added instead.
func (n *Node) tryBootstrap() {
	g := n.gossipSnapshot()
	servers := []raft.Server{}
	for id, m := range g {
		if !m.alive {
			continue
		}
		if m.meta.State && id != n.cfg.NodeID {
			return // a cluster exists: its leader will add us
		}
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(m.meta.Raft)})
	}
	if _, ok := g[n.cfg.NodeID]; !ok || len(servers) < n.cfg.BootstrapExpect {
		return
	}
	slices.SortFunc(servers, func(a, b raft.Server) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
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
