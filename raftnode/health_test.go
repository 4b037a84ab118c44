package raftnode_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/metrics"
	"github.com/inference-cache/inference-cache/raftnode"
)

// fullDiskStore fails every append with ENOSPC while full is set, as
// raft-boltdb does on a full file system.
type fullDiskStore struct {
	raft.LogStore
	full *atomic.Bool
}

func (s fullDiskStore) StoreLog(l *raft.Log) error {
	if s.full.Load() {
		return fmt.Errorf("write raft.db: %w", syscall.ENOSPC)
	}
	return s.LogStore.StoreLog(l)
}

func (s fullDiskStore) StoreLogs(ls []*raft.Log) error {
	if s.full.Load() {
		return fmt.Errorf("write raft.db: %w", syscall.ENOSPC)
	}
	return s.LogStore.StoreLogs(ls)
}

// wrapStores wraps the log store of every node started afterwards with
// f(i, store), i the node's position in its clustertest.Cluster (n1 = 0),
// and returns the restore func.
func wrapStores(f func(i int, s raft.LogStore) raft.LogStore) (restore func()) {
	return raftnode.SetWrapLogStoreForTest(func(id string, s raft.LogStore) raft.LogStore {
		var i int
		fmt.Sscanf(id, "n%d", &i)
		return f(i-1, s)
	})
}

// startWithOneWrite starts c, commits one ingest through the leader and
// waits until every node applied it; it returns the leader, a follower
// and the write's observed_at_ms.
func startWithOneWrite(t *testing.T, c *clustertest.Cluster) (leader, follow int, now int64) {
	t.Helper()
	c.StartAll()
	leader = c.WaitLeader(15 * time.Second)
	now = time.Now().UnixMilli()
	idx, err := appliedAt(c.Nodes[leader].Ingest(c.Ctx(5*time.Second), "", evs("a", 100, 4, now)))
	if err != nil {
		t.Fatal(err)
	}
	c.WaitApplied(idx, 10*time.Second)
	return leader, follower(c, leader), now
}

// surface is one node's readiness and reads as a load balancer and the
// gateway see them: gRPC health, /readyz and LookupRoute.
type surface struct {
	hc     healthpb.HealthClient
	ic     pb.InferenceCacheClient
	readyz string
}

func serve(t *testing.T, n *raftnode.Node) surface {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewServer(api.ServerConfig{Node: n, GRPCAddr: lis.Addr().String()})
	go srv.GRPC.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	hs := httptest.NewServer(metrics.NewMux(nil, n.Serving, false))
	t.Cleanup(hs.Close)
	return surface{hc: healthpb.NewHealthClient(cc), ic: pb.NewInferenceCacheClient(cc), readyz: hs.URL + "/readyz"}
}

func (s surface) serving(t *testing.T) bool {
	return s.healthOf(t, "inferencecache.v1.InferenceCache")
}

// started is the startup probe's view (api.StartedHealthService).
func (s surface) started(t *testing.T) bool { return s.healthOf(t, api.StartedHealthService) }

func (s surface) healthOf(t *testing.T, service string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := s.hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	return r.Status == healthpb.HealthCheckResponse_SERVING
}

func (s surface) readyzCode(t *testing.T) int {
	r, err := http.Get(s.readyz)
	if err != nil {
		t.Fatalf("readyz: %v", err)
	}
	r.Body.Close()
	return r.StatusCode
}

func (s surface) lookup(t *testing.T, base uint64) *pb.LookupRouteResponse {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hs := make([]uint64, 4)
	for i := range hs {
		hs[i] = base + uint64(i)
	}
	r, err := s.ic.LookupRoute(ctx, &pb.LookupRouteRequest{HashScheme: part.Scheme, ModelId: part.Model, TenantId: part.Tenant, BlockHashes: hs})
	if err != nil {
		t.Fatalf("LookupRoute returned an error (must fail open): %v", err)
	}
	return r
}

