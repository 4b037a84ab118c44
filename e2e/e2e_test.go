package e2e

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/fixtures"
)

const (
	scheme = "vllm"
	model  = "m"
	tenant = "t"
)

// toks returns n token ids starting at from.
func toks(from, n int) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = uint32(from + i)
	}
	return s
}

func stored(replica, ten string, tokens []uint32) *pb.BlockEvent {
	return &pb.BlockEvent{Kind: pb.BlockEvent_STORED, ReplicaId: replica, HashScheme: scheme, ModelId: model,
		TenantId: ten, TokenIds: tokens, BlockSize: 16}
}

func lookupReq(ten string, tokens []uint32) *pb.LookupRouteRequest {
	return &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, TenantId: ten, TokenIds: tokens}
}

var (
	chainA = toks(0, 128)    // held by r-a: 8 blocks of 16
	chainB = toks(5000, 128) // held by r-b
	novel  = toks(90000, 128)
)

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	// Two apply workers whatever the machine's CPU count, so a large
	// batch takes the parallel apply (MetricsCountParallelApplyAndLogBytes).
	// The reference tokenizers as models qwen3 and mistral-like.
	c := startCluster(t, 3, "--apply-workers", "2", "--models-dir", fixtures.ModelsDir(t))
	n1, n2, n3 := c.procs[0], c.procs[1], c.procs[2]

	// Ingest through one node: r-a holds chain A and r-b chain B in tenant
	// t; r-b also holds chain B in tenant t2.
	ctx, cancel := ctxT(10 * time.Second)
	resp, err := n2.ic.Ingest(ctx, &pb.IngestRequest{RequestId: "seed-1", Events: []*pb.BlockEvent{
		stored("r-a", tenant, chainA), stored("r-b", tenant, chainB), stored("r-b", "t2", chainB),
	}})
	cancel()
	if err != nil || resp.Accepted != 3 || len(resp.Rejected) != 0 {
		t.Fatalf("seed ingest: %v %v", resp, err)
	}
	c.waitSameDigest(10*time.Second, n1, n2, n3)

	t.Run("RetriedRequestIDIsReportedAsDuplicate", func(t *testing.T) {
		// The same write retried through another node is acknowledged at
		// the original index, not applied again, and the response says so.
		ctx, cancel := ctxT(10 * time.Second)
		defer cancel()
		dup, err := n3.ic.Ingest(ctx, &pb.IngestRequest{RequestId: "seed-1", Events: []*pb.BlockEvent{
			stored("r-a", tenant, chainA), stored("r-b", tenant, chainB), stored("r-b", "t2", chainB),
		}})
		if err != nil || !dup.Duplicate || dup.AppliedIndex != resp.AppliedIndex {
			t.Fatalf("retried request id: %v %v, want duplicate at index %d", dup, err, resp.AppliedIndex)
		}
		if resp.Duplicate {
			t.Fatal("the first write of an id must not be reported as a duplicate")
		}
	})

	t.Run("ReusedRequestIDWithOtherEventsIsRefused", func(t *testing.T) {
		// The id reused for another write is not a retry: refused, with a
		// message that says why, and nothing of it applied.
		ctx, cancel := ctxT(10 * time.Second)
		defer cancel()
		_, err := n3.ic.Ingest(ctx, &pb.IngestRequest{RequestId: "seed-1", Events: []*pb.BlockEvent{stored("r-z", tenant, novel)}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "request id reused for a different payload") {
			t.Fatalf("reused request id: %v, want INVALID_ARGUMENT naming the reuse", err)
		}
		if r := lookup(t, n3, lookupReq(tenant, novel)); r.ReasonCode == pb.ReasonCode_PREFIX_MATCH {
			t.Fatalf("the refused write's events were applied: %v", r)
		}
	})

	t.Run("SamePrefixMatchFromEveryNode", func(t *testing.T) {
		for _, p := range c.procs {
			r := lookup(t, p, lookupReq(tenant, chainA))
			// Serving set {r-a, r-b}; only r-a runs 8 blocks deep, so the
			// distinguishing power is 1 − 1/2 and the score 128 × ½ = 64.
			if r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || len(r.Replicas) != 1 || r.Replicas[0].ReplicaId != "r-a" ||
				r.Replicas[0].MatchedTokens != 128 || r.Replicas[0].MatchedBlocks != 8 {
				t.Fatalf("%s: %v", p.id, r)
			}
			if r.ServedBy != p.id || r.AppliedIndex < resp.AppliedIndex || r.Stale {
				t.Errorf("%s: served_by=%q applied=%d (want ≥ %d) stale=%t", p.id, r.ServedBy, r.AppliedIndex, resp.AppliedIndex, r.Stale)
			}
			if s := r.Replicas[0].Score; s < 60 || s > 64.01 {
				t.Errorf("%s: score %v, want ≈64 (128 tokens × freshness≈1 × ½)", p.id, s)
			}
		}
	})

	t.Run("HealthAndReflection", func(t *testing.T) { checkHealthReflection(t, c) })
	t.Run("EveryReasonCode", func(t *testing.T) { checkReasonCodes(t, c) })
	t.Run("BadRequests", func(t *testing.T) { checkBadRequests(t, c) })
	t.Run("CLI", func(t *testing.T) { checkCLI(t, c) })
	t.Run("MetricsCountParallelApplyAndLogBytes", func(t *testing.T) { checkParallelMetrics(t, c) })
	t.Run("LeaderKilledUnderLookupLoad", func(t *testing.T) { checkFailover(t, c) })
}

func lookup(t *testing.T, p *proc, req *pb.LookupRouteRequest) *pb.LookupRouteResponse {
	t.Helper()
	ctx, cancel := ctxT(5 * time.Second)
	defer cancel()
	r, err := p.ic.LookupRoute(ctx, req)
	if err != nil {
		t.Fatalf("%s: LookupRoute returned an error (must fail open): %v", p.id, err)
	}
	return r
}
