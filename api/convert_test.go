package api

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

const testNow = int64(1_700_000_000_000)

func stored() *pb.BlockEvent {
	return &pb.BlockEvent{Kind: pb.BlockEvent_STORED, ReplicaId: "r1", HashScheme: "vllm", ModelId: "m", TenantId: "t",
		BlockHashes: []uint64{11, 22}, BlockTokenCounts: []uint32{16, 16}, ObservedAtMs: testNow - 5}
}

func with(f func(e *pb.BlockEvent)) *pb.BlockEvent { e := stored(); f(e); return e }

func seq(n int) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = uint32(i)
	}
	return s
}

func TestEventsFromPB_RejectsEachInvalidEventWithReason(t *testing.T) {
	long := strings.Repeat("x", MaxIDBytes+1)
	cases := []struct {
		name   string
		ev     *pb.BlockEvent
		reason string
	}{
		{"unknown kind", with(func(e *pb.BlockEvent) { e.Kind = 9 }), "kind 9 is not STORED, REMOVED or CLEARED"},
		{"unspecified kind", with(func(e *pb.BlockEvent) { e.Kind = 0 }), "kind 0 is not"},
		{"empty replica", with(func(e *pb.BlockEvent) { e.ReplicaId = "" }), "replica_id is empty"},
		{"empty scheme", with(func(e *pb.BlockEvent) { e.HashScheme = "" }), "hash_scheme is empty"},
		{"empty model", with(func(e *pb.BlockEvent) { e.ModelId = "" }), "model_id is empty"},
		{"long replica", with(func(e *pb.BlockEvent) { e.ReplicaId = long }), "replica_id is 257 bytes, over the limit of 256"},
		{"long tenant", with(func(e *pb.BlockEvent) { e.TenantId = long }), "tenant_id is 257 bytes"},
		{"long adapter", with(func(e *pb.BlockEvent) { e.AdapterId = long }), "adapter_id is 257 bytes"},
		{"NUL in replica", with(func(e *pb.BlockEvent) { e.ReplicaId = "r\x00x" }), "replica_id holds control character U+0000 at byte 1"},
		{"escape in model", with(func(e *pb.BlockEvent) { e.ModelId = "m\x1b[2J" }), "model_id holds control character U+001B at byte 1"},
		{"C1 in tenant", with(func(e *pb.BlockEvent) { e.TenantId = "t\u0085" }), "tenant_id holds control character U+0085 at byte 1"},
		{"DEL in scheme", with(func(e *pb.BlockEvent) { e.HashScheme = "\x7f" }), "hash_scheme holds control character U+007F at byte 0"},
		{"newline in adapter", with(func(e *pb.BlockEvent) { e.AdapterId = "a\nb" }), "adapter_id holds control character U+000A at byte 1"},
		{"zero-width space in replica", with(func(e *pb.BlockEvent) { e.ReplicaId = "r\u200b1" }), "replica_id holds invisible format character U+200B at byte 1"},
		{"bidi override in model", with(func(e *pb.BlockEvent) { e.ModelId = "evil\u202eXX" }), "model_id holds invisible format character U+202E at byte 4"},
		{"blank replica", with(func(e *pb.BlockEvent) { e.ReplicaId = " " }), "replica_id is blank"},
		{"ideographic space tenant", with(func(e *pb.BlockEvent) { e.TenantId = "\u3000" }), "tenant_id is blank"},
		{"mismatched", with(func(e *pb.BlockEvent) { e.BlockTokenCounts = []uint32{16} }), "block_token_counts has 1 entries, block_hashes 2"},
		{"zero count", with(func(e *pb.BlockEvent) { e.BlockTokenCounts = []uint32{16, 0} }), "block_token_counts[1] is 0"},
		{"huge count", with(func(e *pb.BlockEvent) { e.BlockTokenCounts = []uint32{16, 5000} }), "block_token_counts[1] is 5000, over the block limit of 4096"},
		{"negative time", with(func(e *pb.BlockEvent) { e.ObservedAtMs = -1 }), "observed_at_ms is negative (-1)"},
		{"future time", with(func(e *pb.BlockEvent) { e.ObservedAtMs = math.MaxInt64 }), "ahead of the server clock"},
		{"no blocks", with(func(e *pb.BlockEvent) { e.BlockHashes, e.BlockTokenCounts = nil, nil }), "no blocks"},
		{"both keys", with(func(e *pb.BlockEvent) { e.TokenIds = seq(16); e.BlockSize = 16 }), "not both"},
		{"block size 0", with(func(e *pb.BlockEvent) { e.BlockHashes, e.BlockTokenCounts, e.TokenIds = nil, nil, seq(32) }), "block_size 0 must be between 1 and 4096"},
		{"block size huge", with(func(e *pb.BlockEvent) {
			e.BlockHashes, e.BlockTokenCounts, e.TokenIds, e.BlockSize = nil, nil, seq(32), 4097
		}), "block_size 4097"},
		{"tokens over limit", with(func(e *pb.BlockEvent) {
			e.BlockHashes, e.BlockTokenCounts, e.TokenIds, e.BlockSize = nil, nil, seq(MaxTokens+1), 16
		}), "token_ids holds 262145 tokens, over the limit of 262144"},
		{"tokens under a block", with(func(e *pb.BlockEvent) {
			e.BlockHashes, e.BlockTokenCounts, e.TokenIds, e.BlockSize = nil, nil, seq(15), 16
		}), "less than one block of 16"},
		{"chain over limit", with(func(e *pb.BlockEvent) {
			e.BlockHashes, e.BlockTokenCounts = make([]uint64, MaxChainLength+1), nil
		}), "block_hashes holds 8193 blocks, over the chain limit of 8192"},
		{"cumulative overflow", with(func(e *pb.BlockEvent) { e.PrefixTokensBefore = math.MaxUint32 }), "overflows uint32"},
		{"cleared with blocks", with(func(e *pb.BlockEvent) { e.Kind = pb.BlockEvent_CLEARED }), "CLEARED carries no blocks"},
	}
	pol := policy.Default()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := &pb.IngestRequest{Events: []*pb.BlockEvent{stored(), c.ev, stored()}}
			evs, rej, err := EventsFromPB(req, &pol, testNow)
			if err != nil {
				t.Fatalf("refused whole: %v", err)
			}
			if len(evs) != 2 {
				t.Errorf("valid events = %d, want 2 (the valid neighbours still commit)", len(evs))
			}
			if len(rej) != 1 || rej[0].EventIndex != 1 || !strings.Contains(rej[0].Reason, c.reason) {
				t.Fatalf("rejections = %v, want one for event 1 containing %q", rej, c.reason)
			}
		})
	}
}

