// Package digestwait waits for nodes of one cluster to converge: the same
// applied index and index digest on every node (contract §13.1's check that
// replicas hold identical state). proccluster.WaitDigests, which the
// end-to-end, chaos and compose harnesses share, is built on it.
package digestwait

import (
	"context"
	"fmt"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
)

// Member is one node to ask: a name for messages and its Cluster client.
type Member struct {
	Name string
	CL   pb.ClusterClient
}

// Wait asks every member for its Digest (each call bounded by a second),
// again after each interval every, until all answer the same (applied
// index, digest) pair, and returns it. It errors when ctx ends or limit
// passes first (wrapping ctx's error or poll.ErrTimeout), listing what
// each member last answered.
func Wait(ctx context.Context, ms []Member, limit, every time.Duration) (*pb.DigestResponse, error) {
	var first *pb.DigestResponse
	err := poll.Until(ctx, limit, every, func() (bool, string) {
		first = nil
		same := len(ms) > 0
		last := make([]string, 0, len(ms))
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
		return same, fmt.Sprintf("digests did not converge: %v", last)
	})
	if err != nil {
		return nil, fmt.Errorf("digestwait: %w", err)
	}
	return first, nil
}
