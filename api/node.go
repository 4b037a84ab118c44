package api

import "github.com/inference-cache/inference-cache/raftnode"

// NewNodeBackend returns the Backend of a raftnode.Node: the node itself,
// whose read state, write results and errors the service consumes as
// they are.
func NewNodeBackend(n *raftnode.Node) Backend { return n }
