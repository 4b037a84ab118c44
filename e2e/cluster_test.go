// Package e2e runs the inference-cache binary as real server processes on
// loopback and checks the gRPC API end to end: replication,
// failover under a lookup loop, restart catch-up, bad input, reason codes,
// health and reflection.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/proccluster"
)

var binPath string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// The end-to-end tests build the binary and start processes: each
		// skips in short mode, and startCluster refuses to run without
		// the binary (binPath empty).
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "ic-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "inference-cache")
	build := exec.Command("go", "build", "-o", binPath, "../cmd/inference-cache")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one server process and the test's connection to it.
type proc struct {
	id                             string
	grpc, raft, gossip, http, data string
	args                           []string
	env                            []string
	logPath                        string

	*proccluster.Proc
	conn *grpc.ClientConn
	ic   pb.InferenceCacheClient
	cl   pb.ClusterClient
}

type cluster struct {
	t     *testing.T
	pc    *proccluster.Cluster
	procs []*proc
	// dial are the test's own dial options to every node (TLS, token);
	// none = plaintext.
	dial []grpc.DialOption
}

// startCluster starts n servers that bootstrap one cluster. extra flags go
// to every server. Node 3 (when present) takes its node id and join list
// from INFERENCE_CACHE_* variables to check the environment binding.
//
// The ports are picked free but bound later by the servers; when a server
// lost one to another process ("address already in use"), the whole start
// is retried on fresh ports (three tries), since a half-started cluster
// would fail the test for a reason that has nothing to do with it.
func startCluster(t *testing.T, n int, extra ...string) *cluster {
	t.Helper()
	return startClusterDial(t, n, nil, extra...)
}

// startClusterDial is startCluster for a cluster the test must dial with
// dial (a secured one: TLS credentials, a bearer token).
func startClusterDial(t *testing.T, n int, dial []grpc.DialOption, extra ...string) *cluster {
	t.Helper()
	if binPath == "" {
		t.Fatal("e2e: no binary (short mode does not build it): skip the test when testing.Short()")
	}
	for try := 1; ; try++ {
		c, err := tryStartCluster(t, n, dial, extra...)
		if err == nil {
			t.Cleanup(c.stopAll)
			return c
		}
		lostPort := c.anyLogContains("address already in use")
		c.stopAll()
		if !lostPort || try == 3 {
			c.dumpLogs()
			t.Fatalf("start %d-node cluster (try %d): %v", n, try, err)
		}
		t.Logf("start %d-node cluster, try %d: a port was taken before a server bound it; retrying on fresh ports", n, try)
	}
}

func tryStartCluster(t *testing.T, n int, dial []grpc.DialOption, extra ...string) (*cluster, error) {
	t.Helper()
	c := &cluster{t: t, pc: proccluster.New(proccluster.Options{Binary: binPath}), dial: dial}
	base := t.TempDir()
	var nodes []proccluster.Node
	for i := 0; i < n; i++ {
		nodes = append(nodes, loopbackNode(t, "n"+strconv.Itoa(i+1), base))
	}
	flags := append([]string{"--fast-timing", "--log-format", "json"}, extra...)
	for i, nd := range nodes {
		p := newProc(nd)
		if i == 2 {
			var joins []string
			for _, o := range nodes {
				if o != nd {
					joins = append(joins, o.Gossip)
				}
			}
			p.env = []string{"INFERENCE_CACHE_NODE_ID=" + p.id, "INFERENCE_CACHE_JOIN=" + joins[0] + "," + joins[1]}
			nd.ID = ""
			p.args = proccluster.ServerArgs(nd, n, nil, flags...)
		} else {
			p.args = proccluster.ServerArgs(nd, n, nodes, flags...)
		}
		if err := c.add(p); err != nil {
			return c, err
		}
	}
	if _, err := c.leader(20 * time.Second); err != nil {
		return c, err
	}
	// Ready as a load balancer sees it: with --models-dir a node reports
	// SERVING only once its tokenizers are loaded.
	return c, c.waitServing(30*time.Second, c.procs...)
}

