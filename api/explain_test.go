package api

import (
	"context"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// explainServer serves a real index over gRPC with the production server
// options, fed through the API: a and b hold the 64-token prompt (4
// blocks), c its first block only. a reports fresh stats (pressure 0.4,
// queue 7 waiting / 3 running, hit rate 0.6 for tenant t); b's stats are
// 31 s old, past statsFreshness (30 s); c reports none.
func explainServer(t *testing.T) (pb.InferenceCacheClient, *index.Index) {
	t.Helper()
	pol := policy.Default()
	pol.MinimumMatchedTokens = 16
	ix := index.New(pol)
	cc := grpcServer(t, BaseServerOptions(), func(gs *grpc.Server) {
		pb.RegisterInferenceCacheServer(gs, NewService(Config{Backend: isoNode{ix}}))
	})
	c := pb.NewInferenceCacheClient(cc)
	now := time.Now().UnixMilli()
	ev := func(rep string, toks []uint32) *pb.BlockEvent {
		return &pb.BlockEvent{Kind: pb.BlockEvent_STORED, ReplicaId: rep, HashScheme: "vllm", ModelId: "m", TenantId: "t", TokenIds: toks, BlockSize: 16, ObservedAtMs: now}
	}
	ctx := context.Background()
	if r, err := c.Ingest(ctx, &pb.IngestRequest{Events: []*pb.BlockEvent{ev("a", seq(64)), ev("b", seq(64)), ev("c", seq(16))}}); err != nil || r.Accepted != 3 {
		t.Fatalf("ingest: %v %v", r, err)
	}
	r, err := c.ReportReplicaStats(ctx, &pb.ReportReplicaStatsRequest{Stats: []*pb.ReplicaStats{
		{ReplicaId: "a", ModelId: "m", HashSchemes: []string{"vllm"}, Pressure: 0.4, TenantHitRate: map[string]float64{"t": 0.6},
			ObservedAtMs: now, WaitingRequests: 7, RunningRequests: 3},
		{ReplicaId: "b", ModelId: "m", HashSchemes: []string{"vllm"}, Pressure: 0.9,
			ObservedAtMs: now - 31_000, WaitingRequests: 50, RunningRequests: 60},
	}})
	if err != nil || r.Accepted != 2 {
		t.Fatalf("stats: %v %v", r, err)
	}
	return c, ix
}

// With explain, each hint's factors reproduce its score from first
// principles (contract §5.4, ranking v2), matching_at_depth and total_replicas
// are those of the hand-built index, and the queue shows only where the
// stats are fresh; without explain no hint carries factors.
func TestLookupRoute_ExplainFactorsReproduceScoreOverGRPC(t *testing.T) {
	c, _ := explainServer(t)
	req := &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TenantId: "t", TokenIds: seq(64), Slo: &pb.Slo{TtftMs: 100}, Explain: true}
	resp, err := c.LookupRoute(context.Background(), req)
	if err != nil || resp.ReasonCode != pb.ReasonCode_PREFIX_MATCH || len(resp.Replicas) != 3 {
		t.Fatalf("lookup: %v %v", resp, err)
	}
	pol := policy.Default()
	// By hand: a and b run 4 blocks, so 2 replicas reach their depth; c
	// runs 1 block, which all 3 reach. The serving set is {a, b, c}.
	want := map[string]struct {
		tokens, mad      uint32
		pressure         float64 // of fresh stats, else 0
		fresh            bool
		waiting, running uint32
	}{
		"a": {64, 2, 0.4, true, 7, 3},
		"b": {64, 2, 0, false, 0, 0},
		"c": {16, 3, 0, false, 0, 0},
	}
	seen := map[string]bool{}
	for _, h := range resp.Replicas {
		w, ok := want[h.ReplicaId]
		if !ok || seen[h.ReplicaId] {
			t.Fatalf("unexpected hint %v", h)
		}
		seen[h.ReplicaId] = true
		e := h.Factors
		if e == nil {
			t.Fatalf("%s: no explain with explain set", h.ReplicaId)
		}
		if e.RankingVersion != "v2" || e.MatchingAtDepth != w.mad || e.TotalReplicas != 3 || e.StatsFresh != w.fresh || e.AffinityPick || e.TenantHitRate != 0 {
			t.Errorf("%s: explain %v, want v2, matching %d of 3, stats fresh %t", h.ReplicaId, e, w.mad, w.fresh)
		}
		if h.MatchedTokens != w.tokens || h.WaitingRequests != w.waiting || h.RunningRequests != w.running || h.Pressure != w.pressure {
			t.Errorf("%s: tokens %d queue %d/%d pressure %v, want %d, %d/%d, %v", h.ReplicaId, h.MatchedTokens, h.WaitingRequests, h.RunningRequests, h.Pressure, w.tokens, w.waiting, w.running, w.pressure)
		}
		// Each factor from its definition (the age the hint reports, the
		// default policy, the hand-built index), then the product.
		wantFresh := max(0, 1-float64(h.AgeMs)/float64(pol.EvictionTTL.Milliseconds()))
		wantPF := 1.0
		if w.fresh {
			wantPF = 1 - pol.PressureWeight*w.pressure
		}
		wantBias := 1 + wantFresh*pol.SLOTightBias // ttft 100 ms < 200 ms: tight
		wantDP := 1 - float64(w.mad)/3
		for _, f := range []struct {
			name      string
			got, want float64
		}{
			{"freshness", e.Freshness, wantFresh}, {"hint freshness", h.Freshness, wantFresh},
			{"pressure factor", e.PressureFactor, wantPF}, {"slo bias", e.SloBias, wantBias}, {"distinguishing power", e.DistinguishingPower, wantDP},
			{"score", h.Score, float64(w.tokens) * wantFresh * wantPF * wantBias * wantDP},
			{"product of the returned factors", float64(h.MatchedTokens) * e.Freshness * e.PressureFactor * e.SloBias * e.DistinguishingPower, h.Score},
		} {
			if math.Abs(f.got-f.want) > 1e-9 {
				t.Errorf("%s: %s %v, want %v", h.ReplicaId, f.name, f.got, f.want)
			}
		}
	}

	req.Explain = false
	off, err := c.LookupRoute(context.Background(), req)
	if err != nil || off.ReasonCode != pb.ReasonCode_PREFIX_MATCH || len(off.Replicas) != 3 {
		t.Fatalf("lookup without explain: %v %v", off, err)
	}
	for _, h := range off.Replicas {
		if h.Factors != nil {
			t.Errorf("%s: explain %v without explain set", h.ReplicaId, h.Factors)
		}
		if w := want[h.ReplicaId]; h.WaitingRequests != w.waiting || h.RunningRequests != w.running {
			t.Errorf("%s without explain: queue %d/%d, want %d/%d", h.ReplicaId, h.WaitingRequests, h.RunningRequests, w.waiting, w.running)
		}
	}
}

