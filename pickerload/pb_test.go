package pickerload_test

import (
	"testing"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/pickerload"
)

// FillOthers sums every picker but the asker into the answer's load
// entries, adds an entry only for a hinted replica that has none, and
// keeps the entries sorted by replica id.
func TestView_FillOthersLeavesTheAskerOut(t *testing.T) {
	s, _ := newStore(0)
	put(t, s, pickerload.Report{PickerID: "me", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 9, 900, 9)}})
	put(t, s, pickerload.Report{PickerID: "a", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 1, 100, 2), load("r2", 2, 300, 0), load("r4", 5, 500, 5)}})
	put(t, s, pickerload.Report{PickerID: "b", Sequence: 1, Loads: []pickerload.ReplicaLoad{load("r1", 1, 50, 1)}})
	resp := &pb.LookupRouteResponse{
		Replicas: []*pb.ReplicaHint{{ReplicaId: "r2"}, {ReplicaId: "r3"}},
		Loads:    []*pb.ReplicaLoad{{ReplicaId: "r1", WaitingRequests: 7}, {ReplicaId: "r9"}},
	}
	s.At().FillOthers(resp, "me")
	type row struct {
		id                string
		pre, run, pickers uint32
		tok               uint64
		waiting           uint32
	}
	want := []row{
		{id: "r1", pre: 2, tok: 150, run: 3, pickers: 2, waiting: 7}, // a + b, not me; its own stats kept
		{id: "r2", pre: 2, tok: 300, run: 0, pickers: 1},             // hinted, no entry: added
		{id: "r9"}, // no other picker's load
	}
	// r3 is hinted but no picker reports it; r4 has load but is neither
	// hinted nor in the answer: neither gets an entry.
	if len(resp.Loads) != len(want) {
		t.Fatalf("loads %v, want %d entries", resp.Loads, len(want))
	}
	for i, w := range want {
		l := resp.Loads[i]
		got := row{id: l.ReplicaId, pre: l.OthersPrefillingRequests, tok: l.OthersPrefillTokens, run: l.OthersRunningRequests, pickers: l.OthersPickers, waiting: l.WaitingRequests}
		if got != w {
			t.Errorf("loads[%d] = %+v, want %+v", i, got, w)
		}
	}
}
