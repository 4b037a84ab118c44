// Package digestwait waits for nodes of one cluster to converge: the same
// applied index and index digest on every node (SPEC 13's check that
// replicas hold identical state). proccluster.WaitDigests, which the
// end-to-end, chaos and compose harnesses share, is built on it.
package digestwait

import (
	"context"
	"fmt"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Member is one node to ask: a name for messages and its Cluster client.
type Member struct {
	Name string
	CL   pb.ClusterClient
}

// Wait asks every member for its Digest every poll (each call bounded by
// a second) until all answer the same (applied index, digest) pair, and
// returns it. It errors when ctx ends or limit passes first, listing what
// each member last answered.
func Wait(ctx context.Context, ms []Member, limit, poll time.Duration) (*pb.DigestResponse, error) {
	deadline := time.Now().Add(limit)
	var last []string
	for {
		var first *pb.DigestResponse
		same := len(ms) > 0
		last = last[:0]
		for _, m := range ms {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			d, err := m.CL.Digest(cctx, &pb.DigestRequest{})
			cancel()
			if err != nil {
				same = false
				last = append(last, m.Name+": "+err.Error())
				continue
			}
			last = append(last, fmt.Sprintf("%s: %d/%016x", m.Name, d.AppliedIndex, d.Digest))
			if first == nil {
				first = d
			} else if d.AppliedIndex != first.AppliedIndex || d.Digest != first.Digest {
				same = false
			}
		}
		if same {
			return first, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("digests did not converge within %v: %v", limit, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(poll):
		}
	}
}
