package api

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/policy"
)

// A server whose clock has not been compared with the cluster's refuses
// writes (UNAVAILABLE, retryable) rather than stamping them with a clock
// that may be far off; once checked, the same write is accepted.
func TestWrites_RefusedUntilTheClockIsChecked(t *testing.T) {
	var checked atomic.Bool
	s := NewService(Config{Backend: isoNode{index.New(policy.Default())}, ClockTrusted: checked.Load})
	ctx := context.Background()
	if _, err := s.Ingest(ctx, oneEvent()); status.Code(err) != codes.Unavailable {
		t.Fatalf("Ingest before the clock check: %v; want UNAVAILABLE", err)
	}
	stats := &pb.ReportReplicaStatsRequest{Stats: []*pb.ReplicaStats{{ReplicaId: "r"}}}
	if _, err := s.ReportReplicaStats(ctx, stats); status.Code(err) != codes.Unavailable {
		t.Fatalf("ReportReplicaStats before the clock check: %v; want UNAVAILABLE", err)
	}
	checked.Store(true)
	resp, err := s.Ingest(ctx, oneEvent())
	if err != nil || resp.Accepted != 1 {
		t.Fatalf("Ingest after the clock check: %v, %v; want 1 accepted", resp, err)
	}
}
