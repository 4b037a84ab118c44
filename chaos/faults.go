package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
)

// FaultKind names a fault the harness injects.
type FaultKind string

// The faults the harness injects.
const (
	LeaderKill      FaultKind = "leader-kill"
	FollowerKill    FaultKind = "follower-kill"
	LeaderPause     FaultKind = "leader-pause"
	Replace         FaultKind = "replace-empty"
	FullRestart     FaultKind = "full-restart"
	IsolateLeader   FaultKind = "isolate-leader"
	IsolateFollower FaultKind = "isolate-follower"
	SplitMinority   FaultKind = "split"
	// GossipCut cuts gossip only, between all pairs; RaftCut cuts Raft
	// only, between the leader and the rest (netfaults.go).
	GossipCut FaultKind = "gossip-partition"
	RaftCut   FaultKind = "raft-partition"
	// LeaderDiskFull fills the leader's data volume; ClockSkew runs a
	// node whose clock is ahead by more than the eviction TTL and makes it
	// leader; IngestFlood floods the leader with ingest streams that
	// never read their responses (nodefaults.go, flood.go).
	LeaderDiskFull FaultKind = "leader-disk-full"
	ClockSkew      FaultKind = "clock-skew"
	IngestFlood    FaultKind = "ingest-flood"
)

// AllFaults lists every kind, in report order.
var AllFaults = []FaultKind{LeaderKill, FollowerKill, LeaderPause, Replace, FullRestart, IsolateLeader, IsolateFollower, SplitMinority,
	GossipCut, RaftCut, LeaderDiskFull, ClockSkew, IngestFlood}

// IsPartition reports whether k needs network namespaces.
func (k FaultKind) IsPartition() bool {
	return k == IsolateLeader || k == IsolateFollower || k == SplitMinority || k == GossipCut || k == RaftCut
}

// NeedsRoot reports whether k needs root: network namespaces, or (a full
// disk) the nodes' data directories on size-limited tmpfs mounts.
func (k FaultKind) NeedsRoot() bool { return k.IsPartition() || k == LeaderDiskFull }

// FaultRec is one injected fault and what was measured during it.
type FaultRec struct {
	Kind   FaultKind
	Target string
	// Start: the fault was injected; Healed: the fault was undone (node
	// restarted, continued, network healed); End: the cluster was healthy
	// again.
	Start, Healed, End time.Time
	// FailoverMs: from the fault to a new leader (higher term) reported by
	// a surviving node; -1 when the fault did not remove the leader.
	FailoverMs float64
	// WriteUnavailMs: the longest stretch in [Start, End] without an
	// ingest acknowledgment (from Start).
	WriteUnavailMs float64
	// LookupP99Ms: p99 latency of the lookups started in [Start, End].
	LookupP99Ms float64
	Lookups     int
	// MembershipMs: from heal to every node listing every node healthy
	// (gossip partitions; 0 otherwise).
	MembershipMs float64
	// RSSMiB: the leader's resident memory before, at peak and some time
	// after an ingest flood (0s otherwise).
	RSSMiB [3]int
	// Notes and Violations found while the fault was active.
	Notes, Violations []string
}

// Timing of the fault schedule.
type faultTiming struct {
	restartPause time.Duration // a killed node stays down this long
	pauseFor     time.Duration // SIGSTOP at least this long
	partitionFor time.Duration // partitions held at least this long
	gossipCutFor time.Duration // gossip partitions held this long
	diskFullFor  time.Duration // a full disk stays full this long after failover
	skewFor      time.Duration // a skewed node stays leader this long
	floodFor     time.Duration // an ingest flood lasts this long
	maxStaleness time.Duration
	healthy      time.Duration // bound on returning to health
}

func (r *Runner) leaderOf(ctx context.Context) (*Node, uint64, error) {
	l, err := r.c.WaitLeader(ctx, 30*time.Second)
	if err != nil {
		return nil, 0, err
	}
	st, err := r.c.Status(ctx, l)
	if err != nil {
		return nil, 0, err
	}
	return l, st.Term, nil
}

// waitNewLeader polls the nodes not in skip every 10 ms until one reports
// state Leader in a term above oldTerm; returns the time it took.
// recordFailover waits up to 20 s for a leader other than skip's, in a
// term after term, and records it in f: the failover time and a note
// "<note> <id> after N ms", or a violation "<violation>: <error>". It
// returns the new leader, nil when none came.
func (r *Runner) recordFailover(ctx context.Context, f *FaultRec, term uint64, violation, note string, skip ...*Node) *Node {
	newL, d, err := r.waitNewLeader(ctx, f.Start, term, 20*time.Second, skip...)
	if err != nil {
		f.Violations = append(f.Violations, violation+": "+err.Error())
		return nil
	}
	f.FailoverMs = ms(d)
	f.Notes = append(f.Notes, fmt.Sprintf("%s %s after %.0f ms", note, newL.ID, ms(d)))
	return newL
}

