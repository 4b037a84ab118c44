package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
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

// devExit is one node process ending: err is exec.Cmd.Wait's error.
type devExit struct {
	n   *devNode
	err error
}

// devProcs starts and restarts the dev cluster's server processes; every
// exit is delivered on exits. Output lines go through say, which keeps a
// live demo line from swallowing them.
type devProcs struct {
	exe   string
	exits chan devExit
	mu    sync.Mutex // guards devNode.cmd/done against stop
}

func newDevProcs(exe string, n int) *devProcs {
	return &devProcs{exe: exe, exits: make(chan devExit, n)}
}

// start launches n's process, appending to its log file.
func (p *devProcs) start(n *devNode) error {
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.exe, n.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: Ctrl-C in the terminal reaches only dev, which
	// then stops the nodes in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.id, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	n.cmd, n.done, n.started = cmd, done, time.Now()
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		close(done)
		p.exits <- devExit{n: n, err: err}
	}()
	return nil
}

// stop sends SIGTERM to every running node and waits up to 15 s for them
// to exit (a leader transfers leadership first) before killing.
func (p *devProcs) stop(ns []*devNode, out io.Writer) {
	p.mu.Lock()
	type running struct {
		cmd  *exec.Cmd
		done chan struct{}
	}
	var rs []running
	for _, n := range ns {
		if n.cmd != nil {
			rs = append(rs, running{n.cmd, n.done})
		}
	}
	p.mu.Unlock()
	for _, r := range rs {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(15 * time.Second)
	for _, r := range rs {
		select {
		case <-r.done:
		case <-deadline:
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	}
	fmt.Fprintln(out, "cluster stopped")
}

// exited marks n as not running after its exit was received.
func (p *devProcs) exited(n *devNode) {
	p.mu.Lock()
	n.cmd = nil
	p.mu.Unlock()
}

// howExited says how a process ended, from exec.Cmd.Wait's error:
// "killed by signal SIGKILL", "exited with code 1", "exited cleanly".
func howExited(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + signalName(ws.Signal())
		}
		return fmt.Sprintf("exited with code %d", ee.ExitCode())
	}
	if err != nil {
		return err.Error()
	}
	return "exited cleanly"
}

// signalName is SIGKILL for syscall.SIGKILL (Go's String gives "killed").
func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	}
	return fmt.Sprintf("%d (%s)", int(s), s)
}

// lastLogLine is the last non-empty line of the file at path (read from
// its last 8 KiB), or "" when there is none.
func lastLogLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-8<<10, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(string(lines[i])); l != "" {
			return l
		}
	}
	return ""
}

// checkDevPorts refuses to start when any node's port is taken: the new
// servers would fail to bind while the banner and the leader check talked
// to whatever already listens there (typically another dev cluster).
func checkDevPorts(ns []*devNode) error {
	for _, n := range ns {
		for _, p := range []struct{ flag, addr, net string }{
			{"gRPC", n.grpc, "tcp"}, {"Raft", n.raft, "tcp"}, {"gossip", n.gossip, "tcp"}, {"gossip", n.gossip, "udp"}, {"HTTP", n.http, "tcp"},
		} {
			if err := probeBind(p.net, p.addr); err != nil {
				return fmt.Errorf("%s's %s port %s (%s) is in use: %v; is another dev cluster running? Stop it, or pass --base-port for another range",
					n.id, p.flag, p.addr, p.net, err)
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
// and its last log line) and started again after devRestartDelay while
// the others keep serving. A node that keeps failing right after its
// restarts is left down, with a message. say writes one line.
func superviseDev(ctx context.Context, p *devProcs, say func(format string, args ...any)) {
	quick := map[*devNode]int{}
	restart := make(chan *devNode)
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-p.exits:
			p.exited(e.n)
			ranFor := time.Since(e.n.started)
			say("%s %s after %s; last log line: %s", e.n.id, howExited(e.err), ranFor.Round(100*time.Millisecond), orNone(lastLogLine(e.n.logPath)))
			if ranFor < devQuickExit && e.n.restarts > 0 {
				quick[e.n]++
			} else {
				quick[e.n] = 0
			}
			if quick[e.n] >= devMaxQuickExits {
				say("%s failed %d times right after starting; left down (see %s)", e.n.id, quick[e.n], e.n.logPath)
				continue
			}
			say("%s restarts in %v; the other nodes keep serving", e.n.id, devRestartDelay)
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
			if err := p.start(n); err != nil {
				say("%s: %v", n.id, err)
				continue
			}
			say("%s restarted (pid %d)", n.id, n.cmd.Process.Pid)
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
