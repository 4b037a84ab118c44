package proccluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
)

// buildServer builds the inference-cache binary into a temporary
// directory (the harness runs real processes, not the package in-process).
func buildServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "inference-cache")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/inference-cache").CombinedOutput()
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// A killed leader is replaced by one of the survivors, the write made
// meanwhile commits, and the killed server restarted with the same command
// line catches up to the same digest as the others.
func TestCluster_KilledLeaderIsReplacedAndCatchesUpAfterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts three server processes")
	}
	bin := buildServer(t)
	dir := t.TempDir()
	exits := make(chan string, 8)
	c := New(Options{Binary: bin, OnExit: func(p *Proc, e Exit) { exits <- p.Name() + " " + e.String() }})
	var nodes []Node
	for i := 1; i <= 3; i++ {
		id := "n" + strconv.Itoa(i)
		n, err := LoopbackNode(id, filepath.Join(dir, id))
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	var ms []Member
	for _, n := range nodes {
		p := c.Add(Spec{Name: n.ID, Args: ServerArgs(n, 3, nodes, "--fast-timing", "--log-format", "json"), LogPath: filepath.Join(dir, n.ID+".log")})
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(n.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ms = append(ms, Member{Name: n.ID, Conn: cc})
	}
	defer func() {
		c.StopAll(10 * time.Second)
		if t.Failed() {
			for _, p := range c.Procs() {
				t.Logf("--- log tail of %s ---\n%s", p.Name(), p.LogTail(4000))
			}
		}
	}()
	ctx := context.Background()
	if err := c.Procs()[0].Start(); err == nil {
		t.Fatal("a second Start of a running process succeeded")
	}
	if err := WaitServing(ctx, ms, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	li, err := WaitLeader(ctx, ms, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.Procs()[li]
	if e := leader.Kill(); e.String() != "killed by signal SIGKILL" || leader.Running() {
		t.Fatalf("killed leader: exit %q, running %v", e, leader.Running())
	}
	if got := <-exits; got != leader.Name()+" killed by signal SIGKILL" {
		t.Fatalf("OnExit got %q", got)
	}
	others := slices.Delete(slices.Clone(ms), li, li+1)
	ni, err := WaitLeader(ctx, others, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if others[ni].Name == leader.Name() {
		t.Fatalf("the killed %s is still the agreed leader", leader.Name())
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tokens := make([]uint32, 64)
	for i := range tokens {
		tokens[i] = uint32(5000 + i)
	}
	r, err := pb.NewInferenceCacheClient(others[ni].Conn).Ingest(wctx, &pb.IngestRequest{Events: []*pb.BlockEvent{{
		Kind: pb.BlockEvent_STORED, ReplicaId: "r1", HashScheme: "vllm", ModelId: "m", TenantId: "t", TokenIds: tokens, BlockSize: 16}}})
	if err != nil || r.Accepted != 1 {
		t.Fatalf("write with the old leader down: %v %v", r, err)
	}

	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	d, err := WaitDigests(ctx, ms, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d.AppliedIndex < r.AppliedIndex {
		t.Fatalf("converged at applied index %d, before the write at %d", d.AppliedIndex, r.AppliedIndex)
	}
}

// Pause holds a process without ending it and Resume lets it go on; Stop
// ends a server cleanly (SIGTERM), even a paused one.
func TestProc_PauseResumeStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	c := New(Options{Binary: sleep})
	p := c.Add(Spec{Name: "s", Args: []string{"60"}, LogPath: filepath.Join(t.TempDir(), "s.log")})
	if e := p.Wait(); e.Err != nil || p.Done() != nil {
		t.Fatalf("before Start: %v %v", e, p.Done())
	}
	if err := p.Pause(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Pause before Start: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, p.Pid())
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e := p.Stop(5 * time.Second)
	if sig, ok := e.Signaled(); !ok || sig != syscall.SIGTERM || time.Since(start) > 4*time.Second {
		t.Fatalf("Stop of a paused process: %v after %v", e, time.Since(start))
	}
	if p.Running() || p.Pid() == 0 {
		t.Fatalf("after Stop: running %v, pid %d", p.Running(), p.Pid())
	}
}

// waitStopped waits until /proc/<pid>/stat gives the process the state
// T (stopped).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	poll.Eventually(t, 2*time.Second, 10*time.Millisecond, func() (bool, string) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		// pid (comm) S ...: the state follows the last ')'.
		i := len(b) - 1
		for i > 0 && b[i] != ')' {
			i--
		}
		st := string(b[i+2 : i+3])
		return st == "T", fmt.Sprintf("paused process state %q, want T", st)
	})
}

func TestServerArgs_SkipsItselfAndOmitsAnEmptyID(t *testing.T) {
	a := Node{ID: "a", DataDir: "/d/a", GRPC: "h:1", Raft: "h:2", Gossip: "h:3"}
	b := Node{ID: "b", Gossip: "h:13"}
	got := ServerArgs(a, 2, []Node{a, b}, "--fast-timing")
	want := []string{"server", "--node-id", "a", "--data-dir", "/d/a", "--grpc-addr", "h:1", "--raft-addr", "h:2",
		"--gossip-addr", "h:3", "--http-addr", "", "--bootstrap-expect", "2", "--join", "h:13", "--fast-timing"}
	if !slices.Equal(got, want) {
		t.Fatalf("ServerArgs = %q\nwant %q", got, want)
	}
	a.ID = ""
	if got := ServerArgs(a, 2, nil); slices.Contains(got, "--node-id") || slices.Contains(got, "--join") {
		t.Fatalf("no id, no peers: %q", got)
	}
}
