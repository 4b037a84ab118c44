package raftnode_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/raftnode"
	"github.com/inference-cache/inference-cache/raftnode/forwardpb"
)

// nodeMaxMessageBytes is the gRPC message limit of a real node's server
// (api.MaxMessageBytes, 16 MiB), which the forwarding service shares.
const nodeMaxMessageBytes = 16 << 20

// bigReport is one picker's report on replicas replicas, each id 256
// bytes (the limit): about 271 bytes per entry on the wire.
func bigReport(picker string, seq uint64, replicas int) *pb.ReportPickerLoadRequest {
	r := &pb.ReportPickerLoadRequest{PickerId: picker, Sequence: seq, IntervalMs: 60_000}
	for i := range replicas {
		id := fmt.Sprintf("%s-%06d-", picker, i)
		r.Loads = append(r.Loads, &pb.PickerReplicaLoad{ReplicaId: id + strings.Repeat("r", 256-len(id)), PrefillingRequests: 1, PrefillTokens: 100, RunningRequests: 1})
	}
	return r
}

// A peer that was slow builds a backlog of reports; the node passes on
// only each picker's latest report (the peer would ignore the older
// ones), in calls the peer's server can take (its 16 MiB message limit).
// A picker of 13,000 replicas (3.5 MB a report, under the limit) reports
// six times while the node's first ShareLoad call to each peer is held:
// the six reports queued are 21 MB, which in one call the peers refused
// whole, so they never held the picker's load. (shareCalls' own test
// packs several pickers' reports within the byte budget.)
func TestShareLoad_ABacklogReachesThePeersInCallsTheyTake(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster moving 21 MB of reports")
	}
	if raceEnabled {
		// A peer storing 13,000 replicas takes longer than the 250 ms
		// call bound under the detector: calls would time out for a
		// reason other than the one tested.
		t.Skip("timing bound of ShareLoad calls not met under -race")
	}
	release := make(chan struct{})
	var mu sync.Mutex
	held := map[string]bool{} // peer address → its first call was held
	// Node n1's first ShareLoad call to each peer is held (a slow peer) until every
	// report is queued behind it.
	hold := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == forwardpb.Forward_ShareLoad_FullMethodName {
			mu.Lock()
			first := !held[cc.Target()]
			held[cc.Target()] = true
			mu.Unlock()
			if first {
				<-release
				return context.DeadlineExceeded
			}
		}
		return inv(ctx, method, req, reply, cc, opts...)
	})
	c := clustertest.New(t, 3, func(i int, cfg *raftnode.Config) {
		cfg.ExpireInterval = -1
		if i == 0 {
			cfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), hold}
		}
	})
	c.ServerOptions = func(int) []grpc.ServerOption {
		return []grpc.ServerOption{grpc.MaxRecvMsgSize(nodeMaxMessageBytes)}
	}
	c.StartAll()
	c.WaitLeader(10 * time.Second)
	n0 := c.Nodes[0].Node
	// Gossip shows both peers alive before the reports.
	poll.Eventually(t, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		st := n0.Status()
		alive := 0
		for _, m := range st.Members {
			if m.Healthy && m.GRPCAddr != "" {
				alive++
			}
		}
		return alive == 3, fmt.Sprintf("%d healthy with a gRPC address", alive)
	})
	if _, err := n0.SharePickerLoad(&pb.ReportPickerLoadRequest{PickerId: "warm", Sequence: 1, IntervalMs: 60_000}); err != nil {
		t.Fatal(err)
	}
	const replicas, reports = 13_000, 6
	for seq := uint64(1); seq <= reports; seq++ {
		if _, err := n0.SharePickerLoad(bigReport("big", seq, replicas)); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	for _, i := range []int{1, 2} {
		peer := c.Nodes[i].Node
		poll.Eventually(t, 20*time.Second, 50*time.Millisecond, func() (bool, string) {
			var got []string
			for _, p := range peer.PickerLoad().Pickers() {
				got = append(got, fmt.Sprintf("%s seq %d (%d replicas)", p.ID, p.Sequence, p.Replicas))
				if p.ID == "big" && p.Sequence == reports && p.Replicas == replicas {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%s holds %v, want big at sequence %d", c.Nodes[i].ID, got, reports)
		})
	}
}