func TestEventsFromPB_ConvertsValidEvents(t *testing.T) {
	pol := policy.Default()
	pol.BlockSize = map[string]uint32{"m8": 8}
	toks := seq(40)
	key, _ := fingerprint.Compute(toks, 16)
	req := &pb.IngestRequest{Events: []*pb.BlockEvent{
		stored(),
		{Kind: pb.BlockEvent_REMOVED, ReplicaId: "r2", HashScheme: "sglang", ModelId: "m8", BlockHashes: []uint64{7, 8, 9}, PrefixTokensBefore: 4, ObservedAtMs: 0},
		{Kind: pb.BlockEvent_STORED, ReplicaId: "r3", HashScheme: "vllm", ModelId: "m", AdapterId: "lora", TokenIds: toks, BlockSize: 16, ObservedAtMs: testNow},
		{Kind: pb.BlockEvent_CLEARED, ReplicaId: "r4"},
	}}
	evs, rej, err := EventsFromPB(req, &pol, testNow)
	if err != nil || len(rej) != 0 {
		t.Fatalf("err=%v rej=%v", err, rej)
	}
	want := []index.BlockEvent{
		{Kind: index.Stored, ReplicaID: "r1", Partition: index.Partition{Scheme: "vllm", Model: "m", Tenant: "t"},
			BlockHashes: []uint64{11, 22}, BlockTokenCounts: []uint32{16, 16}, ObservedAtMs: testNow - 5},
		// counts absent: each block counts the model's policy block size (8);
		// observed_at 0: stamped with the server clock.
		{Kind: index.Removed, ReplicaID: "r2", Partition: index.Partition{Scheme: "sglang", Model: "m8"},
			BlockHashes: []uint64{7, 8, 9}, BlockTokenCounts: []uint32{8, 8, 8}, PrefixTokensBefore: 4, ObservedAtMs: testNow},
		// 40 tokens at block size 16: two full blocks, the 8-token tail dropped.
		{Kind: index.Stored, ReplicaID: "r3", Partition: index.Partition{Scheme: "vllm", Model: "m", Adapter: "lora"},
			BlockHashes: key.BlockHashes, BlockTokenCounts: []uint32{16, 16}, ObservedAtMs: testNow},
		{Kind: index.Cleared, ReplicaID: "r4", ObservedAtMs: testNow},
	}
	if len(key.BlockHashes) != 2 {
		t.Fatalf("fingerprint of 40 tokens has %d blocks, want 2", len(key.BlockHashes))
	}
	if d := cmp.Diff(want, evs); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

func TestEventsFromPB_RefusesOversizeRequestWhole(t *testing.T) {
	pol := policy.Default()
	many := make([]*pb.BlockEvent, MaxEventsPerRequest+1)
	for i := range many {
		many[i] = stored()
	}
	big := make([]*pb.BlockEvent, 33)
	for i := range big {
		big[i] = with(func(e *pb.BlockEvent) { e.BlockHashes, e.BlockTokenCounts = make([]uint64, 8000), nil })
	}
	cases := []struct {
		name  string
		req   *pb.IngestRequest
		limit string
	}{
		{"events", &pb.IngestRequest{Events: many}, "MaxEventsPerRequest"},
		{"blocks", &pb.IngestRequest{Events: big}, "MaxBlocksPerRequest"},
		{"request id", &pb.IngestRequest{Events: many[:1], RequestId: strings.Repeat("i", MaxRequestIDBytes+1)}, "request_id at most 128 bytes"},
		{"request id control", &pb.IngestRequest{Events: many[:1], RequestId: "req\x00-1"}, "request_id holds control character U+0000 at byte 3"},
		{"request id blank", &pb.IngestRequest{Events: many[:1], RequestId: "   "}, "request_id not blank"},
		{"request id unicode blank", &pb.IngestRequest{Events: many[:1], RequestId: "\u3000\u2003"}, "request_id not blank"},
		{"request id zero-width", &pb.IngestRequest{Events: many[:1], RequestId: "\u200b"}, "request_id holds invisible format character U+200B at byte 0"},
		{"request id BOM", &pb.IngestRequest{Events: many[:1], RequestId: "\ufeffreq"}, "U+FEFF at byte 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs, rej, err := EventsFromPB(c.req, &pol, testNow)
			var re *RequestError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), c.limit) {
				t.Fatalf("err = %v, want a RequestError naming %s", err, c.limit)
			}
			if evs != nil || rej != nil {
				t.Fatalf("refused request must return nothing, got %d events %d rejections", len(evs), len(rej))
			}
		})
	}
}