// TestFullDisk_FollowerStaleAndNotServingUntilAppendsSucceed is the fault
// trial's full disk: a follower whose log appends fail with ENOSPC still
// gets the leader's heartbeats (last contact stays fresh), but its
// lookups say stale (answered, never an error), gRPC health is
// NOT_SERVING and /readyz 503 until appends succeed and it catches up.
func TestFullDisk_FollowerStaleAndNotServingUntilAppendsSucceed(t *testing.T) {
	var full [3]atomic.Bool
	defer wrapStores(func(i int, s raft.LogStore) raft.LogStore { return fullDiskStore{s, &full[i]} })()
	c := clustertest.New(t, 3, noExpire)
	l, f, now := startWithOneWrite(t, c)
	nf := c.Nodes[f]
	s := serve(t, nf.Node)
	poll.Eventually(t, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		rs, code := nf.ReadState(), s.readyzCode(t)
		return nf.Serving() && !rs.Stale && s.serving(t) && code == http.StatusOK,
			fmt.Sprintf("before the fault, follower serving %v, read state %+v, health serving %v, /readyz %d; want serving and fresh", nf.Serving(), rs, s.serving(t), code)
	})

	full[f].Store(true)
	var idx uint64
	var err error
	for k := 0; k < 5; k++ { // the leader and the other follower commit
		if idx, err = appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("b", uint64(1000+100*k), 4, now))); err != nil {
			t.Fatal(err)
		}
	}
	poll.Eventually(t, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		rs, code := nf.ReadState(), s.readyzCode(t)
		return rs.Stale && rs.StaleReason == raftnode.StaleAppendFailing && !nf.Serving() &&
				!s.serving(t) && code == http.StatusServiceUnavailable,
			fmt.Sprintf("full-disk follower serving %v, read state %+v, health serving %v, /readyz %d; want stale (%q), not serving, 503",
				nf.Serving(), rs, s.serving(t), code, raftnode.StaleAppendFailing)
	})
	rs := nf.ReadState()
	if rs.AppliedIndex >= idx {
		t.Fatalf("full-disk follower applied %d, the cluster committed %d: the fault did not bite", rs.AppliedIndex, idx)
	}
	if rs.LastLeaderContact > time.Second {
		t.Fatalf("last leader contact %v: the heartbeats should still arrive (the trial's case)", rs.LastLeaderContact)
	}
	if h := nf.Health(); h.Reason != raftnode.StaleAppendFailing || h.AppendFailures == 0 || !errors.Is(h.LastAppendError, syscall.ENOSPC) {
		t.Fatalf("Health() = %+v, want append failures with ENOSPC", h)
	}
	if !nf.Ready() {
		t.Fatal("Ready false: lookups would answer NO_HINT instead of stale hints")
	}
	if !s.started(t) {
		t.Fatal("the startup probe's health service went NOT_SERVING: Kubernetes would restart a node a restart cannot fix")
	}
	// A write sent to it is forwarded and acknowledged at once: waiting
	// for its own apply (which cannot happen) held it for the whole
	// write budget (fault trial: 2 s client attempts timed out).
	t0 := time.Now()
	if _, err := nf.Ingest(c.Ctx(5*time.Second), "", evs("d", 2000, 4, now)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("write through the full-disk follower took %v", d)
	}
	r := s.lookup(t, 100)
	if !r.Stale || r.ServedBy != nf.ID || len(r.Replicas) == 0 {
		t.Fatalf("lookup on the full-disk follower = %v, want stale hints from its state", r)
	}

	full[f].Store(false) // space freed: the leader's next retry succeeds
	if idx, err = appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("c", 5000, 4, now))); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		rs, code := nf.ReadState(), s.readyzCode(t)
		return rs.AppliedIndex >= idx && !rs.Stale && nf.Serving() && s.serving(t) && code == http.StatusOK,
			fmt.Sprintf("after the fault, follower serving %v, read state %+v, health serving %v, /readyz %d; want index %d applied, fresh and serving",
				nf.Serving(), rs, s.serving(t), code, idx)
	})
	if r := s.lookup(t, 5000); r.Stale || len(r.Replicas) == 0 {
		t.Fatalf("lookup after recovery = %v, want fresh hints", r)
	}
	assertSameDigest(t, c, idx)
}

// TestFullDisk_LeaderWriteRetriedOnNextLeader: a leader that cannot append
// a write to its log fails the future with the store's plain error and
// steps down. The write must not reach the caller as an internal error
// naming server paths (fault trial): it is retried, same request id, on
// the next leader, and commits once on every node.
func TestFullDisk_LeaderWriteRetriedOnNextLeader(t *testing.T) {
	var full [3]atomic.Bool
	defer wrapStores(func(i int, s raft.LogStore) raft.LogStore { return fullDiskStore{s, &full[i]} })()
	c := clustertest.New(t, 3, noExpire)
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	now := time.Now().UnixMilli()
	if _, err := c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("a", 100, 4, now)); err != nil {
		t.Fatal(err)
	}
	full[l].Store(true)
	idx, err := appliedAt(c.Nodes[l].Ingest(c.Ctx(10*time.Second), "retry-me", evs("b", 1000, 4, now)))
	if err != nil {
		t.Fatalf("write through a leader whose disk is full: %v (want it retried on the next leader)", err)
	}
	full[l].Store(false)
	// Applied once: a retry of the same id is a duplicate of that index.
	r, err := c.Nodes[follower(c, l)].Ingest(c.Ctx(10*time.Second), "retry-me", evs("b", 1000, 4, now))
	if err != nil || !r.Duplicate || r.Index != idx {
		t.Fatalf("re-sent write = %+v, %v; want a duplicate of index %d", r, err, idx)
	}
	// The duplicate took a log entry of its own (reported with the
	// original's index): compare digests after a later write.
	last, err := appliedAt(c.Nodes[follower(c, l)].Ingest(c.Ctx(10*time.Second), "", evs("c", 3000, 4, now)))
	if err != nil {
		t.Fatal(err)
	}
	assertSameDigest(t, c, last)
}

