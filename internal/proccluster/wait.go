package proccluster

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/digestwait"
	"github.com/inference-cache/inference-cache/internal/poll"
)

// Member is one server as the waits see it, whatever runs it (a Proc, a
// container): its node id, which Status names as the leader, and a gRPC
// connection to it.
type Member struct {
	Name string
	Conn grpc.ClientConnInterface
}

// every is how often the waits ask again: often enough that a test sees a
// new leader within a few tens of milliseconds of its election, rarely
// enough that polling three servers stays negligible load.
const every = 50 * time.Millisecond

// callTimeout bounds each call of a wait, so one hung (paused,
// partitioned) server cannot stall the wait past its limit.
const callTimeout = time.Second

// WaitLeader waits until every member answers Cluster.Status naming the
// same leader, and that leader is a member reporting itself Leader; it
// returns the leader's index in ms. Pass only the members expected up: a
// killed or paused server in ms holds the wait until limit. It errors
// when ctx ends or limit passes first (wrapping ctx's error or
// poll.ErrTimeout), with what each member last said.
func WaitLeader(ctx context.Context, ms []Member, limit time.Duration) (int, error) {
	last := make([]string, len(ms))
	found := -1
	err := poll.Until(ctx, limit, every, func() (bool, string) {
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
					found = i
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("no agreed leader among %d members; last: %v", len(ms), last)
	})
	if err != nil {
		return -1, fmt.Errorf("proccluster: %w", err)
	}
	return found, nil
}

// WaitServing waits until every member's gRPC health service answers
// SERVING for the server as a whole: what a load balancer waits for
// (a server with --models-dir reports it only once its tokenizers are
// loaded). A member is asked until it answers SERVING once. It errors
// when ctx ends or limit passes first (wrapping ctx's error or
// poll.ErrTimeout), naming the first member not yet serving.
func WaitServing(ctx context.Context, ms []Member, limit time.Duration) error {
	next := 0 // ms[:next] answered SERVING
	err := poll.Until(ctx, limit, every, func() (bool, string) {
		for ; next < len(ms); next++ {
			m := ms[next]
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			r, err := healthpb.NewHealthClient(m.Conn).Check(cctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
				return false, fmt.Sprintf("%s not SERVING: %v %v", m.Name, r, err)
			}
		}
		return true, ""
	})
	if err != nil {
		return fmt.Errorf("proccluster: %w", err)
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
	return digestwait.Wait(ctx, dm, limit, every)
}
