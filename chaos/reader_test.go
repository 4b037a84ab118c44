package chaos

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// scriptedIC answers LookupRoute call k with script(k) (0-based).
type scriptedIC struct {
	pb.UnimplementedInferenceCacheServer
	mu     sync.Mutex
	calls  int
	script func(k int) *pb.LookupRouteResponse
}

func (s *scriptedIC) LookupRoute(context.Context, *pb.LookupRouteRequest) (*pb.LookupRouteResponse, error) {
	s.mu.Lock()
	k := s.calls
	s.calls++
	s.mu.Unlock()
	return s.script(k), nil
}

// The reader fails the run when a reachable node that does not mark its
// answer stale says anything but PREFIX_MATCH naming the seeded chain's
// replica: the chain is stored, so NO_HINT there hides acknowledged
// state. Stale answers and answers from a node restarted during the call
// are not counted against it.
func TestReader_WrongAnswerForSeededChainFailsTheRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := &Node{ID: "n1", Index: 0, state: Up}
	seedHit := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, Replicas: []*pb.ReplicaHint{{ReplicaId: seedReplica, MatchedBlocks: 8}}}
	script := []func() *pb.LookupRouteResponse{
		func() *pb.LookupRouteResponse { return seedHit },
		func() *pb.LookupRouteResponse {
			return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT, ServedBy: "n1"}
		}, // wrong
		func() *pb.LookupRouteResponse {
			return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT, Stale: true}
		},
		func() *pb.LookupRouteResponse {
			return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, Replicas: []*pb.ReplicaHint{{ReplicaId: "r-w0"}}} // wrong
		},
		func() *pb.LookupRouteResponse {
			n.setState(Up) // restarted during the call: not counted
			return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT}
		},
		func() *pb.LookupRouteResponse {
			return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_AFFINITY_HINT}
		}, // wrong
		func() *pb.LookupRouteResponse {
			return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT, Detail: api.DetailTimeout, ServedBy: "n1"}
		}, // over budget: the fail-open answer of a slow lookup, not a read
	}
	srv := &scriptedIC{script: func(k int) *pb.LookupRouteResponse {
		if k >= len(script) {
			cancel() // the run ends during this call: not recorded
			return seedHit
		}
		return script[k]()
	}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterInferenceCacheServer(gs, srv)
	go gs.Serve(lis)
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	n.IC = pb.NewInferenceCacheClient(cc)

	w := &Workload{ReadPause: time.Millisecond, seeded: chainAt(4_000_000_000)}
	w.wg.Add(1)
	go w.reader(ctx, n)
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("reader did not stop after the run ended")
	}

	_, lookups, _ := w.History()
	if len(lookups) != len(script) {
		t.Fatalf("%d lookups recorded, want %d", len(lookups), len(script))
	}
	rep := newReport()
	rep.Linearizable = "Ok"
	tallyLookups(rep, lookups, []string{"n1"})
	if rep.LookupWrong != 3 || rep.LookupStale != 1 || rep.LookupErrors != 0 || rep.LookupOverBudget != 1 {
		t.Fatalf("wrong %d stale %d errors %d over budget %d, want 3, 1, 0, 1; samples %v", rep.LookupWrong, rep.LookupStale, rep.LookupErrors, rep.LookupOverBudget, rep.LookupWrongSamples)
	}
	if md := rep.Markdown("test"); !strings.Contains(md, "fail-open NO_HINT") || !strings.Contains(md, "| 1 of 7 |") {
		t.Fatal("report lacks the count of lookups over budget")
	}
	if rep.Passed() {
		t.Fatal("a run whose reader got NO_HINT for the stored seeded chain from a fresh node passed")
	}
	if len(rep.LookupWrongSamples) != 3 || !strings.Contains(rep.Markdown("test"), "seeded chain on n1") {
		t.Fatalf("report lacks the wrong answers: %v", rep.LookupWrongSamples)
	}

	// The same run without the wrong answers passes.
	var good []LookupRec
	for _, l := range lookups {
		if !l.Wrong {
			good = append(good, l)
		}
	}
	rep = newReport()
	rep.Linearizable = "Ok"
	tallyLookups(rep, good, []string{"n1"})
	if !rep.Passed() {
		t.Fatalf("a run with only correct, stale or restarted-node answers failed: %+v", rep)
	}
}

// A node that has not applied the seed yet (its answer's applied index is
// below the seed's) is behind, not wrong; from the seed's index on, a
// fresh answer without the seed is wrong.
func TestReader_WrongOnlyOnceTheSeedIsApplied(t *testing.T) {
	miss := func(applied uint64, stale bool) *pb.LookupRouteResponse {
		return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT, Detail: "index is empty (cold start)", AppliedIndex: applied, Stale: stale}
	}
	hit := &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, AppliedIndex: 9, Replicas: []*pb.ReplicaHint{{ReplicaId: seedReplica}}}
	for _, c := range []struct {
		r    *pb.LookupRouteResponse
		want bool
	}{
		{miss(5, false), false}, // not applied yet
		{miss(7, false), true},  // at the seed's index
		{miss(12, false), true}, // past it
		{miss(12, true), false}, // marked stale
		{hit, false},
	} {
		if got := wrongAnswer(c.r, 7); got != c.want {
			t.Errorf("applied %d stale %t %s: wrong = %t, want %t", c.r.AppliedIndex, c.r.Stale, c.r.ReasonCode, got, c.want)
		}
	}
}
