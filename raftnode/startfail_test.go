package raftnode_test

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/raftnode"
)

// A start that fails after raft is running (here: the gossip port is
// taken) leaves nothing behind: raft is shut down and the transport's
// forwarder (commitwatch.go) ends, so a caller that retries does not
// leak a goroutine and a Raft instance per attempt.
func TestNew_FailedStartLeavesNothingRunning(t *testing.T) {
	c := clustertest.New(t, 1, noExpire)
	cfg := c.Config(0)
	tcp, err := net.Listen("tcp", cfg.GossipAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	udp, err := net.ListenPacket("udp", cfg.GossipAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	running := func(what string) int {
		buf := make([]byte, 8<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), what)
	}
	before := running("raftnode.newCommitWatch.func")
	rafts := running("hashicorp/raft.(*Raft).run(")
	n, err := raftnode.New(cfg)
	if err == nil {
		n.Shutdown()
		t.Fatal("New succeeded with its gossip port taken")
	}
	t.Log(err)
	poll.Eventually(t, 5*time.Second, 20*time.Millisecond, func() (bool, string) {
		w, r := running("raftnode.newCommitWatch.func"), running("hashicorp/raft.(*Raft).run(")
		return w == before && r == rafts, fmt.Sprintf("after the failed start, %d commit watchers and %d raft loops run, want %d and %d as before it", w, r, before, rafts)
	})
}
