package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
)

// Under an LFU policy, PREFIX_MATCH lookups answered by a follower credit
// the matched blocks: the node batches the credits into a command that
// goes through the Raft log, and every node ends with exactly the state
// of an index that applied the same writes and those credits (the access
// counters are part of the digest).
func TestLookupRoute_LFUCreditsReachTheLogAndEveryNode(t *testing.T) {
	c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) { cfg.ExpireInterval = -1 })
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	fi := (l + 1) % 3
	f := c.Nodes[fi]

	p := c.Nodes[l].Policy()
	p.EvictionPolicy = policy.LFU
	// The budget is not what this test is about: a lookup cut off under a
	// loaded race-detector run would fail open and credit nothing.
	p.LookupTimeout = 10 * time.Second
	pol, err := c.Nodes[l].SetPolicy(c.Ctx(5*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	part := index.Partition{Scheme: "vllm", Model: "m", Tenant: "t"}
	hs, bg, tc := make([]uint64, 8), make([]uint64, 8), make([]uint32, 8)
	for i := range hs {
		hs[i], bg[i], tc[i] = uint64(1000+i), uint64(9000+i), 16
	}
	now := time.Now().UnixMilli()
	evs := []index.BlockEvent{
		{Kind: index.Stored, ReplicaID: "r-a", Partition: part, BlockHashes: hs, BlockTokenCounts: tc, ObservedAtMs: now},
		{Kind: index.Stored, ReplicaID: "r-bg", Partition: part, BlockHashes: bg, BlockTokenCounts: tc, ObservedAtMs: now},
	}
	if _, err := c.Nodes[l].Ingest(c.Ctx(5*time.Second), "seed", evs); err != nil {
		t.Fatal(err)
	}
	// The same writes applied to an index of the test's own: its digest
	// is the state every node must hold.
	model := index.New(pol)
	model.ApplyEvents(evs)
	before := model.Digest()
	idx0, _ := c.WaitConverged(10*time.Second, func(_, d uint64) bool { return d == before })

	svc := api.NewService(api.Config{Backend: api.NewNodeBackend(f.Node)})
	const lookups = 5
	for range lookups {
		r, err := svc.LookupRoute(context.Background(), &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: "m", TenantId: "t", BlockHashes: hs})
		if err != nil || r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || r.Replicas[0].MatchedBlocks != 8 {
			t.Fatalf("lookup on %s: %v %v, want PREFIX_MATCH of 8 blocks", f.ID, r, err)
		}
		model.Credit(part, hs)
	}
	want := model.Digest()
	if want == before {
		t.Fatal("crediting the model changed nothing: the digest does not cover access counters")
	}
	idx, _ := c.WaitConverged(10*time.Second, func(_, d uint64) bool { return d == want })
	if idx <= idx0 {
		t.Fatalf("state changed at applied index %d, not past %d: the credits did not come through the log", idx, idx0)
	}
	if m := f.Metrics(); m.CreditsDropped != 0 {
		t.Fatalf("%d credit batches dropped", m.CreditsDropped)
	}
}
