package main

import (
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/raftnode"
)

// The profiles resolve to their documented timeouts, single flags
// override them, and combinations raft would refuse or that cannot
// survive the stated round trip are errors naming the flag and the rule.
func TestRaftTiming_ProfilesOverridesAndRules(t *testing.T) {
	lan, err := (&raftTimingFlags{profile: "lan"}).timing(false)
	if err != nil || lan.HeartbeatTimeout != 500*time.Millisecond || lan.LeaderLeaseTimeout != 250*time.Millisecond || lan.LocalGossip {
		t.Fatalf("lan = %+v, %v", lan, err)
	}
	wan, err := (&raftTimingFlags{profile: "wan"}).timing(false)
	if err != nil || wan.HeartbeatTimeout != 2500*time.Millisecond || wan.LeaderLeaseTimeout != 1200*time.Millisecond || !wan.WANGossip {
		t.Fatalf("wan = %+v, %v", wan, err)
	}
	if fast, err := (&raftTimingFlags{profile: "lan"}).timing(true); err != nil || fast != raftnode.FastTiming {
		t.Fatalf("--fast-timing = %+v, %v; want FastTiming", fast, err)
	}
	o, err := (&raftTimingFlags{profile: "wan", heartbeat: 4 * time.Second, election: 4 * time.Second}).timing(false)
	if err != nil || o.HeartbeatTimeout != 4*time.Second || o.LeaderLeaseTimeout != 1200*time.Millisecond {
		t.Fatalf("override = %+v, %v", o, err)
	}
	for _, c := range []struct {
		f    raftTimingFlags
		want string
	}{
		{raftTimingFlags{profile: "moon"}, `--raft-timing "moon": want fast, lan or wan`},
		{raftTimingFlags{profile: "lan", lease: time.Second}, "--raft-leader-lease-timeout 1s: must be at most the heartbeat timeout 500ms"},
		{raftTimingFlags{profile: "lan", election: 100 * time.Millisecond}, "--raft-election-timeout 100ms: must be at least the heartbeat timeout 500ms"},
		{raftTimingFlags{profile: "lan", rtt: 400 * time.Millisecond}, "--raft-leader-lease-timeout 250ms: must exceed twice the round trip (--raft-rtt 400ms, profile lan)"},
		{raftTimingFlags{profile: "lan", heartbeat: time.Millisecond}, "--raft-heartbeat-timeout 1ms: must be at least 5ms"},
	} {
		_, err := c.f.timing(false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.f, err, c.want)
		}
	}
}

// The server refuses bad timing flags before it starts anything.
func TestServerCmd_RefusesBadRaftTiming(t *testing.T) {
	_, err := runCLI(t, "", "server", "--node-id", "n1", "--data-dir", t.TempDir(), "--raft-timing", "lan", "--raft-rtt", "1s")
	if err == nil || !strings.Contains(err.Error(), "--raft-leader-lease-timeout 250ms: must exceed twice the round trip") {
		t.Fatalf("err = %v", err)
	}
}
