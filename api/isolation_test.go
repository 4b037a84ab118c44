package api

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// isoNode is a Backend over a real index, applying writes directly.
type isoNode struct{ ix *index.Index }

func (b isoNode) Lookup(req *index.LookupRequest, res *index.Result) { b.ix.Lookup(req, res) }
func (b isoNode) Credit(index.Partition, []uint64)                   {}
func (b isoNode) ReadState() raftnode.ReadState                      { return raftnode.ReadState{NodeID: "n1"} }
func (b isoNode) Ready() bool                                        { return true }
func (b isoNode) Policy() policy.Policy                              { return b.ix.Policy() }
func (b isoNode) Ingest(_ context.Context, _ string, evs []index.BlockEvent) (raftnode.WriteResult, error) {
	b.ix.ApplyEvents(evs)
	return raftnode.WriteResult{Index: 1}, nil
}
func (b isoNode) ReportStats(_ context.Context, _ string, st []index.ReplicaStats) (raftnode.WriteResult, error) {
	b.ix.ApplyStats(st)
	return raftnode.WriteResult{Index: 1}, nil
}
func (b isoNode) SetPolicy(_ context.Context, p policy.Policy) (policy.Policy, error) {
	b.ix.SetPolicy(p)
	return p, nil
}

// world builds a service where tenant "alpha" stored aTokens on its
// replicas and tenant "beta" stored its own prompt on its own replicas.
func world(t *testing.T, aTokens []uint32) *Service {
	t.Helper()
	pol := policy.Default()
	pol.MinimumMatchedTokens = 16
	pol.LookupTimeout = 10 * time.Second // not the budget's test (see below)
	s := NewService(Config{Backend: isoNode{index.New(pol)}})
	now := time.Now().UnixMilli()
	ev := func(rep, ten string, toks []uint32) *pb.BlockEvent {
		return &pb.BlockEvent{Kind: pb.BlockEvent_STORED, ReplicaId: rep, HashScheme: "vllm", ModelId: "m", TenantId: ten, TokenIds: toks, BlockSize: 16, ObservedAtMs: now}
	}
	_, err := s.Ingest(context.Background(), &pb.IngestRequest{Events: []*pb.BlockEvent{
		ev("alpha-0", "alpha", aTokens), ev("alpha-1", "alpha", aTokens[:64]),
		ev("beta-0", "beta", seq(2000)[1000:1128]),
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.ReportReplicaStats(context.Background(), &pb.ReportReplicaStatsRequest{Stats: []*pb.ReplicaStats{
		{ReplicaId: "alpha-0", ModelId: "m", HashSchemes: []string{"vllm"}, TenantHitRate: map[string]float64{"alpha": 0.9}, ObservedAtMs: now},
		{ReplicaId: "beta-0", ModelId: "m", HashSchemes: []string{"vllm"}, TenantHitRate: map[string]float64{"beta": 0.5}, ObservedAtMs: now},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTenantIsolation_IdenticalPromptsNeverCrossTenants: tenants alpha
// and beta send the identical prompt. Beta's answers never list alpha's
// replicas by prefix match or tenant-hot, never carry a score computed
// from alpha's blocks, never name alpha in detail text, and are the same
// whether or not alpha ever saw the prompt (alpha's data does not
// influence beta's answer on any path: prefix match, tenant-hot,
// affinity, diagnostics).
func TestTenantIsolation_IdenticalPromptsNeverCrossTenants(t *testing.T) {
	shared := seq(128)
	with := world(t, shared)              // alpha holds the shared prompt
	without := world(t, seq(5000)[4000:]) // alpha holds something else
	alphaReps := map[string]bool{"alpha-0": true, "alpha-1": true}

	// Alpha itself matches (the setup works).
	r, _ := with.LookupRoute(context.Background(), &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TenantId: "alpha", TokenIds: shared})
	if r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || len(r.Replicas) == 0 {
		t.Fatalf("alpha's own lookup: %v", r)
	}

	policies := map[string]func(p *policy.Policy){
		"defaults (tenant-hot, affinity on)": func(*policy.Policy) {},
		"tenant-hot off (affinity)":          func(p *policy.Policy) { p.EnableTenantHot = false },
		"tenant-hot and affinity off":        func(p *policy.Policy) { p.EnableTenantHot, p.AffinityRouting = false, false },
		"ranking v1":                         func(p *policy.Policy) { p.RankingVersion = "v1" },
		"chain matching off":                 func(p *policy.Policy) { p.ChainMatching = false },
	}
	reqs := map[string]*pb.LookupRouteRequest{
		"token_ids":         {HashScheme: "vllm", ModelId: "m", TenantId: "beta", TokenIds: shared},
		"half prompt":       {HashScheme: "vllm", ModelId: "m", TenantId: "beta", TokenIds: shared[:64]},
		"empty tenant":      {HashScheme: "vllm", ModelId: "m", TokenIds: shared},
		"unknown tenant":    {HashScheme: "vllm", ModelId: "m", TenantId: "gamma", TokenIds: shared},
		"adapter of beta":   {HashScheme: "vllm", ModelId: "m", TenantId: "beta", AdapterId: "lora", TokenIds: shared},
		"slo tight":         {HashScheme: "vllm", ModelId: "m", TenantId: "beta", TokenIds: shared, Slo: &pb.Slo{TtftMs: 50}},
		"many max_replicas": {HashScheme: "vllm", ModelId: "m", TenantId: "beta", TokenIds: shared, MaxReplicas: 64},
	}
	for pn, edit := range policies {
		for _, s := range []*Service{with, without} {
			p := s.node.Policy()
			edit(&p)
			// The budget is not what this test is about: under -race on
			// a loaded machine a lookup past the default 10 ms would
			// answer the budget's NO_HINT on one side only.
			p.LookupTimeout = 10 * time.Second
			s.node.(isoNode).ix.SetPolicy(p)
		}
		for rn, req := range reqs {
			a, _ := with.LookupRoute(context.Background(), req)
			b, _ := without.LookupRoute(context.Background(), req)
			where := pn + " / " + rn
			if req.TenantId != "" {
				for _, h := range a.Replicas {
					if alphaReps[h.ReplicaId] && (a.ReasonCode == pb.ReasonCode_PREFIX_MATCH || a.ReasonCode == pb.ReasonCode_TENANT_HOT) {
						t.Errorf("%s: beta got alpha's replica %s by %s", where, h.ReplicaId, a.ReasonCode)
					}
					if h.MatchedTokens > 0 && alphaReps[h.ReplicaId] {
						t.Errorf("%s: beta got matched tokens of alpha's replica %s", where, h.ReplicaId)
					}
				}
			}
			if strings.Contains(a.Detail, "alpha") {
				t.Errorf("%s: detail %q names alpha", where, a.Detail)
			}
			if a.ReasonCode != b.ReasonCode || a.Detail != b.Detail || len(a.Replicas) != len(b.Replicas) {
				t.Errorf("%s: beta's answer depends on alpha's prompts: %v %q %v vs %v %q %v", where, a.ReasonCode, a.Detail, a.Replicas, b.ReasonCode, b.Detail, b.Replicas)
				continue
			}
			for i := range a.Replicas {
				x, y := a.Replicas[i], b.Replicas[i]
				if x.ReplicaId != y.ReplicaId || x.Score != y.Score || x.MatchedTokens != y.MatchedTokens || x.MatchedBlocks != y.MatchedBlocks {
					t.Errorf("%s: hint %d differs with alpha's prompts: %v vs %v", where, i, x, y)
				}
			}
		}
	}
}

// The key rules have one owner and one wording: a request that breaks one
// gets the same detail from LookupRoute (which checks it before resolving
// the key) as the index gives a caller that asks it directly.
func TestLookupRoute_KeyRulesInTheIndexWords(t *testing.T) {
	ix := index.New(policy.Default())
	s := NewService(Config{Backend: isoNode{ix}})
	cases := []struct {
		name string
		req  *pb.LookupRouteRequest
		key  index.LookupRequest
		want string
	}{
		{"empty scheme", &pb.LookupRouteRequest{ModelId: "m", BlockHashes: []uint64{1}},
			index.LookupRequest{Partition: index.Partition{Model: "m"}, BlockHashes: []uint64{1}}, "hash_scheme is empty"},
		{"counts mismatch", &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", BlockHashes: []uint64{1, 2}, BlockTokenCounts: []uint32{16}},
			index.LookupRequest{Partition: index.Partition{Scheme: "vllm", Model: "m"}, BlockHashes: []uint64{1, 2}, BlockTokenCounts: []uint32{16}},
			"block_token_counts length differs from block_hashes"},
		{"no key", &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m"},
			index.LookupRequest{Partition: index.Partition{Scheme: "vllm", Model: "m"}}, "no key: give block_hashes, prefix_hash, token_ids or prompt_text"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := s.LookupRoute(context.Background(), c.req)
			if err != nil || r.ReasonCode != pb.ReasonCode_NO_HINT || r.Detail != c.want {
				t.Fatalf("LookupRoute: %v %q (%v), want NO_HINT %q", r.GetReasonCode(), r.GetDetail(), err, c.want)
			}
			var res index.Result
			c.key.NowMs = 1
			ix.Lookup(&c.key, &res)
			if res.Reason != index.NoHint || res.Detail != c.want {
				t.Fatalf("index: %v %q, want NO_HINT %q", res.Reason, res.Detail, c.want)
			}
		})
	}
}
