package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/inference-cache/inference-cache/internal/digestwait"

	"github.com/inference-cache/inference-cache/internal/freeport"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// NodeState is what the harness last did to a node's process.
type NodeState int

// Node states. Only an Up node is "reachable": its errors count.
const (
	// Down: no process (never started, killed, or stopped).
	Down NodeState = iota
	// Starting: the process runs but has not answered Cluster.Status yet.
	Starting
	// Up: the process answered Status since it was last started or
	// continued.
	Up
	// Paused: the process is stopped with SIGSTOP.
	Paused
)

func (s NodeState) String() string {
	return [...]string{"down", "starting", "up", "paused"}[s]
}

// Node is one server process of a Cluster.
type Node struct {
	// ID is the node's Raft server id (n1, n2, …).
	ID string
	// Index is the node's position in Cluster.Nodes (0-based).
	Index int
	// GRPC, Raft and Gossip are the node's addresses.
	GRPC, Raft, Gossip string
	// DataDir is the node's data directory; LogPath its log file.
	DataDir, LogPath string

	c    *Cluster
	args []string

	mu    sync.Mutex
	state NodeState
	gen   uint64 // bumped on every state change
	cmd   *exec.Cmd
	done  chan struct{}

	conn *grpc.ClientConn
	// IC and CL are gRPC clients of the node (one connection, reused
	// across restarts).
	IC pb.InferenceCacheClient
	CL pb.ClusterClient
}

// State returns the node's state and generation (which changes on every
// state change, so a caller can tell whether the state held throughout a
// call).
func (n *Node) State() (NodeState, uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.state, n.gen
}

func (n *Node) setState(s NodeState) {
	n.mu.Lock()
	n.state = s
	n.gen++
	n.mu.Unlock()
}

// Options configure a Cluster.
type Options struct {
	// Nodes is the cluster size (3 or 5).
	Nodes int
	// Binary is the inference-cache binary to run.
	Binary string
	// Dir receives the data directories and logs.
	Dir string
	// FastTiming passes --fast-timing (loopback Raft timings) to servers;
	// false = the LAN defaults (election after 0.5–1 s of silence).
	FastTiming bool
	// Netns puts each node in its own network namespace (required for
	// partitions).
	Netns bool
	// Logger for harness events.
	Logger *slog.Logger
}

// Cluster is a set of real server processes.
type Cluster struct {
	opts  Options
	log   *slog.Logger
	net   *Network
	Nodes []*Node
}

