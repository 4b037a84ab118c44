package index

import (
	"slices"
	"testing"
)

// IncludeLoad lists every replica whose fresh stats serve the request's
// (scheme, model), replica id ascending, whatever the answer: here a, whose
// chain matches, and c, which holds nothing of it; b's stats are stale and
// d serves another model. Without IncludeLoad nothing is listed, and a key
// too short for any block (NO_HINT) still gets the list.
func TestLookup_IncludeLoadListsTheServingSetsQueue(t *testing.T) {
	ix := New(testPolicy())
	ix.ApplyEvents([]BlockEvent{stored("a", vllm, t0, 1, 2), stored("b", vllm, t0, 1), stored("c", vllm, t0, 9)})
	ix.ApplyStats([]ReplicaStats{
		{ReplicaID: "c", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.5, ObservedAtMs: t0 - 2_000, WaitingRequests: 4, RunningRequests: 9},
		{ReplicaID: "a", ModelID: "m", HashSchemes: []string{"vllm"}, Pressure: 0.25, ObservedAtMs: t0, WaitingRequests: 1, RunningRequests: 2},
		{ReplicaID: "b", ModelID: "m", HashSchemes: []string{"vllm"}, ObservedAtMs: t0 - 31_000, WaitingRequests: 50},
		{ReplicaID: "d", ModelID: "other", HashSchemes: []string{"vllm"}, ObservedAtMs: t0, WaitingRequests: 70},
	})
	want := []Load{
		{ReplicaID: "a", WaitingRequests: 1, RunningRequests: 2, Pressure: 0.25, AgeMs: 0},
		{ReplicaID: "c", WaitingRequests: 4, RunningRequests: 9, Pressure: 0.5, AgeMs: 2_000},
	}
	r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2}, NowMs: t0, IncludeLoad: true})
	if r.Reason != PrefixMatch || !slices.Equal(r.Loads, want) {
		t.Fatalf("%v, loads %+v; want PREFIX_MATCH with %+v", r.Reason, r.Loads, want)
	}
	if r := lookup(ix, LookupRequest{Partition: vllm, BlockHashes: []uint64{1, 2}, NowMs: t0}); len(r.Loads) != 0 {
		t.Fatalf("loads %+v without IncludeLoad", r.Loads)
	}
	r = lookup(ix, LookupRequest{Partition: vllm, TokenIDs: []uint32{1, 2, 3}, NowMs: t0, IncludeLoad: true})
	if r.Reason != NoHint || !slices.Equal(r.Loads, want) {
		t.Fatalf("short key: %v, loads %+v; want NO_HINT with %+v", r.Reason, r.Loads, want)
	}
}
