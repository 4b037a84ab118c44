package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/syncbuf"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/internal/freeport"
)

// waitOutput polls out until re matches, and returns the submatches.
func waitOutput(t *testing.T, out *syncbuf.Buffer, re *regexp.Regexp, limit time.Duration) []string {
	t.Helper()
	var m []string
	poll.Eventually(t, limit, 50*time.Millisecond, func() (bool, string) {
		s := out.String()
		m = re.FindStringSubmatch(s)
		return m != nil, fmt.Sprintf("no %q in the dev output:\n%s", re, s)
	})
	return m
}

// devRun is one `inference-cache dev` process a test started: its output,
// and exited, which receives Wait's error once the process ends.
type devRun struct {
	cmd    *exec.Cmd
	out    syncbuf.Buffer
	exited chan error
}

// startDev starts `inference-cache dev` with args. At the test's end a dev
// still running gets SIGINT (SIGKILL after 30 s), and the output of a
// failed test is logged.
func startDev(t *testing.T, args ...string) *devRun {
	t.Helper()
	d := &devRun{cmd: exec.Command(binPath, append([]string{"dev"}, args...)...), exited: make(chan error, 1)}
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() {
		err := d.cmd.Wait()
		close(waited)
		d.exited <- err
	}()
	t.Cleanup(func() {
		select {
		case <-waited:
		default:
			_ = d.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-waited:
			case <-time.After(30 * time.Second):
				_ = d.cmd.Process.Kill()
				<-waited
			}
		}
		if t.Failed() {
			t.Logf("dev output:\n%s", d.out.String())
		}
	})
	return d
}

// stop is Ctrl-C: dev must exit 0 within limit, having said "cluster
// stopped".
func (d *devRun) stop(t *testing.T, limit time.Duration) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.exited:
		if err != nil {
			t.Fatalf("dev after Ctrl-C: %v", err)
		}
	case <-time.After(limit):
		t.Fatalf("dev did not stop within %v of SIGINT", limit)
	}
	if !strings.Contains(d.out.String(), "cluster stopped") {
		t.Fatal(`no "cluster stopped" after SIGINT`)
	}
}

