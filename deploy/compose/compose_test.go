// Package compose holds the test of the docker compose deployment
// (docker-compose.yml beside this file): a real 3-node cluster of the
// inference-cache image, driven from the host over the published ports.
//
// The test starts containers, so it runs only when IC_COMPOSE_TEST=1 (set by
// `make compose-test`, which first builds the image) and skips with a message
// when `docker info` fails. It takes one to three minutes.
package compose

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/freeport"
	"github.com/inference-cache/inference-cache/internal/poll"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

const (
	model  = "qwen3-8b"
	tenant = "team-a"
	scheme = "vllm"
	// Timeouts of the LAN Raft timings the image runs with.
	formTimeout     = 90 * time.Second
	electionTimeout = 30 * time.Second
	convergeTimeout = 60 * time.Second
)

// node is one compose service as the host sees it.
type node struct {
	service   string // node1
	ip        string // its fixed address on the cluster network
	grpcPort  int
	httpPort  int
	conn      *grpc.ClientConn
	ic        pb.InferenceCacheClient
	cl        pb.ClusterClient
	container string // container id
}

type stack struct {
	t       *testing.T
	project string
	compose []string // "docker-compose" or "docker", "compose"
	env     []string
	nodes   []*node
}

func TestCompose(t *testing.T) {
	if os.Getenv("IC_COMPOSE_TEST") != "1" {
		t.Skip("compose test: starts containers; run it with `make compose-test` (sets IC_COMPOSE_TEST=1)")
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("compose test skipped: `docker info` failed (no usable Docker daemon): %v\n%s", err, firstLines(out, 5))
	}
	s := up(t)

	// Ingest through every node (followers forward to the leader), then
	// look every chain up on every node.
	chains := map[string][]uint32{}
	for i, n := range s.nodes {
		replica := fmt.Sprintf("vllm-%d", i)
		chains[replica] = toks(10000*(i+1), 128)
		s.ingest(n, "seed-"+replica, stored(replica, chains[replica]))
	}
	s.waitSameDigest(convergeTimeout, s.nodes...)
	s.expectChains(chains, s.nodes...)

	t.Run("LeaderKilled", func(t *testing.T) { s.killLeader(t, chains) })
	t.Run("PartitionAndHeal", func(t *testing.T) { s.partition(t, chains) })
	t.Run("RestartKeepsData", func(t *testing.T) { s.restart(t, chains) })
	t.Run("ReplaceNodeWithEmptyVolume", func(t *testing.T) { s.replace(t, chains) })
}

// up brings the stack up under a fresh project name on free host ports and
// a free /24, and registers its teardown.
func up(t *testing.T) *stack {
	s := &stack{t: t, project: fmt.Sprintf("ictest%d", os.Getpid())}
	if c := os.Getenv("IC_COMPOSE"); c != "" {
		s.compose = strings.Fields(c)
	} else if exec.Command("docker", "compose", "version").Run() == nil {
		s.compose = []string{"docker", "compose"}
	} else {
		s.compose = []string{"docker-compose"}
	}
	image := os.Getenv("IC_IMAGE")
	if image == "" {
		image = "inference-cache:dev"
	}
	if out, err := exec.Command("docker", "image", "inspect", image).CombinedOutput(); err != nil {
		t.Fatalf("image %s not found (build it with `make docker`): %v\n%s", image, err, firstLines(out, 3))
	}
	prefix := freeSubnet(t)
	s.env = append(os.Environ(), "IC_IMAGE="+image, "IC_PUBLISH_ADDR=127.0.0.1", "IC_SUBNET_PREFIX="+prefix)
	for i := 1; i <= 3; i++ {
		n := &node{service: fmt.Sprintf("node%d", i), ip: fmt.Sprintf("%s.%d", prefix, 10+i), grpcPort: freePort(t), httpPort: freePort(t)}
		s.env = append(s.env, fmt.Sprintf("IC_NODE%d_GRPC_PORT=%d", i, n.grpcPort), fmt.Sprintf("IC_NODE%d_HTTP_PORT=%d", i, n.httpPort))
		s.nodes = append(s.nodes, n)
	}
	t.Cleanup(s.down)
	s.composeRun("up", "-d")
	for _, n := range s.nodes {
		n.container = strings.TrimSpace(s.composeRun("ps", "-q", n.service))
		conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", n.grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		n.conn, n.ic, n.cl = conn, pb.NewInferenceCacheClient(conn), pb.NewClusterClient(conn)
	}
	s.waitHealthy(formTimeout, s.nodes...)
	leader := s.waitLeader(formTimeout, s.nodes...)
	s.waitVoters(formTimeout, leader, 3)
	t.Logf("cluster up: project %s, subnet %s.0/24, leader %s", s.project, prefix, leader.service)
	for _, n := range s.nodes {
		s.checkMetrics(n)
	}
	return s
}

