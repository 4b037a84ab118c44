package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
)

// clockOffsetEnv is the chaos build's clock hook (cmd/inference-cache
// clockhook_chaos.go).
const clockOffsetEnv = "INFERENCE_CACHE_CHAOS_CLOCK_OFFSET"

// leaderDiskFull fills the leader's data volume while writes continue
// (plus large ingests straight to it, so its log must grow rather than
// reuse free pages). The leader must step down and a new one be elected;
// while still full it must not be elected again, and the new leader's
// Status must report it unhealthy. Then the ballast is removed and the
// node must catch up without a restart.
func (r *Runner) leaderDiskFull(ctx context.Context, f *FaultRec, leader *Node, term uint64) error {
	f.Target = leader.ID
	f.Start = time.Now()
	took, err := r.c.FillDisk(leader)
	if err != nil {
		return err
	}
	f.Notes = append(f.Notes, fmt.Sprintf("%d MiB ballast filled %s's volume", took>>20, leader.ID))
	pctx, stopPressure := context.WithCancel(ctx)
	go r.pressure(pctx, leader)
	newL, d, err := r.waitNewLeader(ctx, f.Start, term, 30*time.Second, leader)
	stopPressure()
	if err != nil {
		f.Violations = append(f.Violations, "full disk on the leader: no other node became leader: "+err.Error())
		r.c.RemoveBallast()
		f.Healed = time.Now()
		return nil
	}
	f.FailoverMs = ms(d)
	f.Notes = append(f.Notes, fmt.Sprintf("%s leader after %.0f ms", newL.ID, ms(d)))
	// While still full: never Leader again, reported unhealthy.
	reported := ""
	for end := time.Now().Add(r.timing.diskFullFor); time.Now().Before(end); {
		if st, err := r.c.Status(ctx, leader); err == nil && st.State == "Leader" {
			f.Violations = append(f.Violations, fmt.Sprintf("%s elected leader again in term %d while its disk is full", leader.ID, st.Term))
			break
		}
		if reported == "" {
			if st, err := r.c.Status(ctx, newL); err == nil {
				for _, m := range st.Members {
					if m.Id == leader.ID && !m.Healthy {
						reported = m.UnhealthyReason
					}
				}
			}
		}
		time.Sleep(100 * time.Millisecond) // the watch lasts as long as the disk is full
	}
	if reported == "" {
		f.Violations = append(f.Violations, fmt.Sprintf("%s never reported %s unhealthy while its disk was full", newL.ID, leader.ID))
	} else {
		f.Notes = append(f.Notes, fmt.Sprintf("%s reports %s unhealthy: %s", newL.ID, leader.ID, reported))
	}
	r.c.RemoveBallast()
	f.Healed = time.Now()
	return nil
}

