// Package clustertest starts real inference-cache raftnode clusters for
// tests: N nodes on 127.0.0.1 with random free ports (Raft TCP, gossip
// TCP+UDP, gRPC), real bbolt files under t.TempDir(), FastTiming. Nodes can
// be started in any order, stopped gracefully, killed, and restarted on the
// same addresses and data directory.
package clustertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/syncbuf"

	"google.golang.org/grpc"

	"github.com/inference-cache/inference-cache/raftnode"
)

// Node is one cluster member's fixed identity plus its running instance.
type Node struct {
	ID, Dir                        string
	RaftAddr, GossipAddr, GRPCAddr string
	// Node is the running instance (nil while stopped).
	*raftnode.Node
	grpc   *grpc.Server
	booted bool // started once: its addresses are in the Raft configuration
}

// Cluster is a set of nodes that share a join list and bootstrap_expect.
type Cluster struct {
	T     testing.TB
	Nodes []*Node
	// Expect is bootstrap_expect for every node (default: initial size).
	Expect int
	// Configure edits each node's Config before New (may be nil).
	Configure func(i int, c *raftnode.Config)
	// ServerOptions, when set, gives the options of node i's gRPC server
	// (the forwarding service), e.g. TLS credentials or interceptors.
	ServerOptions func(i int) []grpc.ServerOption

	mem *syncbuf.Buffer // CLUSTERTEST_LOG=mem: every node's log
}

// New allocates n nodes (not started). The cluster is shut down by
// t.Cleanup.
func New(t testing.TB, n int, configure func(i int, c *raftnode.Config)) *Cluster {
	c := &Cluster{T: t, Expect: n, Configure: configure}
	for i := 0; i < n; i++ {
		c.AddNode()
	}
	t.Cleanup(func() {
		for i := range c.Nodes {
			c.Kill(i)
		}
	})
	return c
}

// memLog is the cluster's in-memory log (CLUSTERTEST_LOG=mem), printed
// when the test fails.
func (c *Cluster) memLog() io.Writer {
	if c.mem == nil {
		c.mem = &syncbuf.Buffer{}
		c.T.Cleanup(func() {
			if c.T.Failed() {
				c.T.Logf("the cluster's log:\n%s", c.mem.String())
			}
		})
	}
	return c.mem
}

// AddNode allocates one more node (not started) and returns its position.
func (c *Cluster) AddNode() int {
	i := len(c.Nodes)
	nd := &Node{
		ID:         fmt.Sprintf("n%d", i+1),
		Dir:        filepath.Join(c.T.TempDir(), fmt.Sprintf("n%d", i+1)),
		RaftAddr:   freeport.MustAddr(c.T),
		GossipAddr: freeport.MustAddr(c.T),
		GRPCAddr:   freeport.MustAddr(c.T),
	}
	c.Nodes = append(c.Nodes, nd)
	return i
}

// Config returns node i's Config (before Configure).
func (c *Cluster) Config(i int) raftnode.Config {
	nd := c.Nodes[i]
	var join []string
	for j, o := range c.Nodes {
		if j != i {
			join = append(join, o.GossipAddr)
		}
	}
	lvl := slog.LevelError
	var w io.Writer = os.Stderr
	switch os.Getenv("CLUSTERTEST_LOG") {
	case "":
	case "mem":
		lvl, w = slog.LevelInfo, c.memLog()
	default:
		lvl = slog.LevelInfo
	}
	return raftnode.Config{
		NodeID: nd.ID, DataDir: nd.Dir, RaftAddr: nd.RaftAddr, GossipAddr: nd.GossipAddr, GRPCAddr: nd.GRPCAddr,
		Join: join, BootstrapExpect: c.Expect, Timing: raftnode.FastTiming,
		Logger:       slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})),
		RaftLogLevel: lvl,
	}
}

// Start starts node i (first boot or restart: same command line). A
// first boot that lost one of its probed-free ports to another process
// ("address already in use") is retried on fresh ports, twice at most;
// a restart keeps its addresses, which the Raft configuration holds.
func (c *Cluster) Start(i int) {
	c.T.Helper()
	nd := c.Nodes[i]
	for try := 1; ; try++ {
		err := c.TryStart(i)
		if err == nil {
			return
		}
		if nd.booted || try == 3 || !strings.Contains(err.Error(), "address already in use") {
			c.T.Fatalf("start %s: %v", nd.ID, err)
		}
		c.T.Logf("start %s (try %d): a port was taken before the node bound it; retrying on fresh ports: %v", nd.ID, try, err)
		os.RemoveAll(nd.Dir)
		nd.RaftAddr, nd.GossipAddr, nd.GRPCAddr = freeport.MustAddr(c.T), freeport.MustAddr(c.T), freeport.MustAddr(c.T)
	}
}

// TryStart is Start returning the error.
func (c *Cluster) TryStart(i int) error {
	nd := c.Nodes[i]
	cfg := c.Config(i)
	if c.Configure != nil {
		c.Configure(i, &cfg)
	}
	var lis net.Listener
	var err error
	// The old server may hold the port briefly.
	if perr := poll.Until(context.Background(), time.Second, 20*time.Millisecond, func() (bool, string) {
		lis, err = net.Listen("tcp", nd.GRPCAddr)
		return err == nil, fmt.Sprint(err)
	}); perr != nil {
		return err
	}
	n, err := raftnode.New(cfg)
	if err != nil {
		lis.Close()
		return err
	}
	var sopts []grpc.ServerOption
	if c.ServerOptions != nil {
		sopts = c.ServerOptions(i)
	}
	s := grpc.NewServer(sopts...)
	n.RegisterGRPC(s)
	go s.Serve(lis)
	nd.Node, nd.grpc, nd.booted = n, s, true
	return nil
}

