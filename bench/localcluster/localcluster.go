// Package localcluster starts an embedded inference-cache cluster inside
// the calling process: N real raftnode nodes (Raft over loopback TCP,
// memberlist gossip, bbolt stores in a temporary directory) each with its
// own gRPC server (the api package's InferenceCache and Cluster services)
// on a random loopback port. `inference-cache bench` uses it when no
// --addr is given; clients talk to it over gRPC exactly as to separate
// server processes.
package localcluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/poll"

	"github.com/inference-cache/inference-cache/api"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// Cluster is a running embedded cluster.
type Cluster struct {
	dir   string
	owned bool // dir was made by Start and is removed by Close
	nodes []*raftnode.Node
	srvs  []*api.Server
	lis   []net.Listener
	addrs []string
}

// Options configure Start; every field is optional.
type Options struct {
	// Nodes is the cluster size (default 3).
	Nodes int
	// Policy is the initial CachePolicy (default policy.Default()).
	Policy *policy.Policy
	// Logger receives the nodes' logs (default: discarded).
	Logger *slog.Logger
	// Dir holds the nodes' data (default: a new temporary directory,
	// removed by Close).
	Dir string
	// ReadyTimeout bounds the wait for an elected leader (default 30s).
	ReadyTimeout time.Duration
}

// Start starts the nodes with loopback timings (raftnode.FastTiming) and
// waits until they agree on a leader. The free ports it picks can be taken
// by another process before the nodes bind them; such a start is retried
// on fresh ports (three tries) when Options.Dir is empty.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	var err error
	for try := 0; try < 3; try++ {
		var c *Cluster
		if c, err = start(ctx, o); err == nil {
			return c, nil
		}
		// A caller's own data directory may hold the failed try's state:
		// retry only in a fresh temporary one.
		if o.Dir != "" || ctx.Err() != nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

func start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	pol := policy.Default()
	if o.Policy != nil {
		pol = o.Policy.Clone()
	}
	c = &Cluster{dir: o.Dir}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "inference-cache-bench-"); err != nil {
			return nil, fmt.Errorf("localcluster: %w", err)
		}
		c.owned = true
	}
	// The error returns below set the named result c to nil: close what
	// was started through a copy.
	started := c
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	type addrs struct{ raft, gossip string }
	as := make([]addrs, o.Nodes)
	for i := range as {
		if as[i].raft, err = freeport.Addr(); err != nil {
			return nil, err
		}
		if as[i].gossip, err = freeport.Addr(); err != nil {
			return nil, err
		}
		l, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			return nil, fmt.Errorf("localcluster: %w", lerr)
		}
		c.lis = append(c.lis, l)
		c.addrs = append(c.addrs, l.Addr().String())
	}
	for i := 0; i < o.Nodes; i++ {
		var join []string
		for j := range as {
			if j != i {
				join = append(join, as[j].gossip)
			}
		}
		id := fmt.Sprintf("bench%d", i+1)
		n, nerr := raftnode.New(raftnode.Config{
			NodeID: id, DataDir: filepath.Join(c.dir, id), RaftAddr: as[i].raft, GossipAddr: as[i].gossip,
			GRPCAddr: c.addrs[i], Join: join, BootstrapExpect: o.Nodes, Policy: pol, Timing: raftnode.FastTiming,
			Logger: o.Logger.With("node", id), RaftLogLevel: slog.LevelError,
		})
		if nerr != nil {
			return nil, fmt.Errorf("localcluster: start %s: %w", id, nerr)
		}
		c.nodes = append(c.nodes, n)
		s := api.NewServer(api.ServerConfig{Node: n, GRPCAddr: c.addrs[i], Logger: o.Logger.With("node", id),
			TmpDir: filepath.Join(c.dir, id, "tmp")})
		c.srvs = append(c.srvs, s)
		go func(l net.Listener) { _ = s.GRPC.Serve(l) }(c.lis[i])
	}
	if err := poll.Until(ctx, o.ReadyTimeout, 20*time.Millisecond, func() (bool, string) {
		return c.ready(), "no agreed leader that finished its barrier"
	}); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	return c, nil
}

// ready: every node names the same leader and the leader is not stale
// (it finished its post-election barrier).
func (c *Cluster) ready() bool {
	leader := ""
	for _, n := range c.nodes {
		st := n.Status()
		if st.LeaderID == "" || (leader != "" && st.LeaderID != leader) {
			return false
		}
		leader = st.LeaderID
	}
	for _, n := range c.nodes {
		if rs := n.ReadState(); rs.Leader && !rs.Stale {
			return true
		}
	}
	return false
}

// Addrs are the nodes' gRPC addresses.
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// Close stops every node and removes the data directory if Start made it.
func (c *Cluster) Close() {
	for _, s := range c.srvs {
		s.GRPC.Stop()
	}
	for _, n := range c.nodes {
		_ = n.Kill()
	}
	for _, l := range c.lis {
		l.Close()
	}
	if c.owned {
		_ = os.RemoveAll(c.dir)
	}
}
