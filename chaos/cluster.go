package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/proccluster"

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
	proc *proccluster.Proc

	mu    sync.Mutex
	state NodeState
	gen   uint64 // bumped on every state change

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
	// Flags are added to every server's command line (e.g.
	// "--raft-timing", "wan").
	Flags []string
	// DelayRaft routes every node's Raft traffic through a DelayProxy of
	// its own (loopback only): a node advertises its proxy as its Raft
	// address, so all Raft traffic into it passes the proxy's delay line
	// in both directions (Cluster.Proxies).
	DelayRaft bool
	// DiskLimit, when > 0, puts each node's data directory on a tmpfs of
	// this many bytes (root only), so a full disk can be made on purpose
	// (Cluster.FillDisk).
	DiskLimit int64
	// Logger for harness events.
	Logger *slog.Logger
}

// Cluster is a set of real server processes.
type Cluster struct {
	opts  Options
	log   *slog.Logger
	net   *Network
	procs *proccluster.Cluster
	Nodes []*Node
	// Proxies are the nodes' Raft delay proxies (Options.DelayRaft), by
	// node index.
	Proxies []*DelayProxy
	// mounts are the tmpfs data directories (Options.DiskLimit).
	mounts []string
}

// NewCluster allocates addresses (and namespaces when opts.Netns) and
// starts every node; they bootstrap one cluster with --bootstrap-expect.
func NewCluster(ctx context.Context, opts Options) (*Cluster, error) {
	c := &Cluster{opts: opts, log: opts.Logger, procs: proccluster.New(proccluster.Options{Binary: opts.Binary})}
	if opts.Netns {
		w, err := NewNetwork(opts.Nodes, c.log)
		if err != nil {
			return nil, err
		}
		c.net = w
	}
	var addrs []proccluster.Node
	for i := 0; i < opts.Nodes; i++ {
		id := "n" + strconv.Itoa(i+1)
		a := proccluster.Node{ID: id, DataDir: filepath.Join(opts.Dir, id)}
		if opts.DiskLimit > 0 {
			if err := c.mountData(a.DataDir, opts.DiskLimit); err != nil {
				c.Close()
				return nil, err
			}
		}
		if c.net != nil {
			h := c.net.Addr(i)
			a.GRPC, a.Raft, a.Gossip = h+":7401", h+":7402", h+":7403"
		} else {
			var err error
			if a, err = proccluster.LoopbackNode(id, a.DataDir); err != nil {
				return nil, err
			}
			a.HTTP = "" // no metrics listener: nothing here reads it
		}
		addrs = append(addrs, a)
	}
	flags := []string{"--log-format", "json", "--shutdown-timeout", "5s"}
	if opts.FastTiming {
		flags = append(flags, "--fast-timing")
	}
	flags = append(flags, opts.Flags...)
	if opts.DelayRaft && c.net != nil {
		return nil, fmt.Errorf("chaos: DelayRaft runs on loopback only")
	}
	for i, a := range addrs {
		nodeFlags := flags
		if opts.DelayRaft {
			p, err := NewDelayProxy("127.0.0.1:0", a.Raft)
			if err != nil {
				c.Close()
				return nil, err
			}
			c.Proxies = append(c.Proxies, p)
			nodeFlags = append(append([]string{}, flags...), "--raft-advertise", p.Addr())
		}
		spec := proccluster.Spec{Name: a.ID, Args: proccluster.ServerArgs(a, opts.Nodes, addrs, nodeFlags...),
			LogPath: filepath.Join(opts.Dir, a.ID+".log")}
		if c.net != nil {
			spec.Prefix = c.net.Prefix(i)
		}
		n := &Node{ID: a.ID, Index: i, c: c, GRPC: a.GRPC, Raft: a.Raft, Gossip: a.Gossip, DataDir: a.DataDir,
			LogPath: spec.LogPath, proc: c.procs.Add(spec)}
		cc, err := grpc.NewClient(n.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.Close()
			return nil, err
		}
		n.conn, n.IC, n.CL = cc, pb.NewInferenceCacheClient(cc), pb.NewClusterClient(cc)
		c.Nodes = append(c.Nodes, n)
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
	if err := n.proc.Start(); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	n.setState(Starting)
	c.log.Info("chaos: started", "node", n.ID, "pid", n.proc.Pid())
	return nil
}

// WaitUp waits until n answers Cluster.Status and marks it Up.
func (c *Cluster) WaitUp(ctx context.Context, n *Node, limit time.Duration) error {
	exited := false
	err := poll.Until(ctx, limit, 50*time.Millisecond, func() (bool, string) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := n.CL.Status(cctx, &pb.StatusRequest{})
		cancel()
		if err == nil {
			return true, ""
		}
		select {
		case <-n.proc.Done():
			exited = true
			return true, "" // stop asking; reported below
		default:
		}
		return false, fmt.Sprintf("%s does not answer Status: %v", n.ID, err)
	})
	switch {
	case exited:
		return fmt.Errorf("chaos: %s exited while starting (see %s)", n.ID, n.LogPath)
	case err != nil:
		return fmt.Errorf("chaos: %w", err)
	}
	n.setState(Up)
	return nil
}