// TENANT_HOT explains itself by the tenant's hit rate, which is its score,
// and carries the replica's fresh queue.
func TestLookupRoute_ExplainTenantHotOverGRPC(t *testing.T) {
	c, _ := explainServer(t)
	resp, err := c.LookupRoute(context.Background(), &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TenantId: "t", TokenIds: seq(5000)[4000:4064], Explain: true})
	if err != nil || resp.ReasonCode != pb.ReasonCode_TENANT_HOT || len(resp.Replicas) != 1 {
		t.Fatalf("lookup: %v %v", resp, err)
	}
	h := resp.Replicas[0]
	if h.ReplicaId != "a" || h.Score != 0.6 || h.Factors == nil || h.Factors.TenantHitRate != 0.6 || h.Factors.AffinityPick ||
		!h.Factors.StatsFresh || h.Factors.TotalReplicas != 3 || h.WaitingRequests != 7 || h.RunningRequests != 3 {
		t.Fatalf("tenant-hot hint %v", h)
	}
}

// A stats write carrying a string that is not UTF-8 goes through the
// lenient decoding; the valid entry beside it keeps its queue.
func TestReportReplicaStats_LenientDecodingKeepsQueue(t *testing.T) {
	ix := index.New(policy.Default())
	cc := grpcServer(t, BaseServerOptions(), func(gs *grpc.Server) {
		pb.RegisterInferenceCacheServer(gs, NewService(Config{Backend: isoNode{ix}}))
	})
	entry := func(replica string) []byte {
		var e []byte
		e = appendString(e, 1, replica)
		e = appendString(e, 2, "m")
		e = appendString(e, 3, "vllm")
		e = protowire.AppendTag(e, 8, protowire.VarintType)
		e = protowire.AppendVarint(e, 11)
		e = protowire.AppendTag(e, 9, protowire.VarintType)
		return protowire.AppendVarint(e, 2)
	}
	var body []byte
	for _, r := range []string{"bad-\xff", "good"} {
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendBytes(body, entry(r))
	}
	var resp pb.ReportReplicaStatsResponse
	if err := cc.Invoke(context.Background(), "/inferencecache.v1.InferenceCache/ReportReplicaStats", body, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
		t.Fatalf("ReportReplicaStats: %v", err)
	}
	if resp.Accepted != 1 || len(resp.Rejected) != 1 || resp.Rejected[0].EventIndex != 0 {
		t.Fatalf("response %v, want entry 0 rejected and 1 accepted", &resp)
	}
	v := ix.View()
	defer v.Release()
	var got []index.ReplicaStats
	_ = v.Stats(func(s index.ReplicaStats) error { got = append(got, s); return nil })
	if len(got) != 1 || got[0].ReplicaID != "good" || got[0].WaitingRequests != 11 || got[0].RunningRequests != 2 {
		t.Fatalf("stored stats %+v, want good with queue 11/2", got)
	}
}

