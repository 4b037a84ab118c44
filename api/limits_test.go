package api

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// The limits of contract §9.1 not already covered by convert_test.go (Ingest
// events, stats entries, request-level refusals) and lookup_test.go:
// every LookupRoute field, the Ingest/stats id fields at their limit,
// request-level limits at exactly the bound, and the gRPC message size.

func TestLimits_LookupRouteEveryFieldOverItsLimitIsNoHintNamingIt(t *testing.T) {
	long := strings.Repeat("x", MaxIDBytes+1)
	at := strings.Repeat("x", MaxIDBytes)
	base := func(f func(r *pb.LookupRouteRequest)) *pb.LookupRouteRequest {
		r := &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TenantId: "t", BlockHashes: []uint64{1, 2}}
		f(r)
		return r
	}
	cases := []struct {
		name   string
		req    *pb.LookupRouteRequest
		detail string // "" = passes the limits
	}{
		{"hash_scheme", base(func(r *pb.LookupRouteRequest) { r.HashScheme = long }), DetailSchemeTooLong},
		{"model_id", base(func(r *pb.LookupRouteRequest) { r.ModelId = long }), DetailModelTooLong},
		{"tenant_id", base(func(r *pb.LookupRouteRequest) { r.TenantId = long }), DetailTenantTooLong},
		{"adapter_id", base(func(r *pb.LookupRouteRequest) { r.AdapterId = long }), DetailAdapterTooLong},
		{"block_hashes", base(func(r *pb.LookupRouteRequest) { r.BlockHashes = make([]uint64, MaxChainLength+1) }), DetailChainTooLong},
		{"block_token_counts length", base(func(r *pb.LookupRouteRequest) { r.BlockTokenCounts = make([]uint32, MaxChainLength+1) }), DetailCountsTooLong},
		{"block_token_counts zero", base(func(r *pb.LookupRouteRequest) { r.BlockTokenCounts = []uint32{16, 0} }), DetailCountsZero},
		{"block_token_counts value", base(func(r *pb.LookupRouteRequest) { r.BlockTokenCounts = []uint32{16, MaxBlockSize + 1} }), DetailCountsTooBig},
		{"token_ids", base(func(r *pb.LookupRouteRequest) { r.BlockHashes, r.TokenIds = nil, make([]uint32, MaxTokens+1) }), DetailTokensTooLong},
		{"prompt_text", base(func(r *pb.LookupRouteRequest) {
			r.BlockHashes, r.PromptText = nil, strings.Repeat("a", MaxPromptBytes+1)
		}), DetailPromptTooLong},
		{"max_replicas", base(func(r *pb.LookupRouteRequest) { r.MaxReplicas = MaxReplicasRequested + 1 }), DetailMaxReplicas},
		// At the limit: accepted by the limit checks.
		{"ids at limit", base(func(r *pb.LookupRouteRequest) { r.HashScheme, r.ModelId, r.TenantId, r.AdapterId = at, at, at, at }), ""},
		{"chain at limit", base(func(r *pb.LookupRouteRequest) { r.BlockHashes = make([]uint64, MaxChainLength) }), ""},
		{"tokens at limit", base(func(r *pb.LookupRouteRequest) { r.BlockHashes, r.TokenIds = nil, make([]uint32, MaxTokens) }), ""},
		{"counts value at limit", base(func(r *pb.LookupRouteRequest) { r.BlockTokenCounts = []uint32{MaxBlockSize, 1} }), ""},
		{"max_replicas at limit", base(func(r *pb.LookupRouteRequest) { r.MaxReplicas = MaxReplicasRequested }), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			called := false
			node := &fakeNode{lookup: func(req *index.LookupRequest, res *index.Result) { called = true; match(req, res) }}
			r, err := newSvc(node, nil).LookupRoute(context.Background(), c.req)
			if err != nil {
				t.Fatalf("error %v: lookups fail open", err)
			}
			if c.detail != "" {
				if r.ReasonCode != pb.ReasonCode_NO_HINT || r.Detail != c.detail || called {
					t.Fatalf("got %v %q (index consulted: %t), want NO_HINT %q before any index work", r.ReasonCode, r.Detail, called, c.detail)
				}
				if c.detail != DetailCountsZero && !strings.Contains(c.detail, "Max") {
					t.Fatalf("detail %q does not name the limit", c.detail)
				}
				return
			}
			if checkLookup(c.req) != "" {
				t.Fatalf("refused at the limit: %q", checkLookup(c.req))
			}
		})
	}
}

