package e2e

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

func checkBadRequests(t *testing.T, c *cluster) {
	long := strings.Repeat("x", api.MaxIDBytes+1)
	lookups := []struct {
		name   string
		req    *pb.LookupRouteRequest
		detail string
	}{
		{"empty scheme", &pb.LookupRouteRequest{ModelId: model, TokenIds: chainA}, api.DetailNoScheme},
		{"no key", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model}, api.DetailNoKey},
		{"scheme too long", &pb.LookupRouteRequest{HashScheme: long, TokenIds: chainA}, api.DetailSchemeTooLong},
		{"model too long", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: long, TokenIds: chainA}, api.DetailModelTooLong},
		{"tenant too long", &pb.LookupRouteRequest{HashScheme: scheme, TenantId: long, TokenIds: chainA}, api.DetailTenantTooLong},
		{"adapter too long", &pb.LookupRouteRequest{HashScheme: scheme, AdapterId: long, TokenIds: chainA}, api.DetailAdapterTooLong},
		{"chain too long", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, BlockHashes: make([]uint64, api.MaxChainLength+1)}, api.DetailChainTooLong},
		{"counts too long", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, BlockHashes: []uint64{1}, BlockTokenCounts: make([]uint32, api.MaxChainLength+1)}, api.DetailCountsTooLong},
		{"counts mismatch", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, BlockHashes: []uint64{1, 2}, BlockTokenCounts: []uint32{16}}, api.DetailCountsMismatch},
		{"zero count", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, BlockHashes: []uint64{1, 2}, BlockTokenCounts: []uint32{16, 0}}, api.DetailCountsZero},
		{"huge count", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, BlockHashes: []uint64{1}, BlockTokenCounts: []uint32{4294967295}}, api.DetailCountsTooBig},
		{"too many tokens", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, TokenIds: make([]uint32, api.MaxTokens+1)}, api.DetailTokensTooLong},
		{"prompt too long", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, PromptText: strings.Repeat("a", api.MaxPromptBytes+1)}, api.DetailPromptTooLong},
		{"max replicas huge", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, TokenIds: chainA, MaxReplicas: 4294967295}, api.DetailMaxReplicas},
		{"prompt for unknown model", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: "no-such-model", PromptText: "hello"}, api.DetailNoModelTokenizer},
	}
	for _, tc := range lookups {
		r := lookup(t, c.procs[0], tc.req)
		if r.ReasonCode != pb.ReasonCode_NO_HINT || r.Detail != tc.detail || len(r.Replicas) != 0 {
			t.Errorf("lookup %s: %v %q, want NO_HINT %q", tc.name, r.ReasonCode, r.Detail, tc.detail)
		}
	}
	// Garbage prompt text (control characters, odd scripts) never errors.
	for _, text := range []string{"\x00\x01\x02\ufffd", "🙂🙃 ∑∫ \u202e abc \t\n", strings.Repeat("的", 3000)} {
		r := lookup(t, c.procs[1], &pb.LookupRouteRequest{HashScheme: scheme, ModelId: "qwen3", TenantId: tenant, PromptText: text})
		if len(r.Replicas) != 0 && r.ReasonCode == pb.ReasonCode_PREFIX_MATCH {
			t.Errorf("garbage prompt matched: %v", r)
		}
	}

	// Writes: per-event rejections with reasons; the valid event commits.
	ctx, cancel := ctxT(10 * time.Second)
	defer cancel()
	evs := []*pb.BlockEvent{
		{Kind: 7, ReplicaId: "r-x", HashScheme: scheme, ModelId: model, BlockHashes: []uint64{1}},
		{Kind: pb.BlockEvent_STORED, ReplicaId: "r-x", ModelId: model, BlockHashes: []uint64{1}},
		{Kind: pb.BlockEvent_STORED, ReplicaId: "r-x", HashScheme: scheme, ModelId: model, BlockHashes: []uint64{1, 2}, BlockTokenCounts: []uint32{16}},
		{Kind: pb.BlockEvent_STORED, ReplicaId: "r-x", HashScheme: scheme, ModelId: model, BlockHashes: []uint64{1}, BlockTokenCounts: []uint32{0}},
		{Kind: pb.BlockEvent_STORED, ReplicaId: "r-x", HashScheme: scheme, ModelId: model, BlockHashes: []uint64{1}, ObservedAtMs: -1},
		{Kind: pb.BlockEvent_STORED, ReplicaId: "r-x", HashScheme: scheme, ModelId: model, TokenIds: chainA},
		{Kind: pb.BlockEvent_STORED, ReplicaId: long, HashScheme: scheme, ModelId: model, BlockHashes: []uint64{1}},
		{Kind: pb.BlockEvent_STORED, ReplicaId: "r-x", HashScheme: scheme, ModelId: model, BlockHashes: make([]uint64, api.MaxChainLength+1)},
		{Kind: pb.BlockEvent_STORED, ReplicaId: "r-c", HashScheme: scheme, ModelId: model, TenantId: tenant, TokenIds: toks(7000, 64), BlockSize: 16},
	}
	wantReasons := []string{"kind 7", "hash_scheme is empty", "lengths must match", "block_token_counts[0] is 0",
		"observed_at_ms is negative", "block_size 0", "replica_id is 257 bytes", "over the chain limit of 8192"}
	ir, err := c.procs[2].ic.Ingest(ctx, &pb.IngestRequest{Events: evs})
	if err != nil {
		t.Fatalf("ingest with bad events: %v", err)
	}
	if ir.Accepted != 1 || len(ir.Rejected) != len(wantReasons) {
		t.Fatalf("accepted %d rejected %v", ir.Accepted, ir.Rejected)
	}
	for i, r := range ir.Rejected {
		if int(r.EventIndex) != i || !strings.Contains(r.Reason, wantReasons[i]) {
			t.Errorf("rejection %d: %v, want event %d %q", i, r, i, wantReasons[i])
		}
	}
	// Requests over a size limit are refused whole, naming the limit.
	many := make([]*pb.BlockEvent, api.MaxEventsPerRequest+1)
	for i := range many {
		many[i] = stored("r-y", tenant, chainA)
	}
	if _, err := c.procs[0].ic.Ingest(ctx, &pb.IngestRequest{Events: many}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "MaxEventsPerRequest") {
		t.Errorf("oversize ingest: %v", err)
	}
	manyStats := make([]*pb.ReplicaStats, api.MaxStatsPerRequest+1)
	for i := range manyStats {
		manyStats[i] = &pb.ReplicaStats{ReplicaId: "r-y", ModelId: model}
	}
	if _, err := c.procs[0].ic.ReportReplicaStats(ctx, &pb.ReportReplicaStatsRequest{Stats: manyStats}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "MaxStatsPerRequest") {
		t.Errorf("oversize stats: %v", err)
	}
	sr, err := c.procs[0].ic.ReportReplicaStats(ctx, &pb.ReportReplicaStatsRequest{Stats: []*pb.ReplicaStats{
		{ReplicaId: "r-y", ModelId: model, Pressure: 2}, {ReplicaId: "", ModelId: model}, {ReplicaId: "r-y", ModelId: model, TenantHitRate: map[string]float64{"t": -1}},
	}})
	if err != nil || sr.Accepted != 0 || len(sr.Rejected) != 3 {
		t.Errorf("bad stats: %v %v", sr, err)
	}
	// Nothing accepted earlier is lost: chain A still answers r-a on every
	// node, and the nodes still agree.
	c.waitSameDigest(10*time.Second, c.procs...)
	for _, p := range c.procs {
		if r := lookup(t, p, lookupReq(tenant, chainA)); r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || r.Replicas[0].ReplicaId != "r-a" {
			t.Errorf("%s after bad requests: %v", p.id, r)
		}
	}
	// IngestStream answers each request in order; a request refused whole
	// (over MaxEventsPerRequest) is answered as a refusal and the stream
	// goes on to the requests behind it.
	st, err := c.procs[1].ic.IngestStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oversize := &pb.IngestRequest{Events: make([]*pb.BlockEvent, api.MaxEventsPerRequest+1)}
	for i := range oversize.Events {
		oversize.Events[i] = stored("r-big", tenant, toks(0, 16))
	}
	reqs := []*pb.IngestRequest{
		{Events: []*pb.BlockEvent{stored("r-s", tenant, toks(20000, 16))}},
		oversize,
		{Events: []*pb.BlockEvent{stored("r-s", tenant, toks(21000, 32))}},
		{Events: []*pb.BlockEvent{stored("r-s", tenant, toks(22000, 48))}},
	}
	for _, r := range reqs {
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	_ = st.CloseSend()
	var prev uint64
	for i := range reqs {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("stream response %d: %v", i, err)
		}
		if i == 1 {
			if r.Accepted != 0 || len(r.Rejected) != 1 || !strings.HasPrefix(r.Rejected[0].Reason, api.WholeRequestRefused) ||
				!strings.Contains(r.Rejected[0].Reason, "MaxEventsPerRequest") {
				t.Fatalf("oversize request in the stream: %v", r)
			}
			continue
		}
		if r.Accepted != 1 || r.AppliedIndex <= prev {
			t.Fatalf("stream response %d: %v (previous index %d)", i, r, prev)
		}
		prev = r.AppliedIndex
	}
}
