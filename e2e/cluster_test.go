// Package e2e runs the inference-cache binary as real server processes on
// loopback and checks the gRPC API end to end (issue 5): replication,
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/digestwait"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/freeport"
)

var binPath string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// The end-to-end tests build the binary and start processes.
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

// proc is one server process.
type proc struct {
	id                             string
	grpc, raft, gossip, http, data string
	args                           []string
	env                            []string
	logPath                        string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	conn *grpc.ClientConn
	ic   pb.InferenceCacheClient
	cl   pb.ClusterClient
}

type cluster struct {
	t     *testing.T
	procs []*proc
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
	for try := 1; ; try++ {
		c, err := tryStartCluster(t, n, extra...)
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

func tryStartCluster(t *testing.T, n int, extra ...string) (*cluster, error) {
	t.Helper()
	c := &cluster{t: t}
	base := t.TempDir()
	for i := 0; i < n; i++ {
		a := func() string { return freeport.MustAddr(t) }
		p := &proc{id: "n" + strconv.Itoa(i+1), grpc: a(), raft: a(), gossip: a(), http: a(),
			data: filepath.Join(base, "n"+strconv.Itoa(i+1))}
		p.logPath = p.data + ".log"
		c.procs = append(c.procs, p)
	}
	for i, p := range c.procs {
		args := []string{"server", "--data-dir", p.data, "--grpc-addr", p.grpc, "--raft-addr", p.raft,
			"--gossip-addr", p.gossip, "--http-addr", p.http, "--bootstrap-expect", strconv.Itoa(n), "--fast-timing",
			"--log-format", "json"}
		args = append(args, extra...)
		var joins []string
		for _, o := range c.procs {
			if o != p {
				joins = append(joins, o.gossip)
			}
		}
		if i == 2 {
			p.env = []string{"INFERENCE_CACHE_NODE_ID=" + p.id, "INFERENCE_CACHE_JOIN=" + joins[0] + "," + joins[1]}
		} else {
			args = append(args, "--node-id", p.id)
			for _, j := range joins {
				args = append(args, "--join", j)
			}
		}
		p.args = args
		c.start(p)
	}
	for _, p := range c.procs {
		cc, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return c, err
		}
		p.conn, p.ic, p.cl = cc, pb.NewInferenceCacheClient(cc), pb.NewClusterClient(cc)
	}
	if _, err := c.leader(20 * time.Second); err != nil {
		return c, err
	}
	// Ready as a load balancer sees it: with --models-dir a node reports
	// SERVING only once its tokenizers are loaded.
	return c, c.waitServing(30*time.Second, c.procs...)
}

// waitServing polls gRPC health until every listed node answers SERVING.
func (c *cluster) waitServing(limit time.Duration, ps ...*proc) error {
	deadline := time.Now().Add(limit)
	for _, p := range ps {
		hc := healthpb.NewHealthClient(p.conn)
		for {
			ctx, cancel := ctxT(time.Second)
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not SERVING after %v: %v %v", p.id, limit, r, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// anyLogContains reports whether some server's log holds s.
func (c *cluster) anyLogContains(s string) bool {
	for _, p := range c.procs {
		if b, err := os.ReadFile(p.logPath); err == nil && strings.Contains(string(b), s) {
			return true
		}
	}
	return false
}

func (c *cluster) start(p *proc) {
	c.t.Helper()
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(binPath, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *cluster) kill(p *proc) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// stopAll stops every server (SIGTERM, then SIGKILL after 10 s) and, when
// the test failed, logs the tail of each server's log. It may run more
// than once.
func (c *cluster) stopAll() {
	for _, p := range c.procs {
		p.mu.Lock()
		cmd := p.cmd
		p.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range c.procs {
		p.mu.Lock()
		cmd, done := p.cmd, p.done
		p.mu.Unlock()
		if cmd == nil {
			continue
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
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
		if b, err := os.ReadFile(p.logPath); err == nil {
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			c.t.Logf("--- log tail of %s ---\n%s", p.id, b)
		}
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

// leader is waitLeader returning an error instead of failing the test.
func (c *cluster) leader(limit time.Duration, skip ...*proc) (*proc, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		leader := ""
		agree := true
		for _, p := range c.procs {
			if contains(skip, p) {
				continue
			}
			ctx, cancel := ctxT(time.Second)
			st, err := p.cl.Status(ctx, &pb.StatusRequest{})
			cancel()
			if err != nil || st.LeaderId == "" || (leader != "" && st.LeaderId != leader) {
				agree = false
				break
			}
			leader = st.LeaderId
		}
		if agree && leader != "" {
			for _, p := range c.procs {
				if p.id == leader {
					return p, nil
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("no agreed leader within %v", limit)
}

func contains(ps []*proc, p *proc) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// waitSameDigest waits until every listed node reports the same
// (applied index, digest) pair and returns it.
func (c *cluster) waitSameDigest(limit time.Duration, ps ...*proc) *pb.DigestResponse {
	c.t.Helper()
	ms := make([]digestwait.Member, len(ps))
	for i, p := range ps {
		ms[i] = digestwait.Member{Name: p.id, CL: p.cl}
	}
	d, err := digestwait.Wait(context.Background(), ms, limit, 50*time.Millisecond)
	if err != nil {
		c.t.Fatal(err)
	}
	return d
}
