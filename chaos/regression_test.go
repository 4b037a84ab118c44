package chaos

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// TestRegression_LeaderGetPolicyNotBeforeBarrier: after a full-cluster
// restart a new leader must not serve GetCachePolicy before its
// post-election Barrier has applied every earlier committed entry. Its FSM
// holds version 0 (the default policy) until the log is replayed, so an
// early answer would be a read from the leader older than thousands of
// acknowledged policy changes, which the chaos register check flags.
func TestRegression_LeaderGetPolicyNotBeforeBarrier(t *testing.T) {
	if os.Getenv("CHAOS") == "" {
		t.Skip("starts server processes; set CHAOS=smoke (make chaos-smoke)")
	}
	bin := testBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := NewCluster(ctx, Options{Nodes: 3, Binary: bin, Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.WaitLeader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Many policy versions in the log, one entry each (sequential calls,
	// so group commit does not merge them; no snapshot yet), so the replay
	// after a restart takes a while.
	pol, err := l.IC.GetCachePolicy(ctx, &pb.GetCachePolicyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var last *pb.CachePolicy
	for i := 0; i < 1500; i++ {
		p := proto.Clone(pol).(*pb.CachePolicy)
		p.SloTightThresholdMs = uint32(1000 + i)
		if last, err = l.IC.SetCachePolicy(ctx, &pb.SetCachePolicyRequest{Policy: p}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.Nodes {
		c.Kill(n)
	}
	for _, n := range c.Nodes {
		if err := c.Start(n); err != nil {
			t.Fatal(err)
		}
	}
	// Ask every node as fast as possible; whichever reports itself leader
	// must answer the last acknowledged version.
	deadline := time.Now().Add(60 * time.Second)
	checked := 0
	for time.Now().Before(deadline) && checked < 200 {
		for _, n := range c.Nodes {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := n.CL.Status(cctx, &pb.StatusRequest{})
			if err != nil || st.State != "Leader" {
				cancel()
				continue
			}
			got, err := n.IC.GetCachePolicy(cctx, &pb.GetCachePolicyRequest{})
			cancel()
			if err != nil {
				continue
			}
			checked++
			if got.Version < last.Version {
				t.Fatalf("leader %s (term %d) answered policy version %d; version %d was acknowledged before the restart", n.ID, st.Term, got.Version, last.Version)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no leader answered within 60 s")
	}
}
