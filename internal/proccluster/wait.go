package proccluster

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/digestwait"
)

// Member is one server as the waits see it, whatever runs it (a Proc, a
// container): its node id, which Status names as the leader, and a gRPC
// connection to it.
type Member struct {
	Name string
	Conn grpc.ClientConnInterface
}

// poll is how often the waits ask again: often enough that a test sees a
// new leader within a few tens of milliseconds of its election, rarely
// enough that polling three servers stays negligible load.
const poll = 50 * time.Millisecond

// callTimeout bounds each call of a wait, so one hung (paused,
// partitioned) server cannot stall the wait past its limit.
const callTimeout = time.Second

// WaitLeader waits until every member answers Cluster.Status naming the
// same leader, and that leader is a member reporting itself Leader; it
// returns the leader's index in ms. Pass only the members expected up: a
// killed or paused server in ms holds the wait until limit. It errors
// when ctx ends or limit passes first, with what each member last said.
func WaitLeader(ctx context.Context, ms []Member, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	last := make([]string, len(ms))
	for {
		leader, agree := "", len(ms) > 0
		state := map[string]string{}
		for i, m := range ms {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			st, err := pb.NewClusterClient(m.Conn).Status(cctx, &pb.StatusRequest{})
			cancel()
			switch {
			case err != nil:
				last[i] = m.Name + ": " + err.Error()
				agree = false
				continue
			case st.LeaderId == "":
				agree = false
			case leader == "":
				leader = st.LeaderId
			case st.LeaderId != leader:
				agree = false
			}
			last[i] = fmt.Sprintf("%s: %s, leader %q, term %d", m.Name, st.State, st.LeaderId, st.Term)
			state[m.Name] = st.State
		}
		if agree && state[leader] == "Leader" {
			for i, m := range ms {
				if m.Name == leader {
					return i, nil
				}
			}
		}
		if !pause(ctx, deadline) {
			return -1, gaveUp(ctx, "no agreed leader among %d members within %v; last: %v", len(ms), limit, last)
		}
	}
}

// WaitServing waits until every member's gRPC health service answers
// SERVING for the server as a whole: what a load balancer waits for
// (a server with --models-dir reports it only once its tokenizers are
// loaded).
func WaitServing(ctx context.Context, ms []Member, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, m := range ms {
		hc := healthpb.NewHealthClient(m.Conn)
		for {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			r, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if !pause(ctx, deadline) {
				return gaveUp(ctx, "%s not SERVING within %v: %v %v", m.Name, limit, r, err)
			}
		}
	}
	return nil
}

// WaitDigests waits until every member reports the same applied index and
// index digest (replicas holding identical state), and returns them.
func WaitDigests(ctx context.Context, ms []Member, limit time.Duration) (*pb.DigestResponse, error) {
	dm := make([]digestwait.Member, len(ms))
	for i, m := range ms {
		dm[i] = digestwait.Member{Name: m.Name, CL: pb.NewClusterClient(m.Conn)}
	}
	return digestwait.Wait(ctx, dm, limit, poll)
}

// pause sleeps one poll and reports whether to ask again: false once
// ctx ended or deadline passed.
func pause(ctx context.Context, deadline time.Time) bool {
	if time.Now().After(deadline) || ctx.Err() != nil {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(poll):
		return true
	}
}

// gaveUp is a wait's error; it wraps ctx's error when ctx is why.
func gaveUp(ctx context.Context, format string, args ...any) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf(format+": %w", append(args, err)...)
	}
	return fmt.Errorf(format, args...)
}
