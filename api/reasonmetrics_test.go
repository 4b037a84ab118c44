package api

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/metrics"
	"github.com/inference-cache/inference-cache/policy"
)

// lookupCallsByReason reads inferencecache_lookup_route_calls_total from
// m's registry, by its reason_code label.
func lookupCallsByReason(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "inferencecache_lookup_route_calls_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			out[reasonLabel(mt)] = mt.GetCounter().GetValue()
		}
	}
	if len(out) == 0 {
		t.Fatal("no inferencecache_lookup_route_calls_total in the registry")
	}
	return out
}

func reasonLabel(m *dto.Metric) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == "reason_code" {
			return l.GetValue()
		}
	}
	return ""
}

// lookup_route_calls_total counts every answer under its own reason_code:
// lookups producing each reason code of the real index (a different number
// of times each) show up as exactly those counts.
func TestLookupRoute_CallsCountedPerReasonCode(t *testing.T) {
	p := policy.Default()
	// The counts are under test, not the budget: a lookup slowed past the
	// default 10 ms by a loaded machine (-race, parallel packages) would
	// be answered with the budget's NO_HINT instead of its reason code.
	p.LookupTimeout = 10 * time.Second
	ix := index.New(p)
	now := time.Now().UnixMilli()
	part := index.Partition{Scheme: "vllm", Model: "m", Tenant: "t"}
	hs, bg, tc := make([]uint64, 8), make([]uint64, 8), make([]uint32, 8)
	for i := range hs {
		hs[i], bg[i], tc[i] = uint64(100+i), uint64(900+i), 16
	}
	ix.ApplyEvents([]index.BlockEvent{
		{Kind: index.Stored, ReplicaID: "r-a", Partition: part, BlockHashes: hs, BlockTokenCounts: tc, ObservedAtMs: now},
		{Kind: index.Stored, ReplicaID: "r-bg", Partition: part, BlockHashes: bg, BlockTokenCounts: tc, ObservedAtMs: now},
	})
	// r-hot serves tenant t2 with a high hit rate (stats only, no blocks).
	ix.ApplyStats([]index.ReplicaStats{{ReplicaID: "r-hot", ModelID: "m", HashSchemes: []string{"vllm"},
		TenantHitRate: map[string]float64{"t2": 0.9}, ObservedAtMs: now}})
	n := &indexNode{ix: ix}
	n.pol = p
	m := metrics.New()
	s := NewService(Config{Backend: n, Metrics: m})

	novel := []uint64{5000, 5001, 5002}
	req := func(scheme, model, tenant, adapter string, chain []uint64) *pb.LookupRouteRequest {
		return &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, TenantId: tenant, AdapterId: adapter, BlockHashes: chain}
	}
	cases := []struct {
		want pb.ReasonCode
		req  *pb.LookupRouteRequest
	}{
		{pb.ReasonCode_NO_HINT, req("vllm", "m", "t", "", nil)}, // no key
		{pb.ReasonCode_PREFIX_MATCH, req("vllm", "m", "t", "", hs)},
		{pb.ReasonCode_TENANT_HOT, req("vllm", "m", "t2", "", novel)},
		{pb.ReasonCode_AFFINITY_HINT, req("vllm", "m", "t", "", novel)},
		{pb.ReasonCode_UNKNOWN_SCHEME, req("sglang", "m", "t", "", hs)},
		{pb.ReasonCode_UNKNOWN_MODEL, req("vllm", "other", "t", "", hs)},
		{pb.ReasonCode_UNKNOWN_TENANT, req("vllm", "m", "nobody", "", hs)},
		{pb.ReasonCode_UNKNOWN_ADAPTER, req("vllm", "m", "t", "lora-1", hs)},
	}
	if len(cases) != len(pb.ReasonCode_name) {
		t.Fatalf("%d cases for %d reason codes: cover the new ones", len(cases), len(pb.ReasonCode_name))
	}
	want := map[string]float64{"UNKNOWN": 0}
	for i, c := range cases {
		for range i + 1 { // a different count per reason code
			r, err := s.LookupRoute(context.Background(), c.req)
			if err != nil || r.ReasonCode != c.want {
				t.Fatalf("case %v: got %v %q (err %v)", c.want, r.GetReasonCode(), r.GetDetail(), err)
			}
		}
		want[c.want.String()] = float64(i + 1)
	}
	got := lookupCallsByReason(t, m)
	for code, n := range want {
		if got[code] != n {
			t.Errorf("lookup_route_calls_total{reason_code=%q} = %v, want %v", code, got[code], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("labels %v, want exactly %v", got, want)
	}
}
