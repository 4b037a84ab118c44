package raftnode_test

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/internal/clustertest"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/raftnode"
)

// gossipFilter is a memberlist transport that drops every packet and
// stream, both ways, while blocked: a firewall on the gossip port only.
type gossipFilter struct {
	memberlist.Transport
	blocked *atomic.Bool
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}
}

func newGossipFilter(t memberlist.Transport, blocked *atomic.Bool) *gossipFilter {
	f := &gossipFilter{Transport: t, blocked: blocked, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), done: make(chan struct{})}
	go func() {
		for {
			select {
			case p := <-t.PacketCh():
				if !f.blocked.Load() {
					select {
					case f.packets <- p:
					case <-f.done:
						return
					}
				}
			case <-f.done:
				return
			}
		}
	}()
	go func() {
		for {
			select {
			case c := <-t.StreamCh():
				if f.blocked.Load() {
					c.Close()
					continue
				}
				select {
				case f.streams <- c:
				case <-f.done:
					c.Close()
					return
				}
			case <-f.done:
				return
			}
		}
	}()
	return f
}

func (f *gossipFilter) WriteTo(b []byte, addr string) (time.Time, error) {
	if f.blocked.Load() {
		return time.Now(), nil // lost on the wire
	}
	return f.Transport.WriteTo(b, addr)
}

func (f *gossipFilter) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if f.blocked.Load() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errBlocked{}}
	}
	return f.Transport.DialTimeout(addr, timeout)
}

func (f *gossipFilter) PacketCh() <-chan *memberlist.Packet { return f.packets }
func (f *gossipFilter) StreamCh() <-chan net.Conn           { return f.streams }

// Shutdown shuts the wrapped transport down first, while the filter still
// takes its packets and streams: its listeners may be sending one, and it
// waits for them (memberlist shuts its transport down before it stops
// reading, for the same reason).
func (f *gossipFilter) Shutdown() error {
	err := f.Transport.Shutdown()
	close(f.done)
	return err
}

type errBlocked struct{}

func (errBlocked) Error() string   { return "gossip blocked by the test" }
func (errBlocked) Timeout() bool   { return true }
func (errBlocked) Temporary() bool { return true }

// healthyPeers is how many members node i's Status reports healthy,
// itself included.
func healthyPeers(c *clustertest.Cluster, i int) int {
	n := 0
	for _, m := range c.Nodes[i].Status().Members {
		if m.Healthy {
			n++
		}
	}
	return n
}

// gossipCluster starts 3 nodes whose gossip goes through one switch the
// test flips, and waits until each sees all three healthy.
func gossipCluster(t *testing.T) (*clustertest.Cluster, *atomic.Bool, int) {
	t.Helper()
	var blocked atomic.Bool
	restore := raftnode.SetWrapGossipTransportForTest(func(_ string, tr memberlist.Transport) memberlist.Transport {
		return newGossipFilter(tr, &blocked)
	})
	t.Cleanup(restore)
	c := clustertest.New(t, 3, func(_ int, cfg *raftnode.Config) { cfg.ExpireInterval = -1 })
	c.StartAll()
	l := c.WaitLeader(15 * time.Second)
	c.WaitVoters(3, 10*time.Second)
	waitAllHealthy(t, c, "every node to see 3 healthy members", 15*time.Second)
	return c, &blocked, l
}

func waitAllHealthy(t *testing.T, c *clustertest.Cluster, what string, limit time.Duration) {
	t.Helper()
	poll.Eventually(t, limit, 20*time.Millisecond, func() (bool, string) {
		for _, i := range c.Running() {
			if h := healthyPeers(c, i); h != 3 {
				return false, fmt.Sprintf("waiting for %s: %s sees %d healthy members, want 3", what, c.Nodes[i].ID, h)
			}
		}
		return true, ""
	})
}

// A gossip-only partition (Raft keeps working) long enough for every
// member to declare the others dead and for memberlist to stop gossiping
// to them: once it heals, with no node restarted, the nodes re-join
// through --join and the voters' last gossip addresses, and membership
// converges within 30 s.
func TestGossip_HealsAfterAGossipOnlyPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out memberlist's gossip-to-the-dead time (~15 s)")
	}
	c, blocked, _ := gossipCluster(t)
	blocked.Store(true)
	poll.Eventually(t, 60*time.Second, 20*time.Millisecond, func() (bool, string) {
		for _, i := range c.Running() {
			if h := healthyPeers(c, i); h != 1 {
				return false, fmt.Sprintf("%s still sees %d healthy members, want only itself", c.Nodes[i].ID, h)
			}
		}
		return true, ""
	})
	// The partition outlasts memberlist's gossip-to-the-dead time (15 s in
	// the loopback profile): after it nobody sends anything to the dead,
	// and without re-joins the partition would never heal. This sleep is
	// the fault's length, not a wait for a state; the rejoin count below
	// checks the fault had its effect.
	time.Sleep(16 * time.Second)
	blocked.Store(false)
	healed := time.Now()
	waitAllHealthy(t, c, "membership to converge after the partition healed", 30*time.Second)
	t.Logf("membership converged %v after the gossip partition healed", time.Since(healed).Round(10*time.Millisecond))
	var rejoins uint64
	for _, i := range c.Running() {
		rejoins += c.Nodes[i].GossipRejoinsForTest()
	}
	if rejoins == 0 {
		t.Fatal("membership converged without a re-join: the test did not reproduce the partition")
	}
}

// A follower restarted while gossip is cut never sees the leader in
// gossip, yet forwards writes: the leader's gRPC address it learned
// before is kept in its data directory.
func TestForward_LeaderAddressSurvivesARestartBehindAGossipPartition(t *testing.T) {
	c, blocked, l := gossipCluster(t)
	blocked.Store(true)
	f := (l + 1) % 3
	c.Stop(f)
	c.Start(f)
	now := time.Now().UnixMilli()
	wr, err := c.Nodes[f].Ingest(c.Ctx(15*time.Second), "", evs("behind-partition", 7000, 4, now))
	if err != nil {
		t.Fatalf("write through %s, restarted while gossip is cut: %v", c.Nodes[f].ID, err)
	}
	c.WaitApplied(wr.Index, 10*time.Second)
	if res := lookup(c.Nodes[l], 7000, 4, now); res.Reason != index.PrefixMatch {
		t.Fatalf("the forwarded write is not on the leader: %+v", res)
	}
	if h := healthyPeers(c, f); h != 1 {
		t.Fatalf("restarted %s sees %d healthy members: gossip was not cut", c.Nodes[f].ID, h)
	}
}