func (r *Runner) waitNewLeader(ctx context.Context, since time.Time, oldTerm uint64, limit time.Duration, skip ...*Node) (*Node, time.Duration, error) {
	var found *Node
	err := poll.Until(ctx, time.Until(since.Add(limit)), 10*time.Millisecond, func() (bool, string) {
		for _, n := range r.c.Nodes {
			if contains(skip, n) {
				continue
			}
			if s, _ := n.State(); s != Up {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			st, err := n.CL.Status(cctx, &pb.StatusRequest{})
			cancel()
			if err == nil && st.State == "Leader" && st.Term > oldTerm {
				found = n
				return true, ""
			}
		}
		return false, fmt.Sprintf("no node up reports itself Leader in a term above %d", oldTerm)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("no new leader within %v: %w", limit, err)
	}
	return found, time.Since(since), nil
}

func (r *Runner) randomFollower(leader *Node) *Node {
	var fs []*Node
	for _, n := range r.c.Nodes {
		if n != leader {
			fs = append(fs, n)
		}
	}
	return fs[rand.IntN(len(fs))]
}

// inject runs one fault to completion (including the return to health).
func (r *Runner) inject(ctx context.Context, kind FaultKind) (*FaultRec, error) {
	f := &FaultRec{Kind: kind, FailoverMs: -1}
	leader, term, err := r.leaderOf(ctx)
	if err != nil {
		return nil, err
	}
	switch kind {
	case LeaderKill:
		err = r.leaderKill(ctx, f, leader, term)
	case FollowerKill:
		err = r.followerKill(ctx, f, leader)
	case LeaderPause:
		err = r.leaderPause(ctx, f, leader, term)
	case Replace:
		err = r.replace(ctx, f, leader)
	case FullRestart:
		err = r.fullRestart(ctx, f)
	case IsolateLeader, IsolateFollower, SplitMinority:
		err = r.isolate(ctx, f, r.minority(kind, leader), leader, term)
	case GossipCut:
		err = r.gossipPartition(ctx, f, leader)
	case RaftCut:
		err = r.raftPartition(ctx, f, leader, term)
	case LeaderDiskFull:
		err = r.leaderDiskFull(ctx, f, leader, term)
	case ClockSkew:
		err = r.clockSkew(ctx, f, leader)
	case IngestFlood:
		err = r.ingestFlood(ctx, f, leader)
	default:
		return nil, fmt.Errorf("chaos: unknown fault %q", kind)
	}
	if err != nil {
		return f, err
	}
	if err := r.c.WaitHealthy(ctx, r.timing.healthy); err != nil {
		return f, err
	}
	f.End = time.Now()
	return f, nil
}

// checkStale asks n for a lookup until it answers stale = true (it must
// within 2 s, since maxStaleness has passed) and records a violation
// otherwise; an error from the reachable minority node is one too.
func (r *Runner) checkStale(ctx context.Context, f *FaultRec, n *Node) {
	req := &pb.LookupRouteRequest{HashScheme: scheme, ModelId: model, TenantId: tenant, TokenIds: r.w.seeded}
	err := poll.Until(ctx, 2*time.Second, 100*time.Millisecond, func() (bool, string) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := n.IC.LookupRoute(cctx, req)
		cancel()
		if err != nil {
			f.Violations = append(f.Violations, fmt.Sprintf("partitioned %s: LookupRoute error %v", n.ID, err))
			return true, "" // recorded; stop asking
		}
		if resp.Stale {
			f.Notes = append(f.Notes, fmt.Sprintf("%s stale=true (last leader contact %d ms, %s)", n.ID, resp.LastLeaderContactMs, resp.ReasonCode))
			r.staleChecks++
			return true, ""
		}
		return false, fmt.Sprintf("stale=false, last leader contact %d ms", resp.LastLeaderContactMs)
	})
	if err != nil {
		f.Violations = append(f.Violations, fmt.Sprintf("partitioned %s after %v: %v", n.ID, time.Since(f.Start).Round(time.Millisecond), err))
	}
}

// removeServer removes n (down) from the Raft configuration through the
// leader once gossip reports n unhealthy there, so the leader does not add
// it right back; a replacement with an empty data directory then joins as
// a new voter instead of voting with a log it forgot.
func (r *Runner) removeServer(ctx context.Context, n *Node) error {
	err := poll.Until(ctx, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		l, err := r.c.WaitLeader(ctx, 10*time.Second, n)
		if err != nil {
			return false, err.Error()
		}
		st, err := r.c.Status(ctx, l)
		if err != nil {
			return false, err.Error()
		}
		healthy, inCfg := false, false
		for _, m := range st.Members {
			if m.Id == n.ID {
				healthy = m.Healthy
				inCfg = m.Suffrage != ""
			}
		}
		if !inCfg {
			return true, ""
		}
		if healthy {
			return false, "gossip still reports it healthy"
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = l.CL.RemoveServer(cctx, &pb.RemoveServerRequest{Id: n.ID})
		cancel()
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if err != nil {
		return fmt.Errorf("chaos: remove %s: %w", n.ID, err)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