// Kill sends SIGKILL to n and waits until the process is gone.
func (c *Cluster) Kill(n *Node) {
	n.setState(Down)
	n.proc.Kill()
	c.log.Info("chaos: killed", "node", n.ID)
}

// Pause sends SIGSTOP to n.
func (c *Cluster) Pause(n *Node) error {
	n.setState(Paused)
	c.log.Info("chaos: paused", "node", n.ID)
	return n.proc.Pause()
}

// Resume sends SIGCONT to n (state Starting until WaitUp).
func (c *Cluster) Resume(n *Node) error {
	err := n.proc.Resume()
	n.setState(Starting)
	c.log.Info("chaos: resumed", "node", n.ID)
	return err
}

// Wipe empties n's data directory (n must be Down); the directory itself
// stays, since it may be a mount point.
func (c *Cluster) Wipe(n *Node) error {
	if s, _ := n.State(); s != Down {
		return fmt.Errorf("chaos: wipe %s while %s", n.ID, s)
	}
	ents, err := os.ReadDir(n.DataDir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(n.DataDir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Close stops every process (SIGTERM, then SIGKILL after 10 s), closes
// the connections and removes the namespaces.
func (c *Cluster) Close() {
	c.procs.StopAll(10 * time.Second)
	for _, n := range c.Nodes {
		n.setState(Down)
		if n.conn != nil {
			n.conn.Close()
		}
	}
	for _, p := range c.Proxies {
		p.Close()
	}
	c.unmountAll()
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

// WaitLeader waits until every Up node (except those in skip) names the
// same leader, one of them that reports itself Leader.
func (c *Cluster) WaitLeader(ctx context.Context, limit time.Duration, skip ...*Node) (*Node, error) {
	var up []*Node
	for _, n := range c.Nodes {
		if s, _ := n.State(); s == Up && !slices.Contains(skip, n) {
			up = append(up, n)
		}
	}
	i, err := proccluster.WaitLeader(ctx, members(up), limit)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	return up[i], nil
}

// WaitSameDigest waits until every node reports the same applied index
// and digest and returns them.
func (c *Cluster) WaitSameDigest(ctx context.Context, limit time.Duration) (*pb.DigestResponse, error) {
	d, err := proccluster.WaitDigests(ctx, members(c.Nodes), limit)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	return d, nil
}

// members are ns as the proccluster waits see them.
func members(ns []*Node) []proccluster.Member {
	ms := make([]proccluster.Member, len(ns))
	for i, n := range ns {
		ms[i] = proccluster.Member{Name: n.ID, Conn: n.conn}
	}
	return ms
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
	var lerr error // from finding the leader again: ends the wait
	err = poll.Until(ctx, time.Until(deadline), 50*time.Millisecond, func() (bool, string) {
		st, err := c.Status(ctx, l)
		if err != nil || st.State != "Leader" {
			if l, lerr = c.WaitLeader(ctx, time.Until(deadline)); lerr != nil {
				return true, "" // stop asking; reported below
			}
			return false, "the leader changed to " + l.ID
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
		return voters == len(c.Nodes) && caught == len(c.Nodes),
			fmt.Sprintf("%d of %d nodes are voters, %d applied the commit index %d and know the leader", voters, len(c.Nodes), caught, target)
	})
	if lerr != nil {
		return lerr
	}
	if err != nil {
		return fmt.Errorf("chaos: cluster not healthy within %v: %w", limit, err)
	}
	return nil
}

func contains(ns []*Node, n *Node) bool { return slices.Contains(ns, n) }