// down dumps the logs of a failed run, then deletes the containers,
// network and volumes and checks nothing of the project is left.
func (s *stack) down() {
	for _, n := range s.nodes {
		if n.conn != nil {
			n.conn.Close()
		}
	}
	if s.t.Failed() {
		out, _ := s.composeTry("logs", "--no-color", "--tail", "60")
		s.t.Logf("--- compose logs ---\n%s", out)
	}
	if out, err := s.composeTry("down", "-v", "--remove-orphans", "-t", "5"); err != nil {
		s.t.Errorf("compose down: %v\n%s", err, out)
	}
	label := "label=com.docker.compose.project=" + s.project
	for _, what := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		out, _ := exec.Command("docker", append(what, "--filter", label)...).Output()
		if left := strings.TrimSpace(string(out)); left != "" {
			s.t.Errorf("docker %s: project %s left %q behind", what[0], s.project, left)
		}
	}
}

// killLeader: `docker kill` the leader's container. Lookups on the other
// two keep answering from their local copies throughout; a new leader is
// elected and writes resume; the killed node restarts and catches up.
func (s *stack) killLeader(t *testing.T, chains map[string][]uint32) {
	leader := s.waitLeader(electionTimeout, s.nodes...)
	others := without(s.nodes, leader)

	var stop atomic.Bool
	var lookups, failures atomic.Int64
	var firstFailure atomic.Value
	var wg sync.WaitGroup
	for _, n := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				for replica, chain := range chains {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					r, err := n.ic.LookupRoute(ctx, lookupReq(chain))
					cancel()
					lookups.Add(1)
					if err != nil || r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || len(r.Replicas) == 0 || r.Replicas[0].ReplicaId != replica {
						failures.Add(1)
						firstFailure.CompareAndSwap(nil, fmt.Sprintf("%s: %v %v", n.service, r, err))
					}
				}
				time.Sleep(10 * time.Millisecond) // paces the lookup load during the failover
			}
		}()
	}
	// The lookups flow before the kill.
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		n := lookups.Load()
		return n >= 20, fmt.Sprintf("%d lookups before the kill, want 20", n)
	})
	killed := time.Now()
	s.docker("kill", leader.container)
	t.Logf("killed leader %s", leader.service)

	// Writes resume through a survivor once a new leader is elected.
	chain := toks(70000, 128)
	// Short attempts with one request id, as a gateway SDK would retry.
	var resp *pb.IngestResponse
	var attempts []string
	poll.Eventually(t, electionTimeout, 100*time.Millisecond, func() (bool, string) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := others[0].ic.Ingest(ctx, &pb.IngestRequest{RequestId: "after-kill", Events: []*pb.BlockEvent{stored("vllm-9", chain)}})
		cancel()
		if err != nil {
			attempts = append(attempts, fmt.Sprintf("%v after %v", err, time.Since(start).Round(time.Millisecond)))
			return false, fmt.Sprintf("no write accepted since the leader was killed; attempts: %q", attempts)
		}
		resp = r
		return true, ""
	})
	t.Logf("writes resumed %v after the kill (applied index %d); failed attempts before: %q",
		time.Since(killed).Round(time.Millisecond), resp.AppliedIndex, attempts)
	// The lookups go on under the new leader: a hundred more answers, each
	// counted as a failure if it lost its hint.
	after := lookups.Load()
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		n := lookups.Load() - after
		return n >= 100, fmt.Sprintf("%d lookups after writes resumed, want 100", n)
	})
	stop.Store(true)
	wg.Wait()
	if n, f := lookups.Load(), failures.Load(); f > 0 || n < 20 {
		t.Fatalf("lookups on the survivors while the leader died: %d of %d failed or lost their hint; first: %v", f, n, firstFailure.Load())
	} else {
		t.Logf("%d lookups on the survivors during the failover, all PREFIX_MATCH", n)
	}
	newLeader := s.waitLeader(electionTimeout, others...)
	if newLeader == leader {
		t.Fatalf("killed %s is still the leader", leader.service)
	}
	chains["vllm-9"] = chain
	s.waitApplied(convergeTimeout, resp.AppliedIndex, others...)
	s.expectChains(chains, others...)

	// The killed node comes back with its volume and catches up.
	s.docker("start", leader.container)
	s.waitHealthy(formTimeout, leader)
	s.waitApplied(convergeTimeout, resp.AppliedIndex, leader)
	s.waitSameDigest(convergeTimeout, s.nodes...)
	s.expectChains(chains, s.nodes...)
}

