package compose

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/proccluster"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// --- cluster helpers -------------------------------------------------

func (s *stack) ingest(n *node, id string, events ...*pb.BlockEvent) *pb.IngestResponse {
	s.t.Helper()
	var resp *pb.IngestResponse
	poll.Eventually(s.t, electionTimeout, 200*time.Millisecond, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := n.ic.Ingest(ctx, &pb.IngestRequest{RequestId: id, Events: events})
		cancel()
		resp = r
		return err == nil, fmt.Sprintf("ingest %s through %s: %v", id, n.service, err)
	})
	if int(resp.Accepted) != len(events) || len(resp.Rejected) > 0 {
		s.t.Fatalf("ingest %s through %s: accepted %d of %d, rejected %v", id, n.service, resp.Accepted, len(events), resp.Rejected)
	}
	return resp
}

// expectChains looks every chain up on every listed node: each must name
// its replica first with PREFIX_MATCH, served by that node.
func (s *stack) expectChains(chains map[string][]uint32, ns ...*node) {
	s.t.Helper()
	for _, n := range ns {
		for replica, chain := range chains {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := n.ic.LookupRoute(ctx, lookupReq(chain))
			cancel()
			if err != nil {
				s.t.Fatalf("%s: LookupRoute: %v", n.service, err)
			}
			if r.ReasonCode != pb.ReasonCode_PREFIX_MATCH || len(r.Replicas) == 0 || r.Replicas[0].ReplicaId != replica ||
				r.Replicas[0].MatchedTokens != 128 || r.ServedBy != n.service {
				s.t.Fatalf("%s: lookup of %s's chain: %v", n.service, replica, r)
			}
		}
	}
}

// waitLeader waits until every listed node names the same leader among
// them and returns it.
func (s *stack) waitLeader(limit time.Duration, ns ...*node) *node {
	s.t.Helper()
	i, err := proccluster.WaitLeader(context.Background(), members(ns), limit)
	if err != nil {
		s.t.Fatal(err)
	}
	return ns[i]
}

// members are ns as the proccluster waits see them (containers, not
// processes, but the same gRPC questions).
func members(ns []*node) []proccluster.Member {
	ms := make([]proccluster.Member, len(ns))
	for i, n := range ns {
		ms[i] = proccluster.Member{Name: n.service, Conn: n.conn}
	}
	return ms
}

func (s *stack) waitVoters(limit time.Duration, n *node, want int) {
	s.t.Helper()
	poll.Eventually(s.t, limit, 200*time.Millisecond, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := n.cl.Status(ctx, &pb.StatusRequest{})
		cancel()
		voters := 0
		for _, m := range st.GetMembers() {
			if m.Suffrage == "Voter" && m.Healthy {
				voters++
			}
		}
		return voters == want, fmt.Sprintf("%s: want %d healthy voters, status %v %v", n.service, want, st, err)
	})
}

func (s *stack) waitApplied(limit time.Duration, index uint64, ns ...*node) {
	s.t.Helper()
	next := 0 // ns[:next] applied index
	poll.Eventually(s.t, limit, 100*time.Millisecond, func() (bool, string) {
		for ; next < len(ns); next++ {
			n := ns[next]
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			d, err := n.cl.Digest(ctx, &pb.DigestRequest{})
			cancel()
			if err != nil || d.AppliedIndex < index {
				return false, fmt.Sprintf("%s has not applied index %d: %v %v", n.service, index, d, err)
			}
		}
		return true, ""
	})
}

// waitSameDigest waits until the listed nodes report one (applied index,
// digest) pair.
func (s *stack) waitSameDigest(limit time.Duration, ns ...*node) *pb.DigestResponse {
	s.t.Helper()
	d, err := proccluster.WaitDigests(context.Background(), members(ns), limit)
	if err != nil {
		s.t.Fatal(err)
	}
	return d
}

// waitHealthy waits for Docker's health check (the image's `health`
// subcommand) to pass and for the gRPC health service to answer SERVING
// through the published port.
func (s *stack) waitHealthy(limit time.Duration, ns ...*node) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	next := 0 // ns[:next] healthy
	poll.Eventually(s.t, limit, 250*time.Millisecond, func() (bool, string) {
		for ; next < len(ns); next++ {
			if state := s.inspect(ns[next], "{{.State.Health.Status}}"); state != "healthy" {
				return false, fmt.Sprintf("%s not healthy: docker says %q", ns[next].service, state)
			}
		}
		return true, ""
	})
	if err := proccluster.WaitServing(context.Background(), members(ns), time.Until(deadline)); err != nil {
		s.t.Fatal(err)
	}
}

// checkMetrics reads the node's /metrics through its published port.
func (s *stack) checkMetrics(n *node) {
	s.t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	var out []byte
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", n.httpPort))
	if err == nil {
		out, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("HTTP %s", resp.Status)
		}
	}
	if err != nil || !bytes.Contains(out, []byte("inferencecache_")) {
		s.t.Fatalf("%s: /metrics on the published port: %v\n%s", n.service, err, firstLines(out, 5))
	}
}

func (s *stack) inspect(n *node, format string) string {
	out, _ := exec.Command("docker", "inspect", "-f", format, n.container).Output()
	return strings.TrimSpace(string(out))
}