// pressure sends large ingests (64 chains of 8 blocks) straight to n
// until ctx ends; their outcome is not recorded (they are load, not
// acknowledged writes under check).
func (r *Runner) pressure(ctx context.Context, n *Node) {
	for k := 0; ctx.Err() == nil; k++ {
		evs := make([]*pb.BlockEvent, 64)
		for i := range evs {
			evs[i] = stored("r-pressure", chainAt(2_000_000_000+uint32(k*64+i)*256))
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, _ = n.IC.Ingest(cctx, &pb.IngestRequest{Events: evs})
		cancel()
	}
}

// clockSkew restarts a follower with its wall clock ahead by the eviction
// TTL plus an hour (the chaos build's clock hook) and makes it leader for
// a while: its expire commands, its stamps and its lookups must not drop
// or hide a single acknowledged write. A sample of writes acknowledged
// before the fault is looked up on every node after the hold; then the
// node is restarted with a right clock.
func (r *Runner) clockSkew(ctx context.Context, f *FaultRec, leader *Node) error {
	fl := r.randomFollower(leader)
	skew := time.Duration(r.w.base.EvictionTtlSeconds)*time.Second + time.Hour
	f.Target = fmt.Sprintf("%s clock +%v", fl.ID, skew)
	sample := r.sampleAcked(60)

	f.Start = time.Now()
	r.c.Kill(fl)
	fl.proc.SetEnv([]string{clockOffsetEnv + "=" + skew.String()})
	defer fl.proc.SetEnv(nil)
	if err := r.c.Start(fl); err != nil {
		return err
	}
	if err := r.c.WaitHealthy(ctx, 60*time.Second); err != nil {
		return err
	}
	if !r.makeLeader(ctx, f, fl) {
		f.Violations = append(f.Violations, fmt.Sprintf("could not make the skewed %s leader", fl.ID))
	} else {
		f.Notes = append(f.Notes, fmt.Sprintf("skewed %s leader after %.0f ms", fl.ID, ms(time.Since(f.Start))))
	}
	sleepCtx(ctx, r.timing.skewFor)
	for _, n := range r.c.Nodes {
		if n == fl {
			continue
		}
		if st, err := r.c.Status(ctx, n); err == nil && st.LeaderId == fl.ID {
			f.Notes = append(f.Notes, fmt.Sprintf("%s measures the leader's clock %+.0f s off", n.ID, float64(st.ClockOffsetToLeaderMs)/1000))
			break
		}
	}
	r.checkSample(ctx, f, sample)
	f.Healed = time.Now()
	r.c.Kill(fl)
	fl.proc.SetEnv(nil)
	return r.c.Start(fl)
}

// sampleAcked returns up to n writes acknowledged so far, chosen at
// random.
func (r *Runner) sampleAcked(n int) []*WriteRec {
	writes, _, _ := r.w.History()
	var sample []*WriteRec
	for _, w := range writes {
		if w.Acked {
			sample = append(sample, w)
		}
	}
	rand.Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })
	return sample[:min(len(sample), n)]
}

// makeLeader transfers leadership to fl (up to five tries, each waiting
// 5 s for fl to report Leader) and reports whether fl became leader.
func (r *Runner) makeLeader(ctx context.Context, f *FaultRec, fl *Node) bool {
	for try := 0; try < 5; try++ {
		l, err := r.c.WaitLeader(ctx, 10*time.Second)
		if err != nil {
			continue
		}
		if l == fl {
			return true
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = l.CL.TransferLeadership(cctx, &pb.TransferLeadershipRequest{Id: fl.ID, Address: fl.Raft})
		cancel()
		if err != nil {
			f.Notes = append(f.Notes, "transfer: "+err.Error())
			time.Sleep(time.Second) // a pause before the next try
			continue
		}
		if poll.Until(ctx, 5*time.Second, 50*time.Millisecond, func() (bool, string) {
			st, err := r.c.Status(ctx, fl)
			if err != nil {
				return false, err.Error()
			}
			return st.State == "Leader", fl.ID + " is " + st.State
		}) == nil {
			return true
		}
	}
	return false
}

// checkSample records a violation unless every sampled acknowledged write
// is present on every node.
func (r *Runner) checkSample(ctx context.Context, f *FaultRec, sample []*WriteRec) {
	missing := 0
	var first string
	for _, n := range r.c.Nodes {
		for _, w := range sample {
			if ok, why := r.present(ctx, n, w); !ok {
				missing++
				if first == "" {
					first = fmt.Sprintf("%s on %s: %s", w.ReqID, n.ID, why)
				}
			}
		}
	}
	if missing > 0 {
		f.Violations = append(f.Violations, fmt.Sprintf("skewed leader: %d of %d sampled acknowledged writes gone (%d nodes); first: %s", missing, len(sample)*len(r.c.Nodes), len(r.c.Nodes), first))
	} else {
		f.Notes = append(f.Notes, fmt.Sprintf("all %d sampled acknowledged writes present on every node after %v under the skewed leader", len(sample), r.timing.skewFor))
	}
}
