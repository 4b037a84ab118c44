package e2e

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// floodFor is how long each target is flooded; E2E_FLOOD (a Go duration)
// overrides it.
func floodFor() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("E2E_FLOOD")); err == nil {
		return d
	}
	return 10 * time.Second
}

// terms returns every node's current term.
func (c *cluster) terms(t *testing.T) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, p := range c.procs {
		ctx, cancel := ctxT(2 * time.Second)
		st, err := p.cl.Status(ctx, &pb.StatusRequest{})
		cancel()
		if err != nil {
			t.Fatalf("%s status: %v", p.id, err)
		}
		out[p.id] = st.Term
	}
	return out
}

// TestElectionStability_LookupFloodOnOneNode floods LookupRoute on the
// leader, then on a follower, of three real server processes (loopback
// Raft timings: 150 ms heartbeat timeout) from as many goroutines as the
// machine can feed, and asserts that no node's term changes: lookup
// saturation on one node must not starve Raft heartbeats (issue 11).
func TestElectionStability_LookupFloodOnOneNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	c := startCluster(t, 3)
	leader := c.waitLeader(20 * time.Second)
	// State so every lookup walks a 64-block chain over 8 replicas.
	toks := toks(0, 64*16)
	var evs []*pb.BlockEvent
	for r := 0; r < 8; r++ {
		evs = append(evs, stored("flood-"+strconv.Itoa(r), "t", toks[:128*(r+1)]))
	}
	ctx, cancel := ctxT(10 * time.Second)
	if _, err := leader.ic.Ingest(ctx, &pb.IngestRequest{Events: evs}); err != nil {
		t.Fatal(err)
	}
	cancel()
	req := lookupReq("t", toks)
	var follower *proc
	for _, p := range c.procs {
		if p != leader {
			follower = p
			break
		}
	}
	for _, target := range []*proc{leader, follower} {
		before := c.terms(t)
		fctx, stop := context.WithTimeout(context.Background(), floodFor())
		var calls, matched atomic.Uint64
		var wg sync.WaitGroup
		for k := 0; k < 4; k++ {
			cc, err := grpc.NewClient(target.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			ic := pb.NewInferenceCacheClient(cc)
			for g := 0; g < 32*runtime.GOMAXPROCS(0); g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for fctx.Err() == nil {
						if r, err := ic.LookupRoute(fctx, req); err == nil {
							calls.Add(1)
							if r.ReasonCode == pb.ReasonCode_PREFIX_MATCH {
								matched.Add(1)
							}
						}
					}
				}()
			}
			defer cc.Close()
		}
		var moved string
		for fctx.Err() == nil && moved == "" {
			time.Sleep(200 * time.Millisecond)
			for id, tm := range c.terms(t) {
				if tm != before[id] {
					moved = id + " term " + strconv.FormatUint(before[id], 10) + " -> " + strconv.FormatUint(tm, 10)
				}
			}
		}
		stop()
		wg.Wait()
		s := floodFor().Seconds()
		t.Logf("flood on %s (%s): %d lookups, %.0f/s, %d PREFIX_MATCH", target.id, map[bool]string{true: "leader", false: "follower"}[target == leader], calls.Load(), float64(calls.Load())/s, matched.Load())
		if moved != "" {
			t.Fatalf("an election happened under lookup saturation of %s: %s", target.id, moved)
		}
		if calls.Load() == 0 || matched.Load() == 0 {
			t.Fatalf("the flood did not run: %d calls, %d matched", calls.Load(), matched.Load())
		}
		if l := c.waitLeader(5 * time.Second); l != leader {
			t.Fatalf("leadership moved from %s to %s", leader.id, l.id)
		}
	}
}
