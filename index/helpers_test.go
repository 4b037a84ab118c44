package index

import (
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/policy"
)

// Test fixtures: small hand-picked hashes and a policy whose numbers make
// hand-worked scores easy (TTL 1000 s, so age 100 s → freshness 0.9).

const t0 = int64(1_000_000_000) // a "now" far from zero, ms

var (
	vllm = Partition{Scheme: "vllm", Model: "m", Tenant: "t"}
)

func testPolicy() policy.Policy {
	p := policy.Default()
	p.EvictionTTL = 1000 * time.Second
	p.MinimumMatchedTokens = 1
	p.RoutingFloorScore = "0"
	return p
}

func stored(rep string, p Partition, seen int64, hashes ...uint64) BlockEvent {
	counts := make([]uint32, len(hashes))
	for i := range counts {
		counts[i] = 16
	}
	return BlockEvent{Kind: Stored, ReplicaID: rep, Partition: p, BlockHashes: hashes, BlockTokenCounts: counts, ObservedAtMs: seen}
}

func lookup(ix *Index, req LookupRequest) Result {
	var r Result
	ix.Lookup(&req, &r)
	return r
}

func hintIDs(r Result) []string {
	out := []string{}
	for _, h := range r.Hints {
		out = append(out, h.ReplicaID)
	}
	return out
}

func approx(t *testing.T, name string, got, want float64) {
	t.Helper()
	d := got - want
	if d < 0 {
		d = -d
	}
	if d > 1e-9 {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}