// BenchmarkLookupRouteExplain is the handler over a real index (no
// network) where 16 replicas match a 64-token prompt at four depths, each
// with fresh stats: the response's own cost without and with explain
// (BENCHMARKS.md, "Explain").
func BenchmarkLookupRouteExplain(b *testing.B) {
	pol := policy.Default()
	pol.MinimumMatchedTokens = 16
	ix := index.New(pol)
	s := NewService(Config{Backend: isoNode{ix}})
	now := time.Now().UnixMilli()
	for r := range 16 {
		id := "replica-" + string(rune('a'+r))
		ix.ApplyEvents([]index.BlockEvent{{Kind: index.Stored, ReplicaID: id, Partition: index.Partition{Scheme: "vllm", Model: "m", Tenant: "t"},
			BlockHashes: []uint64{1, 2, 3, 4}[:4-r%4], BlockTokenCounts: []uint32{16, 16, 16, 16}[:4-r%4], ObservedAtMs: now}})
		ix.ApplyStats([]index.ReplicaStats{{ReplicaID: id, ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: float64(r) / 32,
			ObservedAtMs: now, WaitingRequests: uint32(r), RunningRequests: 2}})
	}
	for _, explain := range []bool{false, true} {
		name := "explain=off"
		if explain {
			name = "explain=on"
		}
		b.Run(name, func(b *testing.B) {
			req := &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TenantId: "t", BlockHashes: []uint64{1, 2, 3, 4}, Explain: explain}
			ctx := context.Background()
			b.ReportAllocs()
			var resp *pb.LookupRouteResponse
			for b.Loop() {
				resp, _ = s.LookupRoute(ctx, req)
			}
			if len(resp.Replicas) != 4 || (resp.Replicas[0].Factors != nil) != explain {
				b.Fatalf("response %v", resp)
			}
		})
	}
}