func goodStats() *pb.ReplicaStats {
	return &pb.ReplicaStats{ReplicaId: "r1", ModelId: "m", HashSchemes: []string{"vllm"}, Pressure: 0.5,
		TenantHitRate: map[string]float64{"t": 0.4}, ObservedAtMs: testNow, Endpoint: "http://r1:8000"}
}

// The queue passes through as reported, up to MaxEngineRequests
// inclusive.
func TestStatsFromPB_KeepsQueueUpToTheLimit(t *testing.T) {
	s := goodStats()
	s.WaitingRequests, s.RunningRequests = MaxEngineRequests, 7
	sts, rej, err := StatsFromPB(&pb.ReportReplicaStatsRequest{Stats: []*pb.ReplicaStats{s}}, testNow)
	if err != nil || len(rej) != 0 || len(sts) != 1 {
		t.Fatalf("stats=%d rej=%v err=%v", len(sts), rej, err)
	}
	if sts[0].WaitingRequests != MaxEngineRequests || sts[0].RunningRequests != 7 {
		t.Fatalf("queue %d/%d, want %d/7", sts[0].WaitingRequests, sts[0].RunningRequests, MaxEngineRequests)
	}
}

func TestStatsFromPB_RejectsEachInvalidEntry(t *testing.T) {
	mod := func(f func(s *pb.ReplicaStats)) *pb.ReplicaStats { s := goodStats(); f(s); return s }
	tenants := map[string]float64{}
	for i := 0; i <= MaxTenantsPerStats; i++ {
		tenants[strings.Repeat("t", 1+i%7)+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676))] = 0.1
	}
	cases := []struct {
		name   string
		s      *pb.ReplicaStats
		reason string
	}{
		{"empty replica", mod(func(s *pb.ReplicaStats) { s.ReplicaId = "" }), "replica_id is empty"},
		{"control in replica", mod(func(s *pb.ReplicaStats) { s.ReplicaId = "r\tx" }), "replica_id holds control character U+0009 at byte 1"},
		{"empty model", mod(func(s *pb.ReplicaStats) { s.ModelId = "" }), "model_id is empty"},
		{"empty scheme", mod(func(s *pb.ReplicaStats) { s.HashSchemes = []string{"vllm", ""} }), "hash_schemes[1] is empty"},
		{"pressure over 1", mod(func(s *pb.ReplicaStats) { s.Pressure = 1.5 }), "pressure is 1.5, must be between 0 and 1"},
		{"pressure NaN", mod(func(s *pb.ReplicaStats) { s.Pressure = math.NaN() }), "pressure is NaN"},
		{"hit rate negative", mod(func(s *pb.ReplicaStats) { s.TenantHitRate = map[string]float64{"t": -0.1} }), `tenant_hit_rate["t"] is -0.1`},
		{"too many tenants", mod(func(s *pb.ReplicaStats) { s.TenantHitRate = tenants }), "tenants, over the limit of 1024"},
		{"negative time", mod(func(s *pb.ReplicaStats) { s.ObservedAtMs = -5 }), "observed_at_ms is negative"},
		{"long endpoint", mod(func(s *pb.ReplicaStats) { s.Endpoint = strings.Repeat("e", MaxEndpointBytes+1) }), "endpoint is 1025 bytes"},
		{"waiting over the limit", mod(func(s *pb.ReplicaStats) { s.WaitingRequests = MaxEngineRequests + 1 }), "waiting_requests is 1000001, over the limit of 1000000 (MaxEngineRequests)"},
		{"running wrapped -1", mod(func(s *pb.ReplicaStats) { s.RunningRequests = math.MaxUint32 }), "running_requests is 4294967295, over the limit of 1000000"},
	}
	if len(tenants) != MaxTenantsPerStats+1 {
		t.Fatalf("test setup: %d tenants", len(tenants))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sts, rej, err := StatsFromPB(&pb.ReportReplicaStatsRequest{Stats: []*pb.ReplicaStats{c.s, goodStats()}}, testNow)
			if err != nil {
				t.Fatal(err)
			}
			if len(sts) != 1 || len(rej) != 1 || rej[0].EventIndex != 0 || !strings.Contains(rej[0].Reason, c.reason) {
				t.Fatalf("stats=%d rej=%v, want 1 valid and one rejection of entry 0 containing %q", len(sts), rej, c.reason)
			}
		})
	}
	many := make([]*pb.ReplicaStats, MaxStatsPerRequest+1)
	for i := range many {
		many[i] = goodStats()
	}
	if _, _, err := StatsFromPB(&pb.ReportReplicaStatsRequest{Stats: many}, testNow); err == nil || !strings.Contains(err.Error(), "MaxStatsPerRequest") {
		t.Fatalf("oversize stats request: err = %v", err)
	}
}