// NewCluster allocates addresses (and namespaces when opts.Netns) and
// starts every node; they bootstrap one cluster with --bootstrap-expect.
func NewCluster(ctx context.Context, opts Options) (*Cluster, error) {
	c := &Cluster{opts: opts, log: opts.Logger}
	if opts.Netns {
		w, err := NewNetwork(opts.Nodes, c.log)
		if err != nil {
			return nil, err
		}
		c.net = w
	}
	for i := 0; i < opts.Nodes; i++ {
		id := "n" + strconv.Itoa(i+1)
		n := &Node{ID: id, Index: i, c: c, DataDir: filepath.Join(opts.Dir, id), LogPath: filepath.Join(opts.Dir, id+".log")}
		if c.net != nil {
			h := c.net.Addr(i)
			n.GRPC, n.Raft, n.Gossip = h+":7401", h+":7402", h+":7403"
		} else {
			var addrs [3]string
			for j := range addrs {
				a, err := freeport.Addr()
				if err != nil {
					return nil, err
				}
				addrs[j] = a
			}
			n.GRPC, n.Raft, n.Gossip = addrs[0], addrs[1], addrs[2]
		}
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		n.args = []string{"server", "--node-id", n.ID, "--data-dir", n.DataDir, "--grpc-addr", n.GRPC,
			"--raft-addr", n.Raft, "--gossip-addr", n.Gossip, "--http-addr", "",
			"--bootstrap-expect", strconv.Itoa(opts.Nodes), "--log-format", "json", "--shutdown-timeout", "5s"}
		if opts.FastTiming {
			n.args = append(n.args, "--fast-timing")
		}
		for _, o := range c.Nodes {
			if o != n {
				n.args = append(n.args, "--join", o.Gossip)
			}
		}
		cc, err := grpc.NewClient(n.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.Close()
			return nil, err
		}
		n.conn, n.IC, n.CL = cc, pb.NewInferenceCacheClient(cc), pb.NewClusterClient(cc)
	}
	for _, n := range c.Nodes {
		if err := c.Start(n); err != nil {
			c.Close()
			return nil, err
		}
	}
	for _, n := range c.Nodes {
		if err := c.WaitUp(ctx, n, 60*time.Second); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Netns reports whether the nodes run in network namespaces.
func (c *Cluster) Netns() bool { return c.net != nil }

// Network returns the namespaces (nil without Netns).
func (c *Cluster) Network() *Network { return c.net }

// Start starts n's process (state Starting until WaitUp sees it answer).
func (c *Cluster) Start(n *Node) error {
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	var cmd *exec.Cmd
	if c.net != nil {
		cmd = c.net.Command(n.Index, c.opts.Binary, n.args...)
	} else {
		cmd = exec.Command(c.opts.Binary, n.args...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("chaos: start %s: %w", n.ID, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.state = Starting
	n.gen++
	n.mu.Unlock()
	c.log.Info("chaos: started", "node", n.ID, "pid", cmd.Process.Pid)
	return nil
}

// WaitUp waits until n answers Cluster.Status and marks it Up.
func (c *Cluster) WaitUp(ctx context.Context, n *Node, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := n.CL.Status(cctx, &pb.StatusRequest{})
		cancel()
		if err == nil {
			n.setState(Up)
			return nil
		}
		n.mu.Lock()
		done := n.done
		n.mu.Unlock()
		select {
		case <-done:
			return fmt.Errorf("chaos: %s exited while starting (see %s)", n.ID, n.LogPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("chaos: %s did not answer Status within %v", n.ID, limit)
}

// signal sends sig to n's process.
func (n *Node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return errors.New("chaos: " + n.ID + " has no process")
	}
	return cmd.Process.Signal(sig)
}

// Kill sends SIGKILL to n and waits until the process is gone.
func (c *Cluster) Kill(n *Node) {
	n.setState(Down)
	_ = n.signal(syscall.SIGCONT) // a paused process dies either way; be sure
	_ = n.signal(syscall.SIGKILL)
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done != nil {
		<-done
	}
	c.log.Info("chaos: killed", "node", n.ID)
}

// Pause sends SIGSTOP to n.
func (c *Cluster) Pause(n *Node) error {
	n.setState(Paused)
	c.log.Info("chaos: paused", "node", n.ID)
	return n.signal(syscall.SIGSTOP)
}

// Resume sends SIGCONT to n (state Starting until WaitUp).
func (c *Cluster) Resume(n *Node) error {
	err := n.signal(syscall.SIGCONT)
	n.setState(Starting)
	c.log.Info("chaos: resumed", "node", n.ID)
	return err
}

// Wipe removes n's data directory (n must be Down).
func (c *Cluster) Wipe(n *Node) error {
	if s, _ := n.State(); s != Down {
		return fmt.Errorf("chaos: wipe %s while %s", n.ID, s)
	}
	return os.RemoveAll(n.DataDir)
}

// Close stops every process (SIGTERM, then SIGKILL after 10 s), closes
// the connections and removes the namespaces.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		_ = n.signal(syscall.SIGCONT)
		_ = n.signal(syscall.SIGTERM)
	}
	for _, n := range c.Nodes {
		n.mu.Lock()
		done := n.done
		n.mu.Unlock()
		if done != nil {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = n.signal(syscall.SIGKILL)
				<-done
			}
		}
		n.setState(Down)
		if n.conn != nil {
			n.conn.Close()
		}
	}
	if c.net != nil {
		c.net.Close()
	}
}

// Status calls Cluster.Status on n with a short timeout.
func (c *Cluster) Status(ctx context.Context, n *Node) (*pb.StatusResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return n.CL.Status(cctx, &pb.StatusRequest{})
}

// Leader returns the node that reports itself Leader and that every other
// Up node (except those in skip) names as leader, or nil.
func (c *Cluster) Leader(ctx context.Context, skip ...*Node) *Node {
	var leader string
	for _, n := range c.Nodes {
		if s, _ := n.State(); s != Up || contains(skip, n) {
			continue
		}
		st, err := c.Status(ctx, n)
		if err != nil || st.LeaderId == "" || (leader != "" && st.LeaderId != leader) {
			return nil
		}
		leader = st.LeaderId
	}
	for _, n := range c.Nodes {
		if n.ID == leader && !contains(skip, n) {
			if st, err := c.Status(ctx, n); err == nil && st.State == "Leader" {
				return n
			}
		}
	}
	return nil
}

// WaitLeader waits until Leader returns a node.
func (c *Cluster) WaitLeader(ctx context.Context, limit time.Duration, skip ...*Node) (*Node, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if l := c.Leader(ctx, skip...); l != nil {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("chaos: no agreed leader within %v", limit)
}

// WaitSameDigest waits until every node reports the same applied index
// and digest and returns them.
func (c *Cluster) WaitSameDigest(ctx context.Context, limit time.Duration) (*pb.DigestResponse, error) {
	ms := make([]digestwait.Member, len(c.Nodes))
	for i, n := range c.Nodes {
		ms[i] = digestwait.Member{Name: n.ID, CL: n.CL}
	}
	d, err := digestwait.Wait(ctx, ms, limit, 50*time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	return d, nil
}

// WaitHealthy waits until every node is Up, one leader is agreed, every
// node is a voter in the leader's configuration, and every node's applied
// index reached the leader's commit index as of the start of the wait.
func (c *Cluster) WaitHealthy(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, n := range c.Nodes {
		if s, _ := n.State(); s != Up {
			if err := c.WaitUp(ctx, n, time.Until(deadline)); err != nil {
				return err
			}
		}
	}
	l, err := c.WaitLeader(ctx, time.Until(deadline))
	if err != nil {
		return err
	}
	var target uint64
	for time.Now().Before(deadline) {
		st, err := c.Status(ctx, l)
		if err != nil || st.State != "Leader" {
			if l, err = c.WaitLeader(ctx, time.Until(deadline)); err != nil {
				return err
			}
			continue
		}
		if target == 0 {
			target = st.CommitIndex
		}
		voters := 0
		for _, m := range st.Members {
			if m.Suffrage == "Voter" {
				voters++
			}
		}
		caught := 0
		for _, n := range c.Nodes {
			if s, err := c.Status(ctx, n); err == nil && s.AppliedIndex >= target && s.LeaderId != "" {
				caught++
			}
		}
		if voters == len(c.Nodes) && caught == len(c.Nodes) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("chaos: cluster not healthy within %v", limit)
}

func contains(ns []*Node, n *Node) bool {
	for _, x := range ns {
		if x == n {
			return true
		}
	}
	return false
}