// StartAll starts every node in order.
func (c *Cluster) StartAll() {
	for i := range c.Nodes {
		c.Start(i)
	}
}

// Stop shuts node i down gracefully (leadership transfer, gossip leave).
func (c *Cluster) Stop(i int) { c.stop(i, true) }

// Kill stops node i abruptly (no transfer, no leave).
func (c *Cluster) Kill(i int) { c.stop(i, false) }

func (c *Cluster) stop(i int, graceful bool) {
	nd := c.Nodes[i]
	if nd.Node == nil {
		return
	}
	if graceful {
		nd.Node.Shutdown()
	} else {
		nd.Node.Kill()
	}
	nd.grpc.Stop()
	nd.Node, nd.grpc = nil, nil
}

// Running lists the positions of running nodes.
func (c *Cluster) Running() []int {
	var r []int
	for i, nd := range c.Nodes {
		if nd.Node != nil {
			r = append(r, i)
		}
	}
	return r
}

// WaitLeader waits until every running node agrees on one leader that has
// finished its Barrier, and returns its position.
func (c *Cluster) WaitLeader(timeout time.Duration) int {
	c.T.Helper()
	l := -1
	poll.Eventually(c.T, timeout, 20*time.Millisecond, func() (bool, string) {
		if l = c.agreedLeader(); l >= 0 {
			return true, ""
		}
		var b strings.Builder
		b.WriteString("no agreed leader that finished its barrier:")
		for _, i := range c.Running() {
			st := c.Nodes[i].Status()
			fmt.Fprintf(&b, "\n%s: state %s leader %q term %d members %+v", st.NodeID, st.State, st.LeaderID, st.Term, st.Members)
		}
		return false, b.String()
	})
	return l
}

func (c *Cluster) agreedLeader() int {
	leader := ""
	for _, i := range c.Running() {
		st := c.Nodes[i].Status()
		if st.LeaderID == "" || (leader != "" && st.LeaderID != leader) {
			return -1
		}
		leader = st.LeaderID
	}
	for _, i := range c.Running() {
		if c.Nodes[i].ID == leader && c.Nodes[i].ReadState().Leader && !c.Nodes[i].ReadState().Stale {
			return i
		}
	}
	return -1
}

// WaitApplied waits until every running node applied at least idx.
func (c *Cluster) WaitApplied(idx uint64, timeout time.Duration) {
	c.T.Helper()
	poll.Eventually(c.T, timeout, 10*time.Millisecond, func() (bool, string) {
		ok := true
		var seen []string
		for _, i := range c.Running() {
			ai := c.Nodes[i].ReadState().AppliedIndex
			ok = ok && ai >= idx
			seen = append(seen, fmt.Sprintf("%s applied %d", c.Nodes[i].ID, ai))
		}
		return ok, fmt.Sprintf("not every node applied %d: %s", idx, strings.Join(seen, ", "))
	})
}

// WaitConverged polls every running node's (applied index, digest) until
// all report the same pair and cond (nil = any) holds for it, and returns
// the pair. A periodic command (the expire ticker) moves the index
// between polls; the nodes agree between two ticks.
func (c *Cluster) WaitConverged(timeout time.Duration, cond func(idx, digest uint64) bool) (uint64, uint64) {
	c.T.Helper()
	var idx, dg uint64
	poll.Eventually(c.T, timeout, 10*time.Millisecond, func() (bool, string) {
		same := true
		var seen []string
		for k, i := range c.Running() {
			ai, d := c.Nodes[i].Digest()
			if k == 0 {
				idx, dg = ai, d
			} else if ai != idx || d != dg {
				same = false
			}
			seen = append(seen, fmt.Sprintf("%s: applied %d digest %016x", c.Nodes[i].ID, ai, d))
		}
		return same && (cond == nil || cond(idx, dg)),
			"nodes did not converge on one wanted (applied index, digest): " + strings.Join(seen, ", ")
	})
	return idx, dg
}

// WaitVoters waits until the leader's configuration has want voters and
// returns their ids.
func (c *Cluster) WaitVoters(want int, timeout time.Duration) []string {
	c.T.Helper()
	var ids []string
	poll.Eventually(c.T, timeout, 50*time.Millisecond, func() (bool, string) {
		l := c.agreedLeader()
		if l < 0 {
			return false, fmt.Sprintf("want %d voters, have %v; no agreed leader now", want, ids)
		}
		ids = ids[:0]
		for _, m := range c.Nodes[l].Status().Members {
			if m.Suffrage == "Voter" {
				ids = append(ids, m.ID)
			}
		}
		return len(ids) == want, fmt.Sprintf("want %d voters, have %v", want, ids)
	})
	return ids
}

// Ctx returns a context with timeout d, cancelled at test end.
func (c *Cluster) Ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	c.T.Cleanup(cancel)
	return ctx
}