func TestPolicyPB_RoundTripAndEnums(t *testing.T) {
	p := policy.Default()
	p.BlockSize = map[string]uint32{"m": 32}
	p.EvictionPolicy = policy.LFU
	p.AffinityRouting = false
	p.RankingVersion = policy.RankingV1
	p.EvictionBatch = 16
	q := PolicyToPB(p)
	if q.AffinityRouting != "Disabled" || q.EvictionPolicy != "LFU" || q.RankingVersion != "v1" || q.EvictionBatch != 16 ||
		q.LookupTimeoutMs != 10 || q.EvictionTtlSeconds != 600 || q.MaxStalenessMs != 5000 || q.StatsFreshnessSeconds != 30 || q.SloTightThresholdMs != 200 {
		t.Fatalf("PolicyToPB = %v", q)
	}
	back, err := PolicyFromPB(q)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(p, back); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	q.AffinityRouting = "enabled"
	if _, err := PolicyFromPB(q); err == nil || !strings.Contains(err.Error(), "affinity_routing") {
		t.Fatalf("lower-case Enabled accepted: %v", err)
	}
	q.AffinityRouting = "Enabled"
	q.EvictionPolicy = "FIFO"
	var fe *policy.FieldError
	if _, err := PolicyFromPB(q); !errors.As(err, &fe) || fe.Field != "eviction_policy" {
		t.Fatalf("FIFO: %v", err)
	}
	q.EvictionPolicy = "LRU"
	q.RankingVersion = "v3"
	if _, err := PolicyFromPB(q); !errors.As(err, &fe) || fe.Field != "ranking_version" {
		t.Fatalf("v3: %v", err)
	}
	q.RankingVersion = "v2"
	q.LookupTimeoutMs = 0
	if _, err := PolicyFromPB(q); !errors.As(err, &fe) || fe.Field != "lookup_timeout_ms" || fe.Value != "0" {
		t.Fatalf("timeout 0: %v", err)
	}
	if _, err := PolicyFromPB(nil); err == nil {
		t.Fatal("nil policy accepted")
	}
}

