package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
)

// Ports of a node in network-namespace mode (NewCluster).
const (
	raftPort   = 7402
	gossipPort = 7403
)

// minority picks the nodes a partition fault of kind cuts off: the
// leader, a random follower, or a random minority (SplitMinority).
func (r *Runner) minority(kind FaultKind, leader *Node) []*Node {
	switch kind {
	case IsolateLeader:
		return []*Node{leader}
	case IsolateFollower:
		return []*Node{r.randomFollower(leader)}
	}
	var minority []*Node
	perm := rand.Perm(len(r.c.Nodes))
	for _, i := range perm[:len(r.c.Nodes)/2] {
		minority = append(minority, r.c.Nodes[i])
	}
	return minority
}

// isolate cuts the minority off from the other nodes for the partition
// time. When it holds term's leader, the majority must elect a new one
// within 20 s and the cut-off leader must lose its leadership; every
// minority node must keep answering lookups, marked stale.
func (r *Runner) isolate(ctx context.Context, f *FaultRec, minority []*Node, leader *Node, term uint64) error {
	var majority []*Node
	var a, b []int
	for _, n := range r.c.Nodes {
		if contains(minority, n) {
			a = append(a, n.Index)
			f.Target += n.ID + " "
		} else {
			majority = append(majority, n)
			b = append(b, n.Index)
		}
	}
	f.Target = "{" + f.Target[:len(f.Target)-1] + "} cut off"
	f.Start = time.Now()
	if err := r.c.Network().Isolate(a, b); err != nil {
		return err
	}
	leaderCut := contains(minority, leader)
	if leaderCut {
		r.recordFailover(ctx, f, term, "partition: majority elected no leader", "majority elected", minority...)
	}
	if rest := r.timing.partitionFor - time.Since(f.Start); rest > 0 {
		sleepCtx(ctx, rest)
	}
	// Every minority node is reachable by the harness and must answer
	// lookups without error, marked stale (maxStaleness has passed).
	for _, n := range minority {
		r.checkStale(ctx, f, n)
	}
	if leaderCut {
		if st, err := r.c.Status(ctx, leader); err == nil && st.State == "Leader" && st.Term == term {
			f.Violations = append(f.Violations, fmt.Sprintf("cut-off leader %s still Leader of term %d after %v", leader.ID, term, time.Since(f.Start).Round(time.Millisecond)))
		}
	}
	f.Healed = time.Now()
	if err := r.c.Network().Heal(); err != nil {
		return err
	}
	if !leaderCut {
		if st, err := r.c.Status(ctx, majority[0]); err == nil && st.Term != term {
			f.Notes = append(f.Notes, fmt.Sprintf("term moved %d → %d while only followers were cut off", term, st.Term))
		}
	}
	return nil
}

// membershipBound is how long after a partition heals every node must
// list every node as a healthy member.
const membershipBound = 30 * time.Second

// gossipPartition cuts gossip (TCP and UDP) between every pair of nodes
// while Raft stays up, long enough for every node to declare the others
// dead; restarts a follower in the middle (its new incarnation must be
// learnt without a re-join from the others) and writes through it while
// gossip is still cut (its forwarder needs the leader's gRPC address from
// elsewhere); heals; and measures how long membership takes to converge.
func (r *Runner) gossipPartition(ctx context.Context, f *FaultRec, leader *Node) error {
	all := make([]int, len(r.c.Nodes))
	for i := range all {
		all[i] = i
	}
	f.Target = "gossip between all pairs"
	f.Start = time.Now()
	for i := range all {
		if err := r.c.Network().CutPort(gossipPort, all[i:i+1], all[i+1:]); err != nil {
			return err
		}
	}
	hold := r.timing.gossipCutFor
	sleepCtx(ctx, hold/2)
	fl := r.randomFollower(leader)
	r.c.Kill(fl)
	sleepCtx(ctx, r.timing.restartPause)
	if err := r.c.Start(fl); err != nil {
		return err
	}
	if err := r.c.WaitUp(ctx, fl, 30*time.Second); err != nil {
		return err
	}
	f.Notes = append(f.Notes, fmt.Sprintf("%s restarted while gossip was cut", fl.ID))
	if rest := hold - time.Since(f.Start); rest > 0 {
		sleepCtx(ctx, rest)
	}
	if rec := r.w.DirectWrite(ctx, fl, 10*time.Second); !rec.Acked {
		f.Violations = append(f.Violations, fmt.Sprintf("ingest through %s (restarted, gossip cut) not acknowledged: %s", fl.ID, rec.Err))
	} else {
		f.Notes = append(f.Notes, fmt.Sprintf("ingest through %s during the cut acknowledged in %.0f ms", fl.ID, ms(rec.End.Sub(rec.Start))))
	}
	f.Healed = time.Now()
	if err := r.c.Network().HealPorts(); err != nil {
		return err
	}
	d, err := r.waitMembership(ctx, membershipBound)
	if err != nil {
		f.Violations = append(f.Violations, "membership after the gossip cut healed: "+err.Error())
	} else {
		f.Notes = append(f.Notes, fmt.Sprintf("membership converged %.0f ms after heal (bound %v)", ms(d), membershipBound))
		f.MembershipMs = ms(d)
	}
	if rec := r.w.DirectWrite(ctx, fl, 10*time.Second); !rec.Acked {
		f.Violations = append(f.Violations, fmt.Sprintf("ingest through %s after heal not acknowledged: %s", fl.ID, rec.Err))
	}
	return nil
}