// loopbackNode gives id free loopback ports and a data directory in dir.
func loopbackNode(t *testing.T, id, dir string) proccluster.Node {
	t.Helper()
	nd, err := proccluster.LoopbackNode(id, filepath.Join(dir, id))
	if err != nil {
		t.Fatal(err)
	}
	return nd
}

// newProc is a proc for nd, logging beside its data directory; its
// command line is set by the caller before add.
func newProc(nd proccluster.Node) *proc {
	return &proc{id: nd.ID, grpc: nd.GRPC, raft: nd.Raft, gossip: nd.Gossip, http: nd.HTTP, data: nd.DataDir, logPath: nd.DataDir + ".log"}
}

// add starts p's server (stopped by the cluster's cleanup) and connects
// to it.
func (c *cluster) add(p *proc) error {
	p.Proc = c.pc.Add(proccluster.Spec{Name: p.id, Args: p.args, Env: p.env, LogPath: p.logPath})
	c.procs = append(c.procs, p)
	if err := p.Start(); err != nil {
		return err
	}
	opts := c.dial
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cc, err := grpc.NewClient(p.grpc, opts...)
	if err != nil {
		return err
	}
	p.conn, p.ic, p.cl = cc, pb.NewInferenceCacheClient(cc), pb.NewClusterClient(cc)
	return nil
}

// members are ps as the proccluster waits see them.
func members(ps []*proc) []proccluster.Member {
	ms := make([]proccluster.Member, len(ps))
	for i, p := range ps {
		ms[i] = proccluster.Member{Name: p.id, Conn: p.conn}
	}
	return ms
}

// waitServing waits until every listed node answers SERVING.
func (c *cluster) waitServing(limit time.Duration, ps ...*proc) error {
	return proccluster.WaitServing(context.Background(), members(ps), limit)
}

// anyLogContains reports whether some server's log holds s.
func (c *cluster) anyLogContains(s string) bool {
	for _, p := range c.procs {
		if p.LogContains(s) {
			return true
		}
	}
	return false
}

// start starts p again with the same command line.
func (c *cluster) start(p *proc) {
	c.t.Helper()
	if err := p.Start(); err != nil {
		c.t.Fatal(err)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *cluster) kill(p *proc) { p.Kill() }

// stopAll stops every server (SIGTERM, then SIGKILL after 10 s) and, when
// the test failed, logs the tail of each server's log. It may run more
// than once.
func (c *cluster) stopAll() {
	c.pc.StopAll(10 * time.Second)
	for _, p := range c.procs {
		if p.conn != nil {
			p.conn.Close()
			p.conn = nil
		}
	}
	if c.t.Failed() {
		c.dumpLogs()
	}
}

// dumpLogs logs the last 6000 bytes of each server's log.
func (c *cluster) dumpLogs() {
	for _, p := range c.procs {
		c.t.Logf("--- log tail of %s ---\n%s", p.id, p.LogTail(6000))
	}
}

func ctxT(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// waitLeader waits until every live node agrees on one leader and returns
// it; it fails the test after limit.
func (c *cluster) waitLeader(limit time.Duration, skip ...*proc) *proc {
	c.t.Helper()
	p, err := c.leader(limit, skip...)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// other is the first node that is not p (a follower when p leads).
func (c *cluster) other(p *proc) *proc {
	for _, q := range c.procs {
		if q != p {
			return q
		}
	}
	c.t.Fatalf("no node besides %s", p.id)
	return nil
}

// leader is waitLeader returning an error instead of failing the test.
func (c *cluster) leader(limit time.Duration, skip ...*proc) (*proc, error) {
	var live []*proc
	for _, p := range c.procs {
		if !slices.Contains(skip, p) {
			live = append(live, p)
		}
	}
	i, err := proccluster.WaitLeader(context.Background(), members(live), limit)
	if err != nil {
		return nil, err
	}
	return live[i], nil
}

// waitSameDigest waits until every listed node reports the same
// (applied index, digest) pair and returns it.
func (c *cluster) waitSameDigest(limit time.Duration, ps ...*proc) *pb.DigestResponse {
	c.t.Helper()
	d, err := proccluster.WaitDigests(context.Background(), members(ps), limit)
	if err != nil {
		c.t.Fatal(err)
	}
	return d
}
