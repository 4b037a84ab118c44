package e2e

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

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
	// Unknown enum strings in a policy are refused naming the field and value as sent.
	bad := proto.Clone(set).(*pb.CachePolicy)
	bad.EvictionPolicy = "MRU"
	if _, err := n1.ic.SetCachePolicy(ctx, &pb.SetCachePolicyRequest{Policy: bad}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `eviction_policy="MRU"`) {
		t.Errorf("policy MRU: %v", err)
	}
	set.AffinityRouting = "Enabled"
	if _, err := n3.ic.SetCachePolicy(ctx, &pb.SetCachePolicyRequest{Policy: set}); err != nil {
		t.Fatal(err)
	}
	c.waitSameDigest(10*time.Second, n1, n2, n3)
}
