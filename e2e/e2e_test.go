package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
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

func modelsDir() string {
	d, _ := filepath.Abs("../../shared/data/tokenizers")
	if _, err := os.Stat(d); err != nil {
		return ""
	}
	return d
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	// Two apply workers whatever the machine's CPU count, so a large
	// batch takes the parallel apply (MetricsCountParallelApplyAndLogBytes).
	extra := []string{"--apply-workers", "2"}
	if d := modelsDir(); d != "" {
		extra = append(extra, "--models-dir", d)
	}
	c := startCluster(t, 3, extra...)
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

func checkHealthReflection(t *testing.T, c *cluster) {
	for _, p := range c.procs {
		hc := healthpb.NewHealthClient(p.conn)
		for _, svc := range []string{"", "inferencecache.v1.InferenceCache", "inferencecache.v1.Cluster"} {
			ctx, cancel := ctxT(5 * time.Second)
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			cancel()
			if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("%s health(%q) = %v, %v; want SERVING", p.id, svc, r, err)
			}
		}
	}
	rc := reflectionpb.NewServerReflectionClient(c.procs[0].conn)
	ctx, cancel := ctxT(5 * time.Second)
	defer cancel()
	st, err := rc.ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	joined := strings.Join(names, ",")
	for _, want := range []string{"inferencecache.v1.Cluster", "inferencecache.v1.InferenceCache", "grpc.health.v1.Health"} {
		if !strings.Contains(joined, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
}

func checkReasonCodes(t *testing.T, c *cluster) {
	n1, n2, n3 := c.procs[0], c.procs[1], c.procs[2]
	ctx, cancel := ctxT(10 * time.Second)
	defer cancel()
	// r-a is hot for tenant t (hit rate 0.9 ≥ tenantHotMinHitRate 0.2).
	sr, err := n3.ic.ReportReplicaStats(ctx, &pb.ReportReplicaStatsRequest{Stats: []*pb.ReplicaStats{
		{ReplicaId: "r-a", ModelId: model, HashSchemes: []string{scheme}, Pressure: 0, TenantHitRate: map[string]float64{tenant: 0.9}},
	}})
	if err != nil || sr.Accepted != 1 {
		t.Fatalf("stats: %v %v", sr, err)
	}
	c.waitSameDigest(10*time.Second, n1, n2, n3)

	cases := []struct {
		name    string
		req     *pb.LookupRouteRequest
		want    pb.ReasonCode
		replica string
	}{
		{"prefix match", lookupReq(tenant, chainA), pb.ReasonCode_PREFIX_MATCH, "r-a"},
		{"tenant hot", lookupReq(tenant, novel), pb.ReasonCode_TENANT_HOT, "r-a"},
		{"affinity", lookupReq("t2", novel), pb.ReasonCode_AFFINITY_HINT, ""},
		{"unknown scheme", &pb.LookupRouteRequest{HashScheme: "sglang", ModelId: model, TenantId: tenant, TokenIds: novel}, pb.ReasonCode_UNKNOWN_SCHEME, ""},
		{"unknown model", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: "other", TenantId: tenant, TokenIds: novel}, pb.ReasonCode_UNKNOWN_MODEL, ""},
		{"unknown tenant", lookupReq("nobody", novel), pb.ReasonCode_UNKNOWN_TENANT, ""},
		{"unknown adapter", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, TenantId: tenant, AdapterId: "lora-x", TokenIds: novel}, pb.ReasonCode_UNKNOWN_ADAPTER, ""},
		{"no hint (empty scheme)", &pb.LookupRouteRequest{ModelId: model, TenantId: tenant, TokenIds: chainA}, pb.ReasonCode_NO_HINT, ""},
	}
	for _, tc := range cases {
		for _, p := range c.procs {
			r := lookup(t, p, tc.req)
			if r.ReasonCode != tc.want {
				t.Errorf("%s on %s: reason %v (%s), want %v", tc.name, p.id, r.ReasonCode, r.Detail, tc.want)
				continue
			}
			if tc.replica != "" && (len(r.Replicas) == 0 || r.Replicas[0].ReplicaId != tc.replica) {
				t.Errorf("%s on %s: replicas %v, want %s first", tc.name, p.id, r.Replicas, tc.replica)
			}
			switch tc.want {
			case pb.ReasonCode_AFFINITY_HINT:
				if len(r.Replicas) != 1 {
					t.Errorf("affinity on %s: %d replicas, want exactly 1", p.id, len(r.Replicas))
				}
			case pb.ReasonCode_TENANT_HOT:
				if r.Replicas[0].MatchedTokens != 0 {
					t.Errorf("tenant hot on %s: matched_tokens %d, want 0", p.id, r.Replicas[0].MatchedTokens)
				}
			case pb.ReasonCode_UNKNOWN_SCHEME, pb.ReasonCode_UNKNOWN_MODEL, pb.ReasonCode_UNKNOWN_TENANT, pb.ReasonCode_UNKNOWN_ADAPTER, pb.ReasonCode_NO_HINT:
				if len(r.Replicas) != 0 {
					t.Errorf("%s on %s: %d replicas, want none", tc.name, p.id, len(r.Replicas))
				}
			}
		}
	}

	// NO_HINT from the index itself: with affinity routing disabled (a
	// policy change through the log) a novel prefix of tenant t2 has no
	// fallback left.
	get, err := n1.ic.GetCachePolicy(ctx, &pb.GetCachePolicyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	get.AffinityRouting = "Disabled"
	set, err := n2.ic.SetCachePolicy(ctx, &pb.SetCachePolicyRequest{Policy: get})
	if err != nil || set.Version != get.Version+1 || set.AffinityRouting != "Disabled" {
		t.Fatalf("SetCachePolicy: %v %v (was version %d)", set, err, get.Version)
	}
	c.waitSameDigest(10*time.Second, n1, n2, n3)
	for _, p := range c.procs {
		if r := lookup(t, p, lookupReq("t2", novel)); r.ReasonCode != pb.ReasonCode_NO_HINT || len(r.Replicas) != 0 {
			t.Errorf("affinity disabled on %s: %v", p.id, r)
		}
		got, err := p.ic.GetCachePolicy(ctx, &pb.GetCachePolicyRequest{})
		if err != nil || got.Version != set.Version || got.AffinityRouting != "Disabled" {
			t.Errorf("%s policy after set: %v %v", p.id, got, err)
		}
	}
	// Unknown enum strings in a policy are refused naming the knob.
	bad := proto.Clone(set).(*pb.CachePolicy)
	bad.EvictionPolicy = "MRU"
	if _, err := n1.ic.SetCachePolicy(ctx, &pb.SetCachePolicyRequest{Policy: bad}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "evictionPolicy") {
		t.Errorf("policy MRU: %v", err)
	}
	set.AffinityRouting = "Enabled"
	if _, err := n3.ic.SetCachePolicy(ctx, &pb.SetCachePolicyRequest{Policy: set}); err != nil {
		t.Fatal(err)
	}
	c.waitSameDigest(10*time.Second, n1, n2, n3)
}

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
		{"prompt for unknown model", &pb.LookupRouteRequest{HashScheme: scheme, ModelId: "no-such-model", PromptText: "hello"}, ""},
	}
	if modelsDir() == "" {
		lookups[len(lookups)-1].detail = api.DetailNoTokenizer
	} else {
		lookups[len(lookups)-1].detail = api.DetailNoModelTokenizer
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

func checkFailover(t *testing.T, c *cluster) {
	leader := c.waitLeader(10 * time.Second)
	var others []*proc
	for _, p := range c.procs {
		if p != leader {
			others = append(others, p)
		}
	}
	var calls, errs, matches atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range others {
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func(p *proc) {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := ctxT(2 * time.Second)
					r, err := p.ic.LookupRoute(ctx, lookupReq(tenant, chainA))
					cancel()
					calls.Add(1)
					if err != nil {
						errs.Add(1)
						t.Logf("lookup on %s: %v", p.id, err)
						continue
					}
					if r.ReasonCode == pb.ReasonCode_PREFIX_MATCH {
						matches.Add(1)
					}
				}
			}(p)
		}
	}
	time.Sleep(300 * time.Millisecond)
	c.kill(leader)
	killedAt := time.Now()

	// Ingest resumes after the election: the SDK retries (same request
	// id) across the survivors.
	sdk, err := client.New(client.Config{Addrs: []string{others[0].grpc, others[1].grpc}, WriteRetry: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	ctx, cancel := ctxT(20 * time.Second)
	defer cancel()
	ir, err := sdk.Ingest(ctx, &pb.IngestRequest{Events: []*pb.BlockEvent{stored("r-d", tenant, toks(30000, 128))}})
	if err != nil || ir.Accepted != 1 {
		t.Fatalf("ingest after leader kill: %v %v", ir, err)
	}
	t.Logf("ingest committed %v after the leader was killed", time.Since(killedAt).Round(time.Millisecond))
	newLeader := c.waitLeader(10*time.Second, leader)
	if newLeader == leader {
		t.Fatal("killed node still leader")
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if errs.Load() != 0 {
		t.Errorf("%d of %d lookups failed during failover; want 0", errs.Load(), calls.Load())
	}
	if matches.Load() == 0 {
		t.Errorf("no PREFIX_MATCH among %d lookups", calls.Load())
	}
	t.Logf("failover: %d lookups, %d errors, %d PREFIX_MATCH", calls.Load(), errs.Load(), matches.Load())

	// The killed node restarts from its data and catches up to the same
	// digest, including the write made while it was down.
	c.start(leader)
	d := c.waitSameDigest(30*time.Second, c.procs...)
	t.Logf("converged at index %d digest %x", d.AppliedIndex, d.Digest)
	r := lookup(t, leader, lookupReq(tenant, toks(30000, 128)))
	if r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || r.Replicas[0].ReplicaId != "r-d" {
		t.Errorf("restarted node misses the write made while it was down: %v", r)
	}
}

func runBin(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("inference-cache %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// The operator CLI against the live cluster: ingest from stdin, lookup,
// status, policy get, and a snapshot save → inspect → restore round trip.
func checkCLI(t *testing.T, c *cluster) {
	addrs := []string{"--addr", c.procs[0].grpc, "--addr", c.procs[1].grpc, "--addr", c.procs[2].grpc}
	ev := `[{"kind":"STORED","replica_id":"r-cli","hash_scheme":"vllm","model_id":"m","tenant_id":"t","token_ids":[` + joinInts(toks(40000, 128)) + `],"block_size":16},
	        {"kind":"STORED","replica_id":"","hash_scheme":"vllm","model_id":"m","block_hashes":["1"]}]`
	// One of the two events is invalid: the JSON lists it and the exit
	// status says part of the input was refused.
	ic := exec.Command(binPath, append([]string{"ingest", "--json"}, addrs...)...)
	ic.Stdin = strings.NewReader(ev)
	outB, err := ic.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(ee.Stderr), "1 events rejected") {
		t.Fatalf("ingest with a rejected event: err %v, want exit 1 naming the rejection", err)
	}
	out := string(outB)
	var ir struct {
		Accepted int `json:"accepted"`
		Rejected []struct {
			EventIndex int    `json:"event_index"`
			Reason     string `json:"reason"`
		} `json:"rejected"`
	}
	if err := json.Unmarshal([]byte(out), &ir); err != nil || ir.Accepted != 1 || len(ir.Rejected) != 1 || ir.Rejected[0].Reason != "replica_id is empty" {
		t.Fatalf("ingest output %s (%v)", out, err)
	}
	c.waitSameDigest(10*time.Second, c.procs...)
	out = runBin(t, "", "lookup", "--addr", c.procs[2].grpc, "--model", "m", "--tenant", "t", "--tokens", joinInts(toks(40000, 128)), "--block-size", "16")
	if !strings.Contains(out, "PREFIX_MATCH") || !strings.Contains(out, "r-cli") {
		t.Fatalf("lookup table:\n%s", out)
	}
	// An election may be in progress (the 2-core machine can delay a
	// heartbeat while three servers start): ask again until one leader
	// shows, as an operator would.
	for deadline := time.Now().Add(10 * time.Second); ; {
		out = runBin(t, "", append([]string{"status"}, addrs...)...)
		if strings.Count(out, "Leader") >= 1 && strings.Count(out, "Voter") == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status table:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Each node's digest comes with the applied index it was computed at
	// (status and digest are separate calls, so APPLIED may differ).
	if got := len(regexp.MustCompile(`(?m)\s[0-9a-f]{16}@[1-9][0-9]*$`).FindAllString(out, -1)); got != 3 {
		t.Fatalf("status table: %d of 3 rows end in DIGEST@INDEX:\n%s", got, out)
	}
	out = runBin(t, "", "policy", "get", "--addr", c.procs[0].grpc)
	if !strings.Contains(out, "kind: CachePolicy") || !strings.Contains(out, "maxReplicas: 4") {
		t.Fatalf("policy get:\n%s", out)
	}
	checkPolicySet(t, c, out)
	snap := filepath.Join(t.TempDir(), "backup.snap")
	before := c.waitSameDigest(10*time.Second, c.procs...)
	out = runBin(t, "", "snapshot", "save", snap, "--addr", c.procs[1].grpc)
	// One line saying what was written, not the inspect table.
	if !regexp.MustCompile(`^wrote \S*backup\.snap: [1-9]\d* bytes, applied index [1-9]\d* \(term \d+\), .*digest ` + fmt.Sprintf("%016x", before.Digest) + ` \(verified\)\n$`).MatchString(out) {
		t.Fatalf("snapshot save printed:\n%s\nwant one line naming the file, bytes, applied index and digest", out)
	}
	out = runBin(t, "", "snapshot", "inspect", snap, "--json")
	var meta struct {
		AppliedIndex uint64 `json:"applied_index"`
		Digest       string `json:"digest"`
	}
	if err := json.Unmarshal([]byte(out), &meta); err != nil || meta.Digest != fmt.Sprintf("%016x", before.Digest) {
		t.Fatalf("inspect %s (%v), want digest %016x", out, err, before.Digest)
	}
	// Standard input is not a terminal: without --yes nothing is restored.
	ingestOut := runBin(t, `[{"kind":"STORED","replica_id":"r-after","hash_scheme":"vllm","model_id":"m","tenant_id":"t","token_ids":[`+joinInts(toks(60000, 128))+`],"block_size":16}]`,
		append([]string{"ingest"}, addrs...)...)
	if !regexp.MustCompile(`accepted\s+1 `).MatchString(ingestOut) {
		t.Fatalf("ingest after the backup: %s", ingestOut)
	}
	changed := c.waitSameDigest(10*time.Second, c.procs...)
	if o, err := exec.Command(binPath, append([]string{"snapshot", "restore", snap}, addrs...)...).CombinedOutput(); err == nil ||
		!strings.Contains(string(o), "index and policy") || !strings.Contains(string(o), "--yes") {
		t.Fatalf("restore without --yes off a terminal: err %v\n%s\nwant a refusal that says what is replaced and asks for --yes", err, o)
	}
	if d := c.waitSameDigest(10*time.Second, c.procs...); d.Digest != changed.Digest {
		t.Fatalf("a refused restore changed the digest %x → %x", changed.Digest, d.Digest)
	}
	runBin(t, "", append([]string{"snapshot", "restore", snap, "--yes"}, addrs...)...)
	after := c.waitSameDigest(20*time.Second, c.procs...)
	if after.Digest != before.Digest {
		t.Errorf("digest after restoring the backup %x, want %x", after.Digest, before.Digest)
	}
	// A corrupt file is refused before anything changes.
	b, _ := os.ReadFile(snap)
	b[len(b)/2] ^= 0xff
	bad := snap + ".bad"
	_ = os.WriteFile(bad, b, 0o644)
	if out, err := exec.Command(binPath, "snapshot", "restore", bad, "--yes", "--addr", c.procs[0].grpc).CombinedOutput(); err == nil {
		t.Errorf("corrupt snapshot restored: %s", out)
	}
	for _, p := range c.procs {
		if r := lookup(t, p, lookupReq(tenant, chainA)); r.ReasonCode != pb.ReasonCode_PREFIX_MATCH {
			t.Errorf("%s after restore: %v", p.id, r)
		}
	}
}

// checkPolicySet: an unchanged file commits nothing; a file written from
// an older version than the cluster's is refused unless --force. got is
// the output of `policy get` (a "# version N" first line).
func checkPolicySet(t *testing.T, c *cluster, got string) {
	t.Helper()
	dir := t.TempDir()
	cur := filepath.Join(dir, "current.yaml")
	if err := os.WriteFile(cur, []byte(got), 0o644); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^# version (\d+)\n`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("policy get output has no version line:\n%s", got)
	}
	v0, _ := strconv.ParseUint(m[1], 10, 64)
	addr := "--addr=" + c.procs[0].grpc
	out := runBin(t, "", "policy", "set", cur, addr)
	if want := fmt.Sprintf("policy unchanged: %s equals the policy in force (version %d); nothing committed\n", cur, v0); out != want {
		t.Fatalf("policy set of the unchanged policy printed %q, want %q", out, want)
	}
	if again := runBin(t, "", "policy", "get", addr); again != got {
		t.Fatalf("an unchanged policy set moved the policy:\n%s\nbefore:\n%s", again, got)
	}
	edited := filepath.Join(dir, "edited.yaml")
	if err := os.WriteFile(edited, []byte(strings.Replace(got, "maxReplicas: 4", "maxReplicas: 3", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := runBin(t, "", "policy", "set", edited, addr); !strings.Contains(out, fmt.Sprintf("# version %d\n", v0+1)) || !strings.Contains(out, "maxReplicas: 3") {
		t.Fatalf("policy set of an edited file printed:\n%s\nwant version %d with maxReplicas 3", out, v0+1)
	}
	// current.yaml still says version v0: setting it now would undo the edit.
	o, err := exec.Command(binPath, "policy", "set", cur, addr).CombinedOutput()
	if err == nil || !strings.Contains(string(o), fmt.Sprintf("written from policy version %d, and the cluster's policy is now version %d", v0, v0+1)) || !strings.Contains(string(o), "--force") {
		t.Fatalf("policy set of a stale file: err %v\n%s\nwant a refusal naming both versions and --force", err, o)
	}
	if out := runBin(t, "", "policy", "set", cur, "--force", addr); !strings.Contains(out, fmt.Sprintf("# version %d\n", v0+2)) || !strings.Contains(out, "maxReplicas: 4") {
		t.Fatalf("policy set --force of the stale file printed:\n%s\nwant version %d with maxReplicas 4 back", out, v0+2)
	}
}

// checkParallelMetrics ingests one batch large enough for the parallel
// apply (≥ 1,024 blocks, into a partition that exists) and reads every
// node's /metrics: each applied it on several workers and counts the log
// bytes it appended.
func checkParallelMetrics(t *testing.T, c *cluster) {
	ctx, cancel := ctxT(20 * time.Second)
	defer cancel()
	if _, err := c.procs[0].ic.Ingest(ctx, &pb.IngestRequest{Events: []*pb.BlockEvent{stored("r-par-0", "t-par", toks(300000, 16))}}); err != nil {
		t.Fatal(err)
	}
	var big []*pb.BlockEvent
	for i := 0; i < 160; i++ { // 160 events × 8 blocks
		big = append(big, stored(fmt.Sprintf("r-par-%d", i%4), "t-par", toks(400000+1000*i, 128)))
	}
	if r, err := c.procs[0].ic.Ingest(ctx, &pb.IngestRequest{Events: big}); err != nil || r.Accepted != 160 {
		t.Fatalf("large ingest: %v %v", r, err)
	}
	c.waitSameDigest(10*time.Second, c.procs...)
	for _, p := range c.procs {
		resp, err := http.Get("http://" + p.http + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, name := range []string{"inferencecache_apply_parallel_batches_total", "inferencecache_raft_log_appended_bytes_total"} {
			m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(body)
			if m == nil {
				t.Fatalf("%s: no %s in /metrics", p.id, name)
			}
			if v, err := strconv.ParseFloat(string(m[1]), 64); err != nil || v < 1 {
				t.Errorf("%s: %s = %s, want ≥ 1", p.id, name, m[1])
			}
		}
	}
}

func joinInts(v []uint32) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(int(x))
	}
	return strings.Join(s, ",")
}