// partition: `docker network disconnect` the leader (the hardest node to
// lose), write through the majority, reconnect it at its address; it steps
// down, catches up and all digests converge.
func (s *stack) partition(t *testing.T, chains map[string][]uint32) {
	victim := s.waitLeader(electionTimeout, s.nodes...)
	majority := without(s.nodes, victim)
	network := s.project + "_cluster"
	s.docker("network", "disconnect", network, victim.container)
	reconnected := false
	defer func() {
		if !reconnected {
			_, _ = s.dockerTry("network", "connect", "--ip", victim.ip, network, victim.container)
		}
	}()
	t.Logf("partitioned %s (the leader) from the cluster network", victim.service)

	// The majority elects a leader of its own and takes writes.
	s.waitLeader(electionTimeout, majority...)
	chain := toks(80000, 128)
	resp := s.ingest(majority[1], "during-partition", stored("vllm-8", chain))
	chains["vllm-8"] = chain
	s.waitApplied(convergeTimeout, resp.AppliedIndex, majority...)
	s.expectChains(chains, majority...)

	s.docker("network", "connect", "--ip", victim.ip, network, victim.container)
	reconnected = true
	t.Logf("reconnected %s", victim.service)
	s.waitLeader(electionTimeout, s.nodes...)
	d := s.waitSameDigest(convergeTimeout, s.nodes...)
	if d.AppliedIndex < resp.AppliedIndex {
		t.Fatalf("converged at applied index %d, before the partition-time write at %d", d.AppliedIndex, resp.AppliedIndex)
	}
	s.expectChains(chains, s.nodes...)
}

// restart: one container restarted keeps serving its data; then the whole
// cluster is stopped and started, so the volumes are the only source of
// the index, and every chain is still there.
func (s *stack) restart(t *testing.T, chains map[string][]uint32) {
	before := s.waitSameDigest(convergeTimeout, s.nodes...)
	one := s.nodes[1]
	s.docker("restart", "-t", "20", one.container)
	s.waitHealthy(formTimeout, one)
	s.waitApplied(convergeTimeout, before.AppliedIndex, one)
	s.expectChains(chains, one)

	s.composeRun("stop", "-t", "20")
	for _, n := range s.nodes {
		if st := s.inspect(n, "{{.State.Running}}"); st != "false" {
			t.Fatalf("%s still running after compose stop: %s", n.service, st)
		}
	}
	s.composeRun("start")
	s.waitHealthy(formTimeout, s.nodes...)
	s.waitLeader(formTimeout, s.nodes...)
	after := s.waitSameDigest(convergeTimeout, s.nodes...)
	if after.AppliedIndex < before.AppliedIndex {
		t.Fatalf("after a full restart the cluster is at applied index %d, before it was at %d: state lost", after.AppliedIndex, before.AppliedIndex)
	}
	s.expectChains(chains, s.nodes...)
	// The same cluster, not a second bootstrap: three voters, same ids.
	leader := s.waitLeader(formTimeout, s.nodes...)
	s.waitVoters(formTimeout, leader, 3)
}

