package devcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/proccluster"
)

// supervised starts a real process running script under a supervisor
// restarting after 20 ms; lines receives the supervisor's lines.
func supervised(t *testing.T, script string) (n *node, lines chan string) {
	t.Helper()
	exits := make(chan nodeExit, 1)
	byProc := map[*proccluster.Proc]*node{}
	procs := proccluster.New(proccluster.Options{Binary: "/bin/sh",
		OnExit: func(p *proccluster.Proc, e proccluster.Exit) { exits <- nodeExit{n: byProc[p], exit: e} }})
	n = &node{Node: proccluster.Node{ID: "node2"}}
	n.proc = procs.Add(proccluster.Spec{Name: "node2", Args: []string{"-c", script}, LogPath: filepath.Join(t.TempDir(), "node2.log")})
	byProc[n.proc] = n
	lines = make(chan string, 32)
	s := &supervisor{delay: 20 * time.Millisecond, quick: quickExit, maxQuick: maxQuickExits,
		say: func(f string, a ...any) { lines <- fmt.Sprintf(f, a...) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx, exits)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		procs.StopAll(5 * time.Second)
	})
	if err := startNode(n); err != nil {
		t.Fatal(err)
	}
	return n, lines
}

// next is the supervisor's next line, within 10 s.
func next(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l := <-lines:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no line from the supervisor within 10 s")
		return ""
	}
}

// A serving process killed by SIGKILL is reported with its log's path
// and started again, as a new process, after the restart delay.
func TestSupervisor_RestartsAKilledProcess(t *testing.T) {
	n, lines := supervised(t, "echo serving; exec sleep 60")
	first := n.proc.Pid()
	n.proc.Kill()
	if l := next(t, lines); !strings.HasPrefix(l, "node2 killed by signal SIGKILL after ") || !strings.HasSuffix(l, "; log "+n.proc.LogPath()) {
		t.Fatalf("death line %q", l)
	}
	if l := next(t, lines); l != "node2 restarts in 20ms; the other nodes keep serving" {
		t.Fatalf("restart notice %q", l)
	}
	l := next(t, lines)
	if want := fmt.Sprintf("node2 restarted (pid %d)", n.proc.Pid()); l != want || n.proc.Pid() == first || !n.proc.Running() {
		t.Fatalf("%q (pid %d, first %d, running %v), want %q from a new running process", l, n.proc.Pid(), first, n.proc.Running(), want)
	}
	if n.restarts != 1 {
		t.Fatalf("restarts %d, want 1", n.restarts)
	}
}

// A process that fails right after each restart is started again until
// it failed maxQuickExits times in a row after a restart, then left down,
// each death reported with the line of its log that says why.
func TestSupervisor_LeavesDownAProcessThatKeepsFailingAtStart(t *testing.T) {
	n, lines := supervised(t, "echo 'error: listen tcp 127.0.0.1:7401: bind: address already in use'; exit 1")
	why := "its log says: error: listen tcp 127.0.0.1:7401: bind: address already in use (log " + n.proc.LogPath() + ")"
	for i := 0; i <= maxQuickExits; i++ {
		if l := next(t, lines); !strings.HasPrefix(l, "node2 exited with code 1 after ") || !strings.HasSuffix(l, why) {
			t.Fatalf("exit %d: %q, want the line of its log", i+1, l)
		}
		if i == maxQuickExits {
			break
		}
		if l := next(t, lines); l != "node2 restarts in 20ms; the other nodes keep serving" {
			t.Fatalf("exit %d: %q", i+1, l)
		}
		if l := next(t, lines); !strings.HasPrefix(l, "node2 restarted (pid ") {
			t.Fatalf("exit %d: %q", i+1, l)
		}
	}
	want := fmt.Sprintf("node2 failed %d times right after starting; left down (see %s)", maxQuickExits, n.proc.LogPath())
	if l := next(t, lines); l != want {
		t.Fatalf("%q\nwant %q", l, want)
	}
	if n.restarts != maxQuickExits {
		t.Fatalf("restarts %d, want %d", n.restarts, maxQuickExits)
	}
}

// A dead engine, subscriber or proxy is not a server node: its restart
// line says the cluster and the rest of the fleet go on, not "the other
// nodes".
func TestOthersServing_NamesWhatGoesOn(t *testing.T) {
	if got := othersServing(&node{Node: proccluster.Node{ID: "sim-1"}, fleet: true}); got != "the cluster and the rest of the fleet keep serving" {
		t.Errorf("engine: %q", got)
	}
	if got := othersServing(&node{Node: proccluster.Node{ID: "node2"}}); got != "the other nodes keep serving" {
		t.Errorf("server node: %q", got)
	}
}
