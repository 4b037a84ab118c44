//go:build !race

// The race detector slows every goroutine of this process (three Raft
// nodes and the load generator share it) about tenfold, which says nothing
// about production scheduling; e2e/election_test.go runs the same check
// against real server processes in every build.

package api_test

import (
	"context"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/raftnode"
)

// saturation is how long TestElectionStability_LookupSaturation floods a
// node; ELECTION_SATURATION (a Go duration) overrides it.
func saturation() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("ELECTION_SATURATION")); err == nil {
		return d
	}
	return 8 * time.Second
}

// TestElectionStability_LookupSaturationCausesNoElection floods one node's
// LookupRoute over gRPC from many goroutines (every CPU busy) while the
// cluster runs with the loopback timings (150 ms heartbeat timeout, 3×
// stricter than production) and asserts that no node changes term: a
// flood of lookups on the leader or on a follower cannot starve Raft
// heartbeats.
func TestElectionStability_LookupSaturationCausesNoElection(t *testing.T) {
	if testing.Short() {
		t.Skip("saturates the machine for several seconds")
	}
	for _, target := range []string{"leader", "follower"} {
		t.Run(target, func(t *testing.T) {
			c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) {
				cfg.ExpireInterval = -1
				cfg.Timing = raftnode.Timing{LocalGossip: true} // production Raft timeouts
			})
			c.StartAll()
			l := c.WaitLeader(20 * time.Second)
			i := l
			if target == "follower" {
				i = (l + 1) % 3
			}
			nd := c.Nodes[i]
			// Some state so lookups do real matching work.
			now := time.Now().UnixMilli()
			hs := make([]uint64, 64)
			tc := make([]uint32, 64)
			for k := range hs {
				hs[k], tc[k] = uint64(k+1)*7919, 16
			}
			var evs []index.BlockEvent
			for r := 0; r < 8; r++ {
				evs = append(evs, index.BlockEvent{Kind: index.Stored, ReplicaID: "r" + strconv.Itoa(r),
					Partition: index.Partition{Scheme: "vllm", Model: "m", Tenant: "t"}, BlockHashes: hs[:8*(r+1)], BlockTokenCounts: tc[:8*(r+1)], ObservedAtMs: now})
			}
			wr, err := c.Nodes[l].Ingest(c.Ctx(5*time.Second), "", evs)
			if err != nil {
				t.Fatal(err)
			}
			// Settled after bootstrap: every node applied the write (each
			// follower has heard from this leader) and all agree on it,
			// so the terms read next are the ones the flood must keep.
			c.WaitApplied(wr.Index, 10*time.Second)
			if l2 := c.WaitLeader(10 * time.Second); l2 != l {
				t.Fatalf("leader moved from %s to %s before the flood", c.Nodes[l].ID, c.Nodes[l2].ID)
			}

			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := api.NewServer(api.ServerConfig{Node: nd.Node, GRPCAddr: lis.Addr().String()})
			go srv.GRPC.Serve(lis)
			defer srv.GRPC.Stop()

			terms := func() []uint64 {
				var out []uint64
				for _, j := range c.Running() {
					out = append(out, c.Nodes[j].Status().Term)
				}
				return out
			}
			before := terms()
			leaderID := c.Nodes[l].ID

			ctx, cancel := context.WithTimeout(context.Background(), saturation())
			defer cancel()
			var calls, prefix atomic.Uint64
			var wg sync.WaitGroup
			conns := 8
			perConn := 16 * runtime.GOMAXPROCS(0)
			req := &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TenantId: "t", BlockHashes: hs}
			for k := 0; k < conns; k++ {
				cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer cc.Close()
				ic := pb.NewInferenceCacheClient(cc)
				for g := 0; g < perConn; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for ctx.Err() == nil {
							r, err := ic.LookupRoute(ctx, req)
							if err == nil {
								calls.Add(1)
								if r.ReasonCode == pb.ReasonCode_PREFIX_MATCH {
									prefix.Add(1)
								}
							}
						}
					}()
				}
			}
			// Watch terms while the flood runs.
			changed := ""
			tick := time.NewTicker(50 * time.Millisecond)
		watch:
			for {
				select {
				case <-ctx.Done():
					break watch
				case <-tick.C:
					for j, tm := range terms() {
						if tm != before[j] {
							changed = "term changed during the flood: " + strconv.FormatUint(before[j], 10) + " -> " + strconv.FormatUint(tm, 10)
							break watch
						}
					}
				}
			}
			tick.Stop()
			cancel()
			wg.Wait()
			secs := saturation().Seconds()
			t.Logf("%s %s: %d lookups in %.0f s (%.0f/s, %d goroutines on %d connections, %d PREFIX_MATCH)",
				target, nd.ID, calls.Load(), secs, float64(calls.Load())/secs, conns*perConn, conns, prefix.Load())
			if changed != "" {
				t.Fatal(changed)
			}
			after := terms()
			for j := range after {
				if after[j] != before[j] {
					t.Fatalf("terms %v -> %v: an election happened under lookup saturation", before, after)
				}
			}
			if st := c.Nodes[l].Status(); st.State != "Leader" || st.LeaderID != leaderID {
				t.Fatalf("leadership moved: %+v", st)
			}
			if calls.Load() == 0 || prefix.Load() == 0 {
				t.Fatalf("the flood did not run: %d calls, %d prefix matches", calls.Load(), prefix.Load())
			}
		})
	}
}