// replace: a node whose disk is lost comes back under the same identity
// with an empty volume (what a StatefulSet does when a PVC is replaced). It
// must not bootstrap a second cluster: it sees peers with state, waits, and
// the leader brings it up to date with a snapshot install.
func (s *stack) replace(t *testing.T, chains map[string][]uint32) {
	leader := s.waitLeader(electionTimeout, s.nodes...)
	victim := without(s.nodes, leader)[0]
	s.composeRun("stop", "-t", "20", victim.service)
	s.composeRun("rm", "-f", victim.service)
	s.docker("volume", "rm", s.project+"_"+victim.service+"-data")
	t.Logf("deleted %s and its volume", victim.service)

	// Writes go on without it.
	chain := toks(90000, 128)
	resp := s.ingest(leader, "while-replaced", stored("vllm-7", chain))
	chains["vllm-7"] = chain

	s.composeRun("up", "-d", "--no-deps", victim.service)
	victim.container = strings.TrimSpace(s.composeRun("ps", "-q", victim.service))
	s.waitHealthy(formTimeout, victim)
	s.waitApplied(convergeTimeout, resp.AppliedIndex, victim)
	s.waitSameDigest(convergeTimeout, s.nodes...)
	s.expectChains(chains, s.nodes...)
	s.waitVoters(formTimeout, s.waitLeader(electionTimeout, s.nodes...), 3)
}

// --- small helpers -----------------------------------------------------

func toks(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func stored(replica string, tokens []uint32) *pb.BlockEvent {
	return &pb.BlockEvent{Kind: pb.BlockEvent_STORED, ReplicaId: replica, HashScheme: scheme, ModelId: model,
		TenantId: tenant, TokenIds: tokens, BlockSize: 16}
}

func lookupReq(tokens []uint32) *pb.LookupRouteRequest {
	return &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, TenantId: tenant, TokenIds: tokens}
}

func without(ns []*node, x *node) []*node {
	var out []*node
	for _, n := range ns {
		if n != x {
			out = append(out, n)
		}
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// freeSubnet returns the first three octets of a /24 in 172.30.0.0/16 that
// no Docker network on this host uses.
func freeSubnet(t *testing.T) string {
	t.Helper()
	ids, err := exec.Command("docker", "network", "ls", "-q").Output()
	if err != nil {
		t.Fatalf("docker network ls: %v", err)
	}
	var used []*net.IPNet
	for _, id := range strings.Fields(string(ids)) {
		out, _ := exec.Command("docker", "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}} {{end}}", id).Output()
		for _, c := range strings.Fields(string(out)) {
			if _, n, err := net.ParseCIDR(c); err == nil {
				used = append(used, n)
			}
		}
	}
	for third := 58 + os.Getpid()%100; third < 256+58; third++ {
		prefix := "172.30." + strconv.Itoa(third%256)
		_, cand, _ := net.ParseCIDR(prefix + ".0/24")
		free := true
		for _, u := range used {
			if u.Contains(cand.IP) || cand.Contains(u.IP) {
				free = false
				break
			}
		}
		if free {
			return prefix
		}
	}
	t.Fatal("no free /24 in 172.30.0.0/16 for the test network")
	return ""
}

func firstLines(b []byte, n int) string {
	lines := strings.SplitN(string(b), "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
