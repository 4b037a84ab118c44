package raftnode

import (
	"testing"
	"time"
)

// pendingUpTo is a log where every index up to cmdTo holds a command and
// the entries after it are no-ops or barriers (the FSM never applies
// them).
func pendingUpTo(cmdTo uint64) func(from, to uint64) bool {
	return func(from, to uint64) bool { return to > from && from < cmdTo }
}

func TestLagTracker_ApplyLagOnlyAfterMaxStaleness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := 500 * time.Millisecond
	lt := &lagTracker{caughtUp: true}
	p := pendingUpTo(100)
	steps := []struct {
		at              time.Duration
		applied, commit uint64
		want            string
	}{
		{0, 90, 100, ""},                                 // behind, just seen
		{400 * time.Millisecond, 95, 100, ""},            // still within maxStaleness
		{600 * time.Millisecond, 95, 100, StaleApplyLag}, // 100 committed 600 ms ago, unapplied
		{700 * time.Millisecond, 100, 100, ""},           // caught up
		{800 * time.Millisecond, 100, 102, ""},           // 101-102 are no-ops: nothing to apply
		{5 * time.Second, 100, 102, ""},
	}
	for i, s := range steps {
		got := lt.step(healthSample{now: t0.Add(s.at), applied: s.applied, commit: s.commit, contact: true, commitKnown: true}, ms, p)
		if got != s.want {
			t.Fatalf("step %d (applied %d, commit %d at +%v) = %q, want %q", i, s.applied, s.commit, s.at, got, s.want)
		}
	}
}

func TestLagTracker_SteadyIngestNeverLags(t *testing.T) {
	// A busy follower is always a little behind: each sample sees a new
	// commit index, each earlier one applied by the next sample.
	t0 := time.Unix(1000, 0)
	lt := &lagTracker{caughtUp: true}
	for k := uint64(0); k < 100; k++ {
		s := healthSample{now: t0.Add(time.Duration(k) * time.Second), applied: 10 * k, commit: 10*k + 10, contact: true, commitKnown: true}
		if got := lt.step(s, 100*time.Millisecond, pendingUpTo(1<<62)); got != "" {
			t.Fatalf("sample %d: %q, want not lagging", k, got)
		}
	}
}

func TestLagTracker_RestartCatchingUpUntilBootLogApplied(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := 500 * time.Millisecond
	lt := &lagTracker{bootLast: 50} // restored a snapshot at 20, log to 50
	p := pendingUpTo(50)
	steps := []struct {
		at              time.Duration
		applied, commit uint64
		contact         bool
		want            string
	}{
		{0, 20, 0, false, StaleCatchingUp},                       // no leader yet
		{time.Second, 20, 0, true, StaleCatchingUp},              // heartbeat first: commit unknown
		{1100 * time.Millisecond, 20, 50, true, StaleCatchingUp}, // replaying
		{1200 * time.Millisecond, 50, 50, true, ""},              // done
		{1300 * time.Millisecond, 50, 50, true, ""},
	}
	for i, s := range steps {
		got := lt.step(healthSample{now: t0.Add(s.at), applied: s.applied, commit: s.commit, contact: s.contact, commitKnown: s.commit > 0}, ms, p)
		if got != s.want {
			t.Fatalf("step %d = %q, want %q", i, got, s.want)
		}
	}
}

func TestLagTracker_UncommittedBootTailEndsCatchUpAfterMaxStaleness(t *testing.T) {
	// The log found at start ends at 50 but only 40 was committed: the new
	// leader's log is shorter and the cluster is idle.
	t0 := time.Unix(1000, 0)
	ms := 500 * time.Millisecond
	lt := &lagTracker{bootLast: 50}
	p := pendingUpTo(40)
	if got := lt.step(healthSample{now: t0, applied: 40, commit: 41, contact: true, commitKnown: true}, ms, p); got != StaleCatchingUp {
		t.Fatalf("right after contact = %q, want %q", got, StaleCatchingUp)
	}
	if got := lt.step(healthSample{now: t0.Add(600 * time.Millisecond), applied: 40, commit: 41, contact: true, commitKnown: true}, ms, p); got != "" {
		t.Fatalf("maxStaleness after contact = %q, want caught up", got)
	}
}

// A restarted node that hears only heartbeats (the leader backs off its
// entries after the node's downtime, for up to ~10 s) does not know what
// is committed: it stays catching up however long that lasts, instead of
// calling itself caught up with the index it has. Found in a real-process
// trial: a restarted node served stale=false with an empty index for 5–10 s.
func TestLagTracker_HeartbeatsAloneNeverEndCatchUp(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := 500 * time.Millisecond
	lt := &lagTracker{bootLast: 23322}
	p := pendingUpTo(23322)
	for _, at := range []time.Duration{0, time.Second, 5 * time.Second, 10 * time.Second} {
		if got := lt.step(healthSample{now: t0.Add(at), applied: 0, commit: 0, contact: true}, ms, p); got != StaleCatchingUp {
			t.Fatalf("heartbeats only, +%v: %q, want %q", at, got, StaleCatchingUp)
		}
	}
	// The first AppendEntries: commit known, replay starts.
	if got := lt.step(healthSample{now: t0.Add(11 * time.Second), applied: 0, commit: 23322, contact: true, commitKnown: true}, ms, p); got != StaleCatchingUp {
		t.Fatalf("replaying: %q", got)
	}
	if got := lt.step(healthSample{now: t0.Add(13 * time.Second), applied: 23322, commit: 23322, contact: true, commitKnown: true}, ms, p); got != "" {
		t.Fatalf("replayed: %q, want caught up", got)
	}
}
