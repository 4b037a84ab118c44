package e2e

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/internal/poll"
)

func checkFailover(t *testing.T, c *cluster) {
	leader := c.waitLeader(10 * time.Second)
	var others []*proc
	for _, p := range c.procs {
		if p != leader {
			others = append(others, p)
		}
	}
	var calls, errs, matches atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range others {
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func(p *proc) {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := ctxT(2 * time.Second)
					r, err := p.ic.LookupRoute(ctx, lookupReq(tenant, chainA))
					cancel()
					calls.Add(1)
					if err != nil {
						errs.Add(1)
						t.Logf("lookup on %s: %v", p.id, err)
						continue
					}
					if r.ReasonCode == pb.ReasonCode_PREFIX_MATCH {
						matches.Add(1)
					}
				}
			}(p)
		}
	}
	// The lookups flow and match before the kill.
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		n, m := calls.Load(), matches.Load()
		return m >= 20, fmt.Sprintf("%d lookups, %d PREFIX_MATCH before the kill; want 20 matches", n, m)
	})
	c.kill(leader)
	killedAt := time.Now()

	// Ingest resumes after the election: the SDK retries (same request
	// id) across the survivors.
	sdk, err := client.New(client.Config{Addrs: []string{others[0].grpc, others[1].grpc}, WriteRetry: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	ctx, cancel := ctxT(20 * time.Second)
	defer cancel()
	ir, err := sdk.Ingest(ctx, &pb.IngestRequest{Events: []*pb.BlockEvent{stored("r-d", tenant, toks(30000, 128))}})
	if err != nil || ir.Accepted != 1 {
		t.Fatalf("ingest after leader kill: %v %v", ir, err)
	}
	t.Logf("ingest committed %v after the leader was killed", time.Since(killedAt).Round(time.Millisecond))
	newLeader := c.waitLeader(10*time.Second, leader)
	if newLeader == leader {
		t.Fatal("killed node still leader")
	}
	// The lookups go on under the new leader: a thousand more answers,
	// each of them counted as an error if it failed.
	after := calls.Load()
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		n := calls.Load() - after
		return n >= 1000, fmt.Sprintf("%d lookups answered under the new leader %s, want 1000", n, newLeader.id)
	})
	close(stop)
	wg.Wait()
	if errs.Load() != 0 {
		t.Errorf("%d of %d lookups failed during failover; want 0", errs.Load(), calls.Load())
	}
	if matches.Load() == 0 {
		t.Errorf("no PREFIX_MATCH among %d lookups", calls.Load())
	}
	t.Logf("failover: %d lookups, %d errors, %d PREFIX_MATCH", calls.Load(), errs.Load(), matches.Load())

	// The killed node restarts from its data and catches up to the same
	// digest, including the write made while it was down.
	c.start(leader)
	d := c.waitSameDigest(30*time.Second, c.procs...)
	t.Logf("converged at index %d digest %x", d.AppliedIndex, d.Digest)
	r := lookup(t, leader, lookupReq(tenant, toks(30000, 128)))
	if r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || r.Replicas[0].ReplicaId != "r-d" {
		t.Errorf("restarted node misses the write made while it was down: %v", r)
	}
}
