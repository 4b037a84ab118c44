package raftnode_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/raftnode"
)

// A leader that dies without closing its connections (a container killed,
// a host gone) must not hold a forwarded write until the caller's whole
// retry budget is spent: the follower abandons the attempt when it sees a
// new leader and retries there with the same request id.
func TestForward_AbandonsALeaderThatStopsAnsweringWhenANewLeaderIsElected(t *testing.T) {
	var hang atomic.Int32
	hang.Store(-1)
	stuck := make(chan struct{}, 1) // an Apply reached the hanging leader and is held there
	c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		cfg.WriteRetry = 8 * time.Second
	})
	c.ServerOptions = func(i int) []grpc.ServerOption {
		return []grpc.ServerOption{grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if int(hang.Load()) == i && strings.HasSuffix(info.FullMethod, "/Apply") {
				select {
				case stuck <- struct{}{}:
				default:
				}
				<-ctx.Done() // the dead leader's socket never answers
				return nil, ctx.Err()
			}
			return h(ctx, req)
		})}
	}
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	f := follower(c, l)
	now := time.Now().UnixMilli()
	if _, err := c.Nodes[f].Ingest(c.Ctx(5*time.Second), "warm", evs("replica-w", 1, 4, now)); err != nil {
		t.Fatal(err)
	}

	hang.Store(int32(l))
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.Nodes[f].Ingest(context.Background(), "during-failover", evs("replica-a", 100, 8, now))
		done <- err
	}()
	// The write must be stuck on the old leader before it dies: its Apply
	// arrived there and is held, and the caller has no answer.
	select {
	case <-stuck:
	case err := <-done:
		t.Fatalf("write returned (%v) before it reached the hanging leader", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the forwarded write did not reach the leader within 5 s")
	}
	select {
	case err := <-done:
		t.Fatalf("write returned (%v) while its Apply is held on the leader", err)
	default:
	}
	killed := time.Since(start)
	c.Nodes[l].Node.Kill() // raft and gossip stop; the gRPC socket stays open and silent

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("write during failover: %v", err)
		}
	case <-time.After(7 * time.Second):
		t.Fatal("write still hanging on the dead leader after 7 s")
	}
	took := time.Since(start)
	t.Logf("write committed %v after it was sent (leader killed at %v)", took, killed.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("write took %v: it waited on the dead leader instead of moving to the new one", took)
	}
	c.Kill(l) // now also close its gRPC server, so the harness sees it gone
	nl := c.WaitLeader(10 * time.Second)
	if res := lookup(c.Nodes[nl], 100, 8, now); res.Reason != index.PrefixMatch {
		t.Fatalf("new leader does not hold the write: %+v", res)
	}
}
