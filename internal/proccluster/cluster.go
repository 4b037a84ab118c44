package proccluster

import (
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/inference-cache/inference-cache/internal/freeport"
)

// Options configure a Cluster.
type Options struct {
	// Binary is the inference-cache executable every process runs.
	Binary string
	// OwnProcessGroup starts each process in a process group of its own,
	// so a Ctrl-C in the terminal reaches only the caller, which then
	// stops the servers in order (the dev command).
	OwnProcessGroup bool
	// OnExit, when set, is called once for every process that exits,
	// after its Proc already reports it not running (so OnExit may
	// Start it again). It runs on a goroutine of the Proc's and must not
	// block for long.
	OnExit func(*Proc, Exit)
}

// Cluster is a set of server processes run from one binary.
type Cluster struct {
	opts Options

	mu    sync.Mutex
	procs []*Proc
}

// New makes an empty cluster; Add its processes, then Start them.
func New(opts Options) *Cluster {
	return &Cluster{opts: opts}
}

// Add makes a Proc for spec without starting it.
func (c *Cluster) Add(spec Spec) *Proc {
	p := &Proc{spec: spec, c: c}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

// Procs returns the processes in the order they were added.
func (c *Cluster) Procs() []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Proc(nil), c.procs...)
}

// StopAll stops every running process at once (SIGTERM, so they shut
// down in parallel) and kills those still running after limit. It may be
// called more than once.
func (c *Cluster) StopAll(limit time.Duration) {
	ps := c.Procs()
	for _, p := range ps {
		_ = p.Signal(syscall.SIGCONT) // a paused process cannot act on SIGTERM
		_ = p.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(limit)
	for _, p := range ps {
		p.waitOrKill(deadline)
	}
}

// Node is one server's identity, listen addresses and data directory:
// what its `server` command line is made of.
type Node struct {
	// ID is the Raft server id, which Status reports as leader_id.
	ID string
	// DataDir holds the server's Raft log, snapshots and index.
	DataDir string
	// GRPC, Raft, Gossip and HTTP are host:port listen addresses; an
	// empty HTTP turns the metrics listener off.
	GRPC, Raft, Gossip, HTTP string
}

// LoopbackNode gives id four free loopback ports (gRPC, Raft, gossip,
// HTTP), picked below the ephemeral range so an outgoing connection does
// not take one before the server binds it.
func LoopbackNode(id, dataDir string) (Node, error) {
	var a [4]string
	for i := range a {
		addr, err := freeport.Addr()
		if err != nil {
			return Node{}, fmt.Errorf("proccluster: ports for %s: %w", id, err)
		}
		a[i] = addr
	}
	return Node{ID: id, DataDir: dataDir, GRPC: a[0], Raft: a[1], Gossip: a[2], HTTP: a[3]}, nil
}

// ServerArgs is the `server` command line that makes n one of expect
// voters bootstrapping a cluster, joining the gossip addresses of peers
// (n itself is skipped, so the whole node list may be passed). An empty
// ID leaves --node-id out, for a server that reads it from
// INFERENCE_CACHE_NODE_ID. extra flags come last and so override.
func ServerArgs(n Node, expect int, peers []Node, extra ...string) []string {
	args := []string{"server"}
	if n.ID != "" {
		args = append(args, "--node-id", n.ID)
	}
	args = append(args, "--data-dir", n.DataDir, "--grpc-addr", n.GRPC, "--raft-addr", n.Raft,
		"--gossip-addr", n.Gossip, "--http-addr", n.HTTP, "--bootstrap-expect", fmt.Sprint(expect))
	for _, o := range peers {
		if o.Gossip != n.Gossip {
			args = append(args, "--join", o.Gossip)
		}
	}
	return append(args, extra...)
}
