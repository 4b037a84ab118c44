package devcluster

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/inference-cache/inference-cache/internal/proccluster"
)

// restartDelay is how long the dev cluster leaves a dead node down
// before starting it again: long enough to watch the others elect a leader
// and keep answering, short enough not to wait for.
const restartDelay = 3 * time.Second

// quickExit: a node that exits this soon after a restart failed to
// start (a port taken, damaged data) rather than died while serving;
// maxQuickExits of those in a row and it is left down.
const (
	quickExit     = 5 * time.Second
	maxQuickExits = 3
)

// nodeExit is one node process ending.
type nodeExit struct {
	n    *node
	exit proccluster.Exit
}

// checkPorts refuses to start when any node's port is taken: the new
// servers would fail to bind while the banner and the leader check talked
// to whatever already listens there (typically another dev cluster).
func checkPorts(ns []*node) error {
	for _, n := range ns {
		for _, p := range []struct{ flag, addr, net string }{
			{"gRPC", n.GRPC, "tcp"}, {"Raft", n.Raft, "tcp"}, {"gossip", n.Gossip, "tcp"}, {"gossip", n.Gossip, "udp"}, {"HTTP", n.HTTP, "tcp"},
		} {
			if err := probeBind(p.net, p.addr); err != nil {
				return fmt.Errorf("%s's %s port %s (%s) is in use: %v; is another dev cluster running? Stop it, or pass --base-port for another range",
					n.ID, p.flag, p.addr, p.net, err)
			}
		}
	}
	return nil
}

// probeBind binds addr on network ("tcp" or "udp") and releases it.
func probeBind(network, addr string) error {
	if network == "udp" {
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return l.Close()
}

// supervisor restarts the processes that die: after delay, unless one
// failed maxQuick times in a row within quick of its restart.
type supervisor struct {
	delay, quick time.Duration
	maxQuick     int
	say          func(format string, args ...any) // writes one line
}

// newSupervisor is dev's: restartDelay, quickExit, maxQuickExits.
func newSupervisor(say func(format string, args ...any)) *supervisor {
	return &supervisor{delay: restartDelay, quick: quickExit, maxQuick: maxQuickExits, say: say}
}

// run runs until ctx ends: a node that dies is reported (how, and where
// its log says why: deathReport) and started again after s.delay while
// the others keep serving. A node that keeps failing right after its
// restarts is left down, with a message.
func (s *supervisor) run(ctx context.Context, exits <-chan nodeExit) {
	quick := map[*node]int{}
	restart := make(chan *node)
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-exits:
			if s.died(e, quick) {
				go s.restartLater(ctx, e.n, restart)
			}
		case n := <-restart:
			n.restarts++
			if err := startNode(n); err != nil {
				s.say("%s: %v", n.ID, err)
				continue
			}
			s.say("%s restarted (pid %d)", n.ID, n.proc.Pid())
		}
	}
}

// died reports e and counts its quick exits; false when the node is to
// be left down.
func (s *supervisor) died(e nodeExit, quick map[*node]int) bool {
	ranFor := e.exit.RanFor
	s.say("%s %s after %s; %s", e.n.ID, e.exit, ranFor.Round(100*time.Millisecond), deathReport(e.n, e.exit))
	if ranFor < s.quick && e.n.restarts > 0 {
		quick[e.n]++
	} else {
		quick[e.n] = 0
	}
	if quick[e.n] >= s.maxQuick {
		s.say("%s failed %d times right after starting; left down (see %s)", e.n.ID, quick[e.n], e.n.proc.LogPath())
		return false
	}
	s.say("%s restarts in %v; %s", e.n.ID, s.delay, othersServing(e.n))
	return true
}

// othersServing says what goes on serving while n is down.
func othersServing(n *node) string {
	if n.fleet {
		return "the cluster and the rest of the fleet keep serving"
	}
	return "the other nodes keep serving"
}

// restartLater hands n to restart after s.delay, unless ctx ends first.
func (s *supervisor) restartLater(ctx context.Context, n *node, restart chan<- *node) {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
		select {
		case restart <- n:
		case <-ctx.Done():
		}
	}
}