// raftPartition cuts Raft (not gossip) between the leader and the others:
// gossip keeps reporting everyone alive, so only Raft contact can tell the
// truth. The majority must elect a new leader, the old one must step down,
// and the new leader's Status must report the cut-off node unhealthy.
func (r *Runner) raftPartition(ctx context.Context, f *FaultRec, leader *Node, term uint64) error {
	var others []int
	var rest []*Node
	for _, n := range r.c.Nodes {
		if n != leader {
			others = append(others, n.Index)
			rest = append(rest, n)
		}
	}
	f.Target = "{" + leader.ID + "} Raft cut off"
	f.Start = time.Now()
	if err := r.c.Network().CutPort(raftPort, []int{leader.Index}, others); err != nil {
		return err
	}
	if newL := r.recordFailover(ctx, f, term, "Raft cut: majority elected no leader", "majority elected", leader); newL != nil {
		reason := ""
		err := poll.Until(ctx, 15*time.Second, 100*time.Millisecond, func() (bool, string) {
			st, err := r.c.Status(ctx, newL)
			if err != nil {
				return false, err.Error()
			}
			for _, m := range st.Members {
				if m.Id == leader.ID && !m.Healthy {
					reason = m.UnhealthyReason
					return true, ""
				}
			}
			return false, newL.ID + " reports " + leader.ID + " healthy"
		})
		if err == nil {
			f.Notes = append(f.Notes, fmt.Sprintf("%s reports %s unhealthy after %.0f ms: %s", newL.ID, leader.ID, ms(time.Since(f.Start)), reason))
		} else {
			f.Violations = append(f.Violations, fmt.Sprintf("%s still reports the Raft-cut %s healthy after 15 s", newL.ID, leader.ID))
		}
	}
	if rest := r.timing.partitionFor - time.Since(f.Start); rest > 0 {
		sleepCtx(ctx, rest)
	}
	if st, err := r.c.Status(ctx, leader); err == nil && st.State == "Leader" && st.Term == term {
		f.Violations = append(f.Violations, fmt.Sprintf("Raft-cut leader %s still Leader of term %d", leader.ID, term))
	}
	r.checkStale(ctx, f, leader)
	f.Healed = time.Now()
	if err := r.c.Network().HealPorts(); err != nil {
		return err
	}
	_ = rest
	return nil
}

// waitMembership polls every node's Status until each lists every node
// of the cluster as a healthy member, and returns how long that took.
func (r *Runner) waitMembership(ctx context.Context, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	var last string
	for time.Since(start) < limit {
		ok := true
		for _, n := range r.c.Nodes {
			st, err := r.c.Status(ctx, n)
			if err != nil {
				ok, last = false, fmt.Sprintf("%s: %v", n.ID, err)
				break
			}
			healthy := map[string]bool{}
			for _, m := range st.Members {
				if m.Healthy {
					healthy[m.Id] = true
				} else {
					last = fmt.Sprintf("%s reports %s unhealthy: %s", n.ID, m.Id, m.UnhealthyReason)
				}
			}
			for _, o := range r.c.Nodes {
				if !healthy[o.ID] {
					ok = false
					if last == "" {
						last = fmt.Sprintf("%s does not list %s", n.ID, o.ID)
					}
				}
			}
			if !ok {
				break
			}
		}
		if ok {
			return time.Since(start), nil
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
	return 0, fmt.Errorf("not converged within %v: %s", limit, last)
}

// DirectWrite sends one ingest of a fresh unique chain straight to n
// (no SDK, no retry) and records it with the workload's writes, so an
// acknowledged one is checked on every node at the end like the others.
func (w *Workload) DirectWrite(ctx context.Context, n *Node, timeout time.Duration) *WriteRec {
	k := w.direct.Add(1)
	rec := &WriteRec{Writer: -1, Seq: int(k), ReqID: fmt.Sprintf("%s-direct-%d", w.runTag, k), Replica: "r-direct",
		Base: 3_000_000_000 + uint32(k)*256}
	rec.Start = time.Now()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	resp, err := n.IC.Ingest(cctx, &pb.IngestRequest{RequestId: rec.ReqID, Events: []*pb.BlockEvent{stored(rec.Replica, rec.Tokens())}})
	cancel()
	rec.End = time.Now()
	switch {
	case err != nil:
		rec.Err = err.Error()
	case resp.Accepted == 1:
		rec.Acked, rec.Index = true, resp.AppliedIndex
	default:
		rec.Err = fmt.Sprintf("accepted %d rejected %v", resp.Accepted, resp.Rejected)
	}
	w.mu.Lock()
	w.writes = append(w.writes, rec)
	w.mu.Unlock()
	return rec
}