// TestRestart_StaleAndNotServingUntilItsLogIsApplied: a node restarted
// with a log tail its snapshot does not cover reports stale reads and is
// not Serving while it cannot apply that tail (here: no leader yet), and
// serves again once it has.
func TestRestart_StaleAndNotServingUntilItsLogIsApplied(t *testing.T) {
	c := clustertest.New(t, 3, noExpire)
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	var idx uint64
	var err error
	for k := 0; k < 5; k++ {
		if idx, err = appliedAt(c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs("a", uint64(100*k), 4, time.Now().UnixMilli()))); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitApplied(idx, 10*time.Second)
	r := follower(c, l)
	for _, i := range c.Running() {
		c.Stop(i)
	}
	c.Start(r) // alone: no leader to confirm the commit index
	nr := c.Nodes[r]
	// The state must hold from the start until the node has stood for
	// election, that is until it has waited out a leader's heartbeats and
	// knows none is coming: check it at every poll until then, and once
	// after.
	var wrong string
	check := func() bool {
		rs := nr.ReadState()
		if !nr.Ready() || nr.Serving() || !rs.Stale || rs.StaleReason != raftnode.StaleCatchingUp || rs.AppliedIndex >= idx {
			wrong = fmt.Sprintf("restarted node without a leader: ready %v serving %v read state %+v; want ready, not serving, stale (%q)",
				nr.Ready(), nr.Serving(), rs, raftnode.StaleCatchingUp)
			return false
		}
		return true
	}
	poll.Eventually(t, 15*time.Second, 10*time.Millisecond, func() (bool, string) {
		if !check() {
			return true, "" // stop polling; reported below
		}
		st := nr.Status().State
		return st == "Candidate", fmt.Sprintf("restarted node is %s, want it to stand for election", st)
	})
	if wrong != "" || !check() {
		t.Fatal(wrong)
	}
	for i := range c.Nodes {
		if i != r {
			c.Start(i)
		}
	}
	c.WaitLeader(15 * time.Second)
	poll.Eventually(t, 15*time.Second, 20*time.Millisecond, func() (bool, string) {
		rs := nr.ReadState()
		return rs.AppliedIndex >= idx && !rs.Stale && nr.Serving(),
			fmt.Sprintf("restarted node serving %v, read state %+v; want index %d applied, fresh and serving", nr.Serving(), rs, idx)
	})
}

// A leader whose disk is full cannot commit: it hands leadership over
// instead of staying (or being re-elected) while full, and every node's
// Status reports it unhealthy and why, until its appends succeed again.
func TestFullDisk_LeaderStepsDownAndIsReportedUnhealthy(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster through elections, restarts or slow disks: the full tier runs it")
	}
	var full [3]atomic.Bool
	defer wrapStores(func(i int, s raft.LogStore) raft.LogStore { return fullDiskStore{s, &full[i]} })()
	c := clustertest.New(t, 3, noExpire)
	l, _, now := startWithOneWrite(t, c)
	old := c.Nodes[l].ID
	full[l].Store(true)
	// A write makes the leader append (and fail); it is retried on the
	// new leader and commits there.
	if _, err := c.Nodes[follower(c, l)].Ingest(c.Ctx(20*time.Second), "", evs("b", 5000, 4, now)); err != nil {
		t.Fatalf("write while the leader's disk is full: %v", err)
	}
	poll.Eventually(t, 15*time.Second, 20*time.Millisecond, func() (bool, string) {
		nl := c.WaitLeader(10 * time.Second)
		return nl != l, fmt.Sprintf("%s still leads with a full disk", old)
	})
	reason := func(i int) string {
		for _, m := range c.Nodes[i].Status().Members {
			if m.ID == old && !m.Healthy {
				return m.UnhealthyReason
			}
		}
		return ""
	}
	poll.Eventually(t, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		for _, i := range c.Running() {
			if r := reason(i); !strings.Contains(r, "log appends are failing") {
				return false, fmt.Sprintf("%s gives %s's health problem as %q, want %q", c.Nodes[i].ID, old, r, "log appends are failing")
			}
		}
		return true, ""
	})
	if nl := c.WaitLeader(10 * time.Second); nl == l {
		t.Fatalf("%s leads again while its disk is full", old)
	}
	full[l].Store(false)
	poll.Eventually(t, 20*time.Second, 20*time.Millisecond, func() (bool, string) {
		for _, i := range c.Running() {
			if r := reason(i); r != "" {
				return false, fmt.Sprintf("%s still reports %s unhealthy (%q) once it can append", c.Nodes[i].ID, old, r)
			}
		}
		return true, ""
	})
}