func TestLimits_IngestIDFieldsAndRequestLimitsAtTheBound(t *testing.T) {
	pol := policy.Default()
	long := strings.Repeat("x", MaxIDBytes+1)
	for _, field := range []string{"replica_id", "hash_scheme", "model_id", "tenant_id", "adapter_id"} {
		e := stored()
		switch field {
		case "replica_id":
			e.ReplicaId = long
		case "hash_scheme":
			e.HashScheme = long
		case "model_id":
			e.ModelId = long
		case "tenant_id":
			e.TenantId = long
		case "adapter_id":
			e.AdapterId = long
		}
		_, rej, err := EventsFromPB(&pb.IngestRequest{Events: []*pb.BlockEvent{e}}, &pol, testNow)
		if err != nil || len(rej) != 1 || !strings.Contains(rej[0].Reason, field) || !strings.Contains(rej[0].Reason, "256") {
			t.Errorf("%s over MaxIDBytes: err=%v rej=%v", field, err, rej)
		}
	}
	// Exactly at the request-level bounds: accepted.
	evs := make([]*pb.BlockEvent, MaxEventsPerRequest)
	for i := range evs {
		evs[i] = stored()
	}
	if _, rej, err := EventsFromPB(&pb.IngestRequest{Events: evs, RequestId: strings.Repeat("i", MaxRequestIDBytes)}, &pol, testNow); err != nil || len(rej) != 0 {
		t.Errorf("MaxEventsPerRequest events and a MaxRequestIDBytes id: err=%v, %d rejections", err, len(rej))
	}
	blocks := make([]*pb.BlockEvent, MaxBlocksPerRequest/MaxChainLength)
	for i := range blocks {
		blocks[i] = with(func(e *pb.BlockEvent) { e.BlockHashes, e.BlockTokenCounts = make([]uint64, MaxChainLength), nil })
	}
	if _, _, err := EventsFromPB(&pb.IngestRequest{Events: blocks}, &pol, testNow); err != nil {
		t.Errorf("exactly MaxBlocksPerRequest blocks: %v", err)
	}
	// token_ids count toward MaxBlocksPerRequest too.
	tok := make([]*pb.BlockEvent, 2)
	for i := range tok {
		tok[i] = with(func(e *pb.BlockEvent) {
			e.BlockHashes, e.BlockTokenCounts, e.TokenIds, e.BlockSize = nil, nil, seq(MaxTokens), 1
		})
	}
	if _, _, err := EventsFromPB(&pb.IngestRequest{Events: tok}, &pol, testNow); err == nil || !strings.Contains(err.Error(), "MaxBlocksPerRequest") {
		t.Errorf("fingerprinted blocks over MaxBlocksPerRequest: %v", err)
	}
	// Stats: schemes and request id.
	s := goodStats()
	s.HashSchemes = make([]string, MaxSchemesPerStats+1)
	for i := range s.HashSchemes {
		s.HashSchemes[i] = "s"
	}
	if _, rej, _ := StatsFromPB(&pb.ReportReplicaStatsRequest{Stats: []*pb.ReplicaStats{s}}, testNow); len(rej) != 1 || !strings.Contains(rej[0].Reason, "over the limit of 16") {
		t.Errorf("hash_schemes over MaxSchemesPerStats: %v", rej)
	}
	if _, _, err := StatsFromPB(&pb.ReportReplicaStatsRequest{Stats: []*pb.ReplicaStats{goodStats()}, RequestId: strings.Repeat("i", MaxRequestIDBytes+1)}, testNow); err == nil {
		t.Error("stats request_id over MaxRequestIDBytes accepted")
	}
}

// A message over MaxMessageBytes is refused by gRPC itself with
// RESOURCE_EXHAUSTED before any server code runs, LookupRoute included:
// grpc-go checks the length prefix against the server-wide limit and writes
// the status in RecvMsg, so the fail-open handler never sees the call. This
// pins the documented exception (limits.go, the proto) with the production
// server options; a message just under the limit still reaches LookupRoute.
func TestLimits_MessageOverMaxMessageBytesRefusedByGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(BaseServerOptions()...)
	node := &fakeNode{lookup: match}
	var lookups atomic.Int32
	node.lookup = func(req *index.LookupRequest, res *index.Result) { lookups.Add(1); match(req, res) }
	pb.RegisterInferenceCacheServer(gs, newSvc(node, nil))
	go gs.Serve(lis)
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewInferenceCacheClient(cc)
	big := &pb.IngestRequest{Events: []*pb.BlockEvent{with(func(e *pb.BlockEvent) { e.ReplicaId = strings.Repeat("r", MaxMessageBytes) })}}
	if _, err = c.Ingest(context.Background(), big); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Ingest over MaxMessageBytes: %v, want RESOURCE_EXHAUSTED", err)
	}
	if node.ingested != nil {
		t.Fatal("the Ingest handler ran")
	}

	lookup := func(promptBytes int) (*pb.LookupRouteResponse, error) {
		return c.LookupRoute(context.Background(), &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TokenIds: []uint32{1}, PromptText: strings.Repeat("a", promptBytes)})
	}
	if _, err := lookup(MaxMessageBytes); status.Code(err) != codes.ResourceExhausted || lookups.Load() != 0 {
		t.Fatalf("LookupRoute over MaxMessageBytes: %v (handler ran %d times), want RESOURCE_EXHAUSTED from gRPC", err, lookups.Load())
	}
	r, err := lookup(MaxMessageBytes - 64)
	if err != nil || r.GetReasonCode() != pb.ReasonCode_NO_HINT || r.GetDetail() != DetailPromptTooLong {
		t.Fatalf("LookupRoute just under MaxMessageBytes: %v %q %v, want NO_HINT %q", r.GetReasonCode(), r.GetDetail(), err, DetailPromptTooLong)
	}
}
