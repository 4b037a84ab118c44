package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
)

// leaderKill kills the leader (term's): the others must elect a new one
// within 20 s. The node is started again after the restart pause.
func (r *Runner) leaderKill(ctx context.Context, f *FaultRec, leader *Node, term uint64) error {
	f.Target = leader.ID
	f.Start = time.Now()
	r.c.Kill(leader)
	if _, d, err := r.waitNewLeader(ctx, f.Start, term, 20*time.Second, leader); err != nil {
		f.Violations = append(f.Violations, "leader kill: "+err.Error())
	} else {
		f.FailoverMs = ms(d)
	}
	sleepCtx(ctx, r.timing.restartPause)
	f.Healed = time.Now()
	return r.c.Start(leader)
}

// followerKill kills a random follower and starts it again after the
// restart pause.
func (r *Runner) followerKill(ctx context.Context, f *FaultRec, leader *Node) error {
	n := r.randomFollower(leader)
	f.Target = n.ID
	f.Start = time.Now()
	r.c.Kill(n)
	sleepCtx(ctx, r.timing.restartPause)
	f.Healed = time.Now()
	return r.c.Start(n)
}

// leaderPause stops the leader's process (SIGSTOP) for the pause time: the
// others must elect a new leader within 20 s, and once resumed the old
// leader must step down.
func (r *Runner) leaderPause(ctx context.Context, f *FaultRec, leader *Node, term uint64) error {
	f.Target = leader.ID
	f.Start = time.Now()
	if err := r.c.Pause(leader); err != nil {
		return err
	}
	r.recordFailover(ctx, f, term, "leader pause", "new leader", leader)
	if rest := r.timing.pauseFor - time.Since(f.Start); rest > 0 {
		sleepCtx(ctx, rest)
	}
	f.Healed = time.Now()
	if err := r.c.Resume(leader); err != nil {
		return err
	}
	if err := r.c.WaitUp(ctx, leader, 10*time.Second); err != nil {
		return err
	}
	r.checkSteppedDown(ctx, f, leader, term)
	return nil
}

// checkSteppedDown records a violation unless the resumed old leader of
// term, within 5 s, reports a state other than Leader, or Leader in a
// newer term (re-elected).
func (r *Runner) checkSteppedDown(ctx context.Context, f *FaultRec, leader *Node, term uint64) {
	stepped := poll.Until(ctx, 5*time.Second, 10*time.Millisecond, func() (bool, string) {
		st, err := r.c.Status(ctx, leader)
		switch {
		case err != nil:
			return false, err.Error()
		case st.State == "Leader" && st.Term <= term:
			return false, fmt.Sprintf("Leader of term %d", st.Term)
		}
		f.Notes = append(f.Notes, fmt.Sprintf("resumed %s reports %s in term %d after %.0f ms", leader.ID, st.State, st.Term, ms(time.Since(f.Healed))))
		return true, ""
	})
	if stepped != nil {
		f.Violations = append(f.Violations, fmt.Sprintf("resumed %s did not step down from term %d: %v", leader.ID, term, stepped))
	}
}

// replace kills a random follower, removes it from the configuration,
// wipes its data directory and starts it again as a new member.
func (r *Runner) replace(ctx context.Context, f *FaultRec, leader *Node) error {
	n := r.randomFollower(leader)
	f.Target = n.ID
	f.Start = time.Now()
	r.c.Kill(n)
	if err := r.removeServer(ctx, n); err != nil {
		return err
	}
	if err := r.c.Wipe(n); err != nil {
		return err
	}
	f.Notes = append(f.Notes, fmt.Sprintf("%s removed from the configuration and its data directory wiped after %.0f ms", n.ID, ms(time.Since(f.Start))))
	f.Healed = time.Now()
	return r.c.Start(n)
}

// fullRestart kills every node and starts them all again after the
// restart pause.
func (r *Runner) fullRestart(ctx context.Context, f *FaultRec) error {
	f.Target = "all"
	f.Start = time.Now()
	for _, n := range r.c.Nodes {
		r.c.Kill(n)
	}
	sleepCtx(ctx, r.timing.restartPause)
	f.Healed = time.Now()
	for _, n := range r.c.Nodes {
		if err := r.c.Start(n); err != nil {
			return err
		}
	}
	return nil
}