// The empty tenant is a partition for stats as it is for blocks (contract §4.3:
// the key "" is the empty tenant): an engine configured without a tenant
// keeps its whole stats entry, hit rate included.
func TestStatsFromPB_EmptyTenantKeyIsTheEmptyTenant(t *testing.T) {
	s := goodStats()
	s.TenantHitRate = map[string]float64{"": 0.7, "team-a": 0.2}
	sts, rej, err := StatsFromPB(&pb.ReportReplicaStatsRequest{Stats: []*pb.ReplicaStats{s}}, testNow)
	if err != nil || len(rej) != 0 || len(sts) != 1 {
		t.Fatalf("stats=%d rej=%v err=%v; want the entry accepted", len(sts), rej, err)
	}
	if got := sts[0].TenantHitRate; len(got) != 2 || got[""] != 0.7 || got["team-a"] != 0.2 {
		t.Fatalf("hit rates %v, want the empty tenant at 0.7 and team-a at 0.2", got)
	}
	// Still refused: a key that is only spaces or holds a control character.
	for _, k := range []string{"  ", "a\x00b"} {
		s := goodStats()
		s.TenantHitRate = map[string]float64{k: 0.5}
		if _, rej, _ := StatsFromPB(&pb.ReportReplicaStatsRequest{Stats: []*pb.ReplicaStats{s}}, testNow); len(rej) != 1 || !strings.Contains(rej[0].GetReason(), "tenant_hit_rate key") {
			t.Fatalf("key %q: rejections %v, want one naming tenant_hit_rate key", k, rej)
		}
	}
}
