package e2e

import (
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// A leadership transfer whose target does not take over within Raft's
// election timeout (on a loaded machine; here the target is paused past
// it) is tried again while the call's deadline allows, so the operator's
// command succeeds once the target answers instead of failing with
// "leadership transfer timeout".
func TestTransferLeadership_TriedAgainWhenTheTargetIsLate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	c := startCluster(t, 3)
	l := c.waitLeader(15 * time.Second)
	target := c.other(l)
	if err := target.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := make(chan error, 1)
	go func() {
		// Past one election timeout (150 ms with --fast-timing): the first
		// attempt times out while the target is stopped.
		time.Sleep(400 * time.Millisecond)
		resumed <- target.Resume()
	}()
	ctx, cancel := ctxT(10 * time.Second)
	defer cancel()
	_, err := l.cl.TransferLeadership(ctx, &pb.TransferLeadershipRequest{Id: target.id})
	if rerr := <-resumed; rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil {
		t.Fatalf("transfer to %s, paused for 400 ms: %v", target.id, err)
	}
	if now := c.waitLeader(10 * time.Second); now != target {
		t.Fatalf("leader %s after the transfer, want %s", now.id, target.id)
	}
}
