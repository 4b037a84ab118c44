package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/inference-cache/inference-cache/internal/proccluster"
)

// devRestartDelay is how long the dev cluster leaves a dead node down
// before starting it again: long enough to watch the others elect a leader
// and keep answering, short enough not to wait for.
const devRestartDelay = 3 * time.Second

// devQuickExit: a node that exits this soon after a restart failed to
// start (a port taken, damaged data) rather than died while serving;
// devMaxQuickExits of those in a row and it is left down.
const (
	devQuickExit     = 5 * time.Second
	devMaxQuickExits = 3
)

// devStopTimeout bounds a clean stop of the cluster: every node gets
// SIGTERM at once (a leader transfers leadership first) and is killed
// when still running after this long.
const devStopTimeout = 15 * time.Second

// devExit is one node process ending.
type devExit struct {
	n    *devNode
	exit proccluster.Exit
}

// checkDevPorts refuses to start when any node's port is taken: the new
// servers would fail to bind while the banner and the leader check talked
// to whatever already listens there (typically another dev cluster).
func checkDevPorts(ns []*devNode) error {
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

// superviseDev runs until ctx ends: a node that dies is reported (how,
// and where its log says why: deathReport) and started again after devRestartDelay while
// the others keep serving. A node that keeps failing right after its
// restarts is left down, with a message. say writes one line.
func superviseDev(ctx context.Context, exits <-chan devExit, say func(format string, args ...any)) {
	quick := map[*devNode]int{}
	restart := make(chan *devNode)
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-exits:
			ranFor := e.exit.RanFor
			say("%s %s after %s; %s", e.n.ID, e.exit, ranFor.Round(100*time.Millisecond), deathReport(e.n, e.exit))
			if ranFor < devQuickExit && e.n.restarts > 0 {
				quick[e.n]++
			} else {
				quick[e.n] = 0
			}
			if quick[e.n] >= devMaxQuickExits {
				say("%s failed %d times right after starting; left down (see %s)", e.n.ID, quick[e.n], e.n.proc.LogPath())
				continue
			}
			say("%s restarts in %v; the other nodes keep serving", e.n.ID, devRestartDelay)
			go func(n *devNode) {
				select {
				case <-ctx.Done():
				case <-time.After(devRestartDelay):
					select {
					case restart <- n:
					case <-ctx.Done():
					}
				}
			}(e.n)
		case n := <-restart:
			n.restarts++
			if err := startNode(n); err != nil {
				say("%s: %v", n.ID, err)
				continue
			}
			say("%s restarted (pid %d)", n.ID, n.proc.Pid())
		}
	}
}
