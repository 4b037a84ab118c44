package raftnode

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// shareCalls keeps each picker's newest report, in queue order, and packs
// them into calls of at most the byte budget; a report over the budget
// goes alone. Hand-worked: queue a1 b1 a3 c1 a2 b2 with c1 over the
// budget → a3 (a's newest, though a2 came later), c1 alone, b2.
func TestShareCalls_NewestPerPickerWithinTheBudget(t *testing.T) {
	rep := func(p string, seq uint64, replicas int) *pb.ReportPickerLoadRequest {
		r := &pb.ReportPickerLoadRequest{PickerId: p, Sequence: seq}
		for i := range replicas {
			r.Loads = append(r.Loads, &pb.PickerReplicaLoad{ReplicaId: fmt.Sprintf("r%03d", i), RunningRequests: 1})
		}
		return r
	}
	a1, b1, a3, c1, a2, b2 := rep("a", 1, 10), rep("b", 1, 10), rep("a", 3, 10), rep("c", 1, 100), rep("a", 2, 10), rep("b", 2, 10)
	budget := proto.Size(a3) + proto.Size(b2) // a3 and b2 would fit one call; c1 alone is over it
	if proto.Size(c1) <= budget {
		t.Fatalf("c1 is %d bytes, want it over the budget %d", proto.Size(c1), budget)
	}
	name := func(calls [][]*pb.ReportPickerLoadRequest) string {
		var b strings.Builder
		for _, c := range calls {
			b.WriteString("[")
			for _, r := range c {
				fmt.Fprintf(&b, " %s%d", r.PickerId, r.Sequence)
			}
			b.WriteString(" ]")
		}
		return b.String()
	}
	if got, want := name(shareCalls([]*pb.ReportPickerLoadRequest{a1, b1, a3, c1, a2, b2}, budget)), "[ a3 ][ c1 ][ b2 ]"; got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
	if got, want := name(shareCalls([]*pb.ReportPickerLoadRequest{a3, b2}, budget)), "[ a3 b2 ]"; got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
}