// `inference-cache dev` keeps the cluster up through a node's death: the
// SIGKILLed node is reported (signal, log path), writes still commit
// on the other two, and the node comes back by itself and catches up. A
// second dev on the same ports refuses to start with the bind error and a
// non-zero exit instead of reporting the first cluster as its own.
func TestDev_RestartsAKilledNodeAndRefusesBusyPorts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster of three server processes")
	}
	base, err := freeport.Range(devPorts)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The cluster alone: its subject is the nodes' supervision, and a
	// fleet starting beside it on a loaded machine only adds load
	// (devfleet_test.go tests the fleet).
	dev := startDev(t, "--dir", filepath.Join(dir, "a"), "--base-port", strconv.Itoa(base), "--engines", "0", "--demo-fleet=false")
	out := &dev.out
	waitOutput(t, out, regexp.MustCompile(`cluster ready: leader node\d`), 60*time.Second)
	pid, _ := strconv.Atoi(waitOutput(t, out, regexp.MustCompile(`node2  pid (\d+)`), time.Second)[1])
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(base+10*i+1) }

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, regexp.MustCompile(`node2 killed by signal SIGKILL after \S+; log \S+node2\.log`), 10*time.Second)

	// Quorum is two of three: a write through the survivors commits.
	c, err := client.New(client.Config{Addrs: []string{addr(0), addr(2)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tokens := toks(70000, 128) // 8 blocks: at least minimumMatchedTokens
	// A second replica with other blocks: a prefix held by every serving
	// replica distinguishes none (contract §5.4) and is no PREFIX_MATCH.
	resp, err := c.Ingest(ctx, &pb.IngestRequest{Events: []*pb.BlockEvent{stored("r-dev", tenant, tokens), stored("r-other", tenant, toks(80000, 128))}})
	if err != nil || resp.Accepted != 2 {
		t.Fatalf("write with node2 down: %v %v", resp, err)
	}
	select {
	case err := <-dev.exited:
		t.Fatalf("dev exited when one node died: %v", err)
	default:
	}

	newPid, _ := strconv.Atoi(waitOutput(t, out, regexp.MustCompile(`node2 restarted \(pid (\d+)\)`), 15*time.Second)[1])
	if newPid == pid {
		t.Fatalf("node2 restarted with the killed pid %d", pid)
	}
	// The restarted node catches up on the write it missed.
	c2, err := client.New(client.Config{Addrs: []string{addr(1)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	poll.Eventually(t, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		lctx, lcancel := context.WithTimeout(context.Background(), 2*time.Second)
		r := c2.LookupRoute(lctx, lookupReq(tenant, tokens))
		lcancel()
		return r.ReasonCode == pb.ReasonCode_PREFIX_MATCH && r.Replicas[0].ReplicaId == "r-dev",
			fmt.Sprintf("restarted node2 does not answer the write made while it was down: %v", r)
	})

	// A second dev on the same ports.
	second := exec.Command(binPath, "dev", "--dir", filepath.Join(dir, "b"), "--base-port", strconv.Itoa(base), "--demo-fleet=false")
	got, err := second.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("second dev on busy ports: err %v, want a non-zero exit\n%s", err, got)
	}
	if !strings.Contains(string(got), addr(0)) || !strings.Contains(string(got), "address already in use") || strings.Contains(string(got), "cluster ready") {
		t.Fatalf("second dev on busy ports said:\n%s\nwant the busy port, the bind error and no banner", got)
	}

	dev.stop(t, 30*time.Second)
}

// On a terminal, dev's live view is one frame redrawn in place (tmux
// stands in for the terminal): after several refreshes the header is on
// the screen once, every node has a row, and a killed node's death and
// restart show up inside the frame.
func TestDev_LiveViewRedrawsInPlaceOnATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster of three server processes")
	}
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux not installed (make deps-test installs it): the terminal view needs a terminal")
	}
	base, err := freeport.Range(devPorts)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	session := "ic-dev-" + strconv.Itoa(base)
	sock := filepath.Join(dir, "tmux.sock")
	run := func(args ...string) string {
		out, err := exec.Command(tmux, append([]string{"-S", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	cmdline := binPath + " dev --dir " + filepath.Join(dir, "c") + " --base-port " + strconv.Itoa(base)
	run("new-session", "-d", "-s", session, "-x", "200", "-y", "50", cmdline)
	defer func() {
		_ = exec.Command(tmux, "-S", sock, "send-keys", "-t", session, "C-c").Run()
		// A session still running after 30 s is ended by kill-server.
		_ = poll.Until(context.Background(), 30*time.Second, 200*time.Millisecond, func() (bool, string) {
			return exec.Command(tmux, "-S", sock, "has-session", "-t", session).Run() != nil, "dev still running in tmux"
		})
		_ = exec.Command(tmux, "-S", sock, "kill-server").Run()
	}()
	screen := func() string { return run("capture-pane", "-p", "-t", session) }
	waitScreen := func(what string, ok func(string) bool) string {
		t.Helper()
		var s string
		poll.Eventually(t, 60*time.Second, 200*time.Millisecond, func() (bool, string) {
			s = screen()
			return ok(s), fmt.Sprintf("no %s on the screen:\n%s", what, s)
		})
		return s
	}
	// A frame with the demo traffic's lookups flowing, and the proxy's
	// and the demo's lines in it.
	s := waitScreen("frame with demo lookups and the proxy's line", func(s string) bool {
		return regexp.MustCompile(`lookups [1-9][0-9.]*/s  PREFIX_MATCH`).MatchString(s) &&
			regexp.MustCompile(`proxy http://\S+: [0-9.]+ requests/s, picks PREFIX_MATCH`).MatchString(s) &&
			regexp.MustCompile(`demo traffic \(.*\): [1-9][0-9]* requests, 0 failed`).MatchString(s)
	})
	// Three more redraws (the header's clock moves each time): still one frame.
	stamp := regexp.MustCompile(`inference-cache top  (\d\d:\d\d:\d\d)`)
	for i := 0; i < 3; i++ {
		before := stamp.FindStringSubmatch(s)
		s = waitScreen("a redraw", func(now string) bool {
			m := stamp.FindStringSubmatch(now)
			return m != nil && (before == nil || m[1] != before[1])
		})
	}
	if n := strings.Count(s, "inference-cache top"); n != 1 {
		t.Fatalf("the frame header is on the screen %d times, want 1 (redrawn in place):\n%s", n, s)
	}
	for _, id := range []string{"node1", "node2", "node3"} {
		if !regexp.MustCompile(`(?m)^` + id + `\s+127\.0\.0\.1:\d+\s+(Leader|Follower)`).MatchString(s) {
			t.Fatalf("no row for %s in the frame:\n%s", id, s)
		}
	}
	m := regexp.MustCompile(`node2  pid (\d+)`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("banner with node2's pid not on the screen:\n%s", s)
	}
	pid, _ := strconv.Atoi(m[1])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitScreen("death and restart of node2 in the frame", func(s string) bool {
		return strings.Contains(s, "node2 killed by signal SIGKILL") && strings.Contains(s, "node2 restarted (pid") && strings.Count(s, "inference-cache top") == 1
	})
}
