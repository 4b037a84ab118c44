package raftnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/raftnode/forwardpb"
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

// A peer dates a passed-on report's expiry from ages_ms: with a 50 ms
// interval (expiry 100 ms), a report aged 60 ms is held for 40 ms more on
// the peer's clock, one aged 100 ms is not held at all, and a report
// without an age (an older sender) gets the whole 100 ms.
func TestShareLoad_ExpiryCountsTheSendersQueueTime(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	n := &Node{pickers: pickerload.New(pickerload.Config{Now: func() time.Time { return now }})}
	f := &forwardServer{n: n}
	rep := func(p string) *pb.ReportPickerLoadRequest {
		return &pb.ReportPickerLoadRequest{PickerId: p, Sequence: 1, IntervalMs: 50,
			Loads: []*pb.PickerReplicaLoad{{ReplicaId: "r1", RunningRequests: 1}}}
	}
	resp, err := f.ShareLoad(context.Background(), &forwardpb.ShareLoadRequest{
		Reports: []*pb.ReportPickerLoadRequest{rep("aged"), rep("expired"), rep("unaged")}, AgesMs: []uint32{60, 100}})
	if err != nil || resp.GetStored() != 2 || resp.GetIgnored() != 1 {
		t.Fatalf("ShareLoad = %v, %v; want 2 stored, 1 ignored (expired on arrival)", resp, err)
	}
	held := func() int { return int(n.pickers.At().Others("", "r1").Pickers) }
	if got := held(); got != 2 {
		t.Fatalf("held %d pickers, want 2 (aged, unaged)", got)
	}
	now = now.Add(40 * time.Millisecond) // 100 ms since "aged" first arrived
	if got := held(); got != 1 {
		t.Fatalf("40 ms later: %d pickers, want 1 (unaged only)", got)
	}
	now = now.Add(60 * time.Millisecond)
	if got := held(); got != 0 {
		t.Fatalf("100 ms later: %d pickers, want 0", got)
	}
}
