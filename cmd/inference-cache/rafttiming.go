package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/inference-cache/inference-cache/raftnode"
)

// raftProfile is a named set of Raft timeouts plus the round trip they
// are meant for.
type raftProfile struct {
	timing raftnode.Timing
	rtt    time.Duration // the expected round trip the profile is sized for
	use    string
}

// raftProfiles are the --raft-timing presets. lan is hashicorp/raft's
// defaults scaled to a data-centre network; wan is sized for a 400 ms
// round trip with some loss: the lease (a leader steps down without
// quorum contact this long) spans three round trips, and a follower waits
// two leases before it campaigns, so one lost heartbeat never starts an
// election. Failover is 1–2 heartbeat timeouts to notice plus an
// election.
var raftProfiles = map[string]raftProfile{
	"fast": {timing: raftnode.FastTiming, rtt: time.Millisecond, use: "loopback (dev clusters, tests): failover ≈ 0.2–0.5 s"},
	"lan": {timing: raftnode.Timing{HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond, CommitTimeout: 10 * time.Millisecond}, rtt: 20 * time.Millisecond,
		use: "one data centre (round trip ≤ 20 ms): failover ≈ 0.6–1.5 s"},
	"wan": {timing: raftnode.Timing{HeartbeatTimeout: 2500 * time.Millisecond, ElectionTimeout: 2500 * time.Millisecond,
		LeaderLeaseTimeout: 1200 * time.Millisecond, CommitTimeout: 50 * time.Millisecond, WANGossip: true}, rtt: 400 * time.Millisecond,
		use: "across regions (round trip ≤ 400 ms, some loss): failover ≈ 3–7 s"},
}

// raftTimingFlags are --raft-timing and the individual timeouts that
// override the profile's.
type raftTimingFlags struct {
	profile                          string
	heartbeat, election, lease, comm time.Duration
	rtt                              time.Duration
}

func (r *raftTimingFlags) register(f *pflag.FlagSet) {
	f.StringVar(&r.profile, "raft-timing", "lan", "Raft timeout profile: fast (loopback), lan (one data centre) or wan (across regions); the flags below override single timeouts")
	f.DurationVar(&r.heartbeat, "raft-heartbeat-timeout", 0, "a follower without leader contact for 1–2× this starts an election (0 = the profile's)")
	f.DurationVar(&r.election, "raft-election-timeout", 0, "a candidate without a result for 1–2× this starts over (0 = the profile's; at least the heartbeat timeout)")
	f.DurationVar(&r.lease, "raft-leader-lease-timeout", 0, "a leader without quorum contact this long steps down (0 = the profile's; at most the heartbeat timeout, more than twice --raft-rtt)")
	f.DurationVar(&r.comm, "raft-commit-timeout", 0, "longest wait before a heartbeat carries the commit index (0 = the profile's)")
	f.DurationVar(&r.rtt, "raft-rtt", 0, "the network round trip between servers the timeouts must allow for (0 = the profile's: fast 1ms, lan 20ms, wan 400ms)")
}

// timing resolves the profile and overrides into a raftnode.Timing, or an
// error naming the flag and the rule it breaks. fast (also --fast-timing)
// keeps the loopback gossip profile.
func (r *raftTimingFlags) timing(fast bool) (raftnode.Timing, error) {
	name := r.profile
	if name == "" {
		name = "lan"
	}
	if fast {
		name = "fast"
	}
	p, ok := raftProfiles[name]
	if !ok {
		return raftnode.Timing{}, fmt.Errorf("--raft-timing %q: want fast, lan or wan", r.profile)
	}
	t := p.timing
	for _, o := range []struct {
		v   time.Duration
		dst *time.Duration
	}{{r.heartbeat, &t.HeartbeatTimeout}, {r.election, &t.ElectionTimeout}, {r.lease, &t.LeaderLeaseTimeout}, {r.comm, &t.CommitTimeout}} {
		if o.v != 0 {
			*o.dst = o.v
		}
	}
	rtt := p.rtt
	if r.rtt != 0 {
		rtt = r.rtt
	}
	for _, c := range []struct {
		flag string
		v    time.Duration
		min  time.Duration
	}{{"--raft-heartbeat-timeout", t.HeartbeatTimeout, 5 * time.Millisecond}, {"--raft-election-timeout", t.ElectionTimeout, 5 * time.Millisecond},
		{"--raft-leader-lease-timeout", t.LeaderLeaseTimeout, 5 * time.Millisecond}, {"--raft-commit-timeout", t.CommitTimeout, time.Millisecond}, {"--raft-rtt", rtt, time.Microsecond}} {
		if c.v < c.min {
			return raftnode.Timing{}, fmt.Errorf("%s %v: must be at least %v", c.flag, c.v, c.min)
		}
	}
	switch {
	case t.LeaderLeaseTimeout > t.HeartbeatTimeout:
		return raftnode.Timing{}, fmt.Errorf("--raft-leader-lease-timeout %v: must be at most the heartbeat timeout %v (hashicorp/raft refuses it)", t.LeaderLeaseTimeout, t.HeartbeatTimeout)
	case t.ElectionTimeout < t.HeartbeatTimeout:
		return raftnode.Timing{}, fmt.Errorf("--raft-election-timeout %v: must be at least the heartbeat timeout %v (hashicorp/raft refuses it)", t.ElectionTimeout, t.HeartbeatTimeout)
	case t.LeaderLeaseTimeout <= 2*rtt:
		return raftnode.Timing{}, fmt.Errorf("--raft-leader-lease-timeout %v: must exceed twice the round trip (--raft-rtt %v, profile %s), or the leader steps down whenever one heartbeat is late; use --raft-timing wan or raise the timeouts", t.LeaderLeaseTimeout, rtt, name)
	}
	return t, nil
}
