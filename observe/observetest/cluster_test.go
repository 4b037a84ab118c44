package observetest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/syncbuf"
	"github.com/inference-cache/inference-cache/observe"
)

// TestRealPublisherIntoRealCluster drives the subscriber with a real libzmq
// publisher (observe/testdata/publisher.py) into a real 3-node cluster
// (`inference-cache dev`), asserting the index through LookupRoute.
func TestRealPublisherIntoRealCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster and python publishers; skipped with -short")
	}
	py := findPython(t)
	addrs := startCluster(t)
	conn, err := grpc.NewClient(addrs[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cli := pb.NewInferenceCacheClient(conn)

	a, b := tokens(1000, 80), tokens(5000, 80) // five 16-token blocks each
	stored := func(hashes []int, parent any, toks []uint32, extra map[string]any) map[string]any {
		e := map[string]any{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": toks, "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil}
		for k, v := range extra {
			e[k] = v
		}
		return e
	}
	pubEvents := func(p *pyPub, op string, rank any, form string, evs ...map[string]any) {
		if evs == nil {
			evs = []map[string]any{}
		}
		p.cmd(t, map[string]any{"op": op, "events": evs, "rank": rank, "form": form})
	}

	// The first replica of (vllm, model) is alone in its serving set, so
	// its distinguishing power is 1 − 1/1 = 0 and ranking v2 never makes
	// it a PREFIX_MATCH (contract §5.4): the answer is the affinity fallback
	// naming it. It stays in the serving set, so every later scenario has
	// at least two replicas and must match strictly.
	t.Run("lone replica gets affinity, not a prefix match", func(t *testing.T) {
		p, name, _ := scenario(t, py, addrs, false)
		pubEvents(p, "publish", nil, "array", stored([]int{1, 2, 3, 4, 5}, nil, a, nil))
		var r *pb.LookupRouteResponse
		poll.Eventually(t, 10*time.Second, 100*time.Millisecond, func() (bool, string) {
			r = lookup(t, cli, a, name, "")
			return r.GetReasonCode() == pb.ReasonCode_AFFINITY_HINT, fmt.Sprintf("lone replica: %v %q %v, want AFFINITY_HINT", r.GetReasonCode(), r.GetDetail(), r.GetReplicas())
		})
		if len(r.GetReplicas()) != 1 || r.GetReplicas()[0].GetReplicaId() != name {
			t.Fatalf("lone replica: %v %q %v, want AFFINITY_HINT naming %s", r.GetReasonCode(), r.GetDetail(), r.GetReplicas(), name)
		}
	})
	t.Run("normal flow, map form, then removal", func(t *testing.T) {
		p, name, _ := scenario(t, py, addrs, false)
		pubEvents(p, "publish", nil, "map", stored([]int{1, 2, 3, 4, 5}, nil, a, nil))
		waitRoute(t, cli, a, name, "", name, 80)
		pubEvents(p, "publish", nil, "array", map[string]any{"type": "BlockRemoved", "block_hashes": []int{1, 2, 3, 4, 5}, "medium": "GPU"})
		waitNoMatch(t, cli, a, name, "")
	})
	t.Run("engine restart clears", func(t *testing.T) {
		p, name, _ := scenario(t, py, addrs, false)
		pubEvents(p, "publish", nil, "array", stored([]int{1, 2, 3, 4, 5}, nil, a, nil))
		waitRoute(t, cli, a, name, "", name, 80)
		p.cmd(t, map[string]any{"op": "restart"})
		pubEvents(p, "publish", nil, "array", stored([]int{11, 12, 13, 14, 15}, nil, b, nil))
		waitRoute(t, cli, b, name, "", name, 80)
		waitNoMatch(t, cli, a, name, "")
	})
	for _, frames := range []int{2, 3} {
		t.Run(fmt.Sprintf("gap with replay, %d-frame replies", frames), func(t *testing.T) {
			p, name, m := scenario(t, py, addrs, true)
			p.cmd(t, map[string]any{"op": "style", "frames": frames})
			pubEvents(p, "publish", nil, "array", stored([]int{1}, nil, a[:16], nil))
			pubEvents(p, "skip", nil, "array", stored([]int{2, 3, 4, 5}, 1, a[16:], nil))
			pubEvents(p, "publish", nil, "array", stored([]int{11}, nil, b[:16], nil))
			waitRoute(t, cli, a, name, "", name, 80)
			if got := testutil.ToFloat64(m.Replays.WithLabelValues(name, "complete")); got != 1 {
				t.Fatalf("complete replays = %v, want 1", got)
			}
		})
	}
	// llm-d's topology: the engine connects to the subscriber's listen
	// socket and is matched by the pod in its topic kv@<pod>@<model>; its
	// chain starts at parent_block_hash 0, and its gap is replayed from its
	// own replay socket.
	t.Run("engine connects to a listening subscriber", func(t *testing.T) {
		p, name, m := startScenario(t, py, addrs, true, true)
		pubEvents(p, "publish", nil, "array", stored([]int{1}, 0, a[:16], nil))
		pubEvents(p, "skip", nil, "array", stored([]int{2, 3, 4, 5}, 1, a[16:], nil))
		pubEvents(p, "publish", nil, "array", stored([]int{11}, nil, b[:16], nil))
		waitRoute(t, cli, a, name, "", name, 80)
		// The replay is counted when its end marker arrives, which may be
		// just after its events reached the cluster.
		poll.Eventually(t, 5*time.Second, 10*time.Millisecond, func() (bool, string) {
			got := testutil.ToFloat64(m.Replays.WithLabelValues(name, "complete"))
			return got == 1, fmt.Sprintf("complete replays = %v, want 1", got)
		})
		if got := testutil.ToFloat64(m.ListenUnknownMessages); got != 0 {
			t.Fatalf("unknown messages = %v, want 0", got)
		}
	})
	t.Run("gap without replay clears", func(t *testing.T) {
		p, name, m := scenario(t, py, addrs, false)
		pubEvents(p, "publish", nil, "array", stored([]int{1, 2, 3, 4, 5}, nil, a, nil))
		waitRoute(t, cli, a, name, "", name, 80)
		pubEvents(p, "skip", nil, "array")
		pubEvents(p, "publish", nil, "array", stored([]int{11, 12, 13, 14, 15}, nil, b, nil))
		waitRoute(t, cli, b, name, "", name, 80)
		waitNoMatch(t, cli, a, name, "")
		if got := testutil.ToFloat64(m.Gaps.WithLabelValues(name)); got != 1 {
			t.Fatalf("gaps = %v, want 1", got)
		}
	})
	t.Run("AllBlocksCleared", func(t *testing.T) {
		p, name, _ := scenario(t, py, addrs, false)
		pubEvents(p, "publish", nil, "array", stored([]int{1, 2, 3, 4, 5}, nil, a, nil))
		waitRoute(t, cli, a, name, "", name, 80)
		pubEvents(p, "publish", nil, "array", map[string]any{"type": "AllBlocksCleared"})
		waitNoMatch(t, cli, a, name, "")
	})
	t.Run("DP ranks are separate replicas", func(t *testing.T) {
		p, name, _ := scenario(t, py, addrs, false)
		pubEvents(p, "publish", 2, "array", stored([]int{1, 2, 3, 4, 5}, nil, a, nil))
		pubEvents(p, "publish", 0, "array", stored([]int{1, 2, 3, 4, 5}, nil, a, nil))
		waitRoute(t, cli, a, name, "", name, 80, name+"-dp2")
		// Rank 0 drops the blocks; rank 2 keeps them.
		pubEvents(p, "publish", 0, "array", map[string]any{"type": "BlockRemoved", "block_hashes": []int{1, 2, 3, 4, 5}, "medium": "GPU"})
		waitRoute(t, cli, a, name, "", name+"-dp2", 80)
	})
	t.Run("LoRA partitions", func(t *testing.T) {
		p, name, _ := scenario(t, py, addrs, false)
		pubEvents(p, "publish", nil, "array", stored([]int{1, 2, 3, 4, 5}, nil, a, map[string]any{"lora_name": "sql-lora", "lora_id": 3}))
		pubEvents(p, "publish", nil, "array", stored([]int{11, 12, 13, 14, 15}, nil, b, map[string]any{"lora_id": 4}))
		waitRoute(t, cli, a, name, "sql-lora", name, 80)
		waitRoute(t, cli, b, name, "lora-id:4", name, 80)
		waitNoMatch(t, cli, a, name, "")
	})
	t.Run("block-size mismatch is rejected loudly", func(t *testing.T) {
		p, name, m := scenario(t, py, addrs, false)
		pubEvents(p, "publish", nil, "array", stored([]int{1, 2, 3, 4, 5}, nil, a, map[string]any{"block_size": 32, "block_hashes": []int{1, 2}, "token_ids": a[:64]}))
		pubEvents(p, "publish", nil, "array", stored([]int{11, 12, 13, 14, 15}, nil, b, nil))
		waitRoute(t, cli, b, name, "", name, 80)
		waitNoMatch(t, cli, a, name, "")
		if got := testutil.ToFloat64(m.BlockSizeMismatch.WithLabelValues(name)); got != 1 {
			t.Fatalf("block size mismatches = %v, want 1", got)
		}
	})
}

func tokens(start, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(start + i)
	}
	return t
}

func findPython(t *testing.T) string {
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import zmq, msgpack").Run() == nil {
			return py
		}
	}
	t.Skip("no python3 with zmq and msgpack: install Debian python3-zmq python3-msgpack (make deps-test)")
	return ""
}

// startCluster builds the binary and runs `inference-cache dev` (three real
// server processes on loopback); it returns the nodes' gRPC addresses.
func startCluster(t *testing.T) []string {
	t.Helper()
	if _, err := os.Stat("../../cmd/inference-cache/dev.go"); err != nil {
		t.Skip("the server binary (cmd/inference-cache dev) is not in this tree")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "inference-cache")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/inference-cache").CombinedOutput(); err != nil {
		t.Skipf("cannot build the server binary: %v\n%s", err, out)
	}
	base := freeBase(t)
	// The cluster alone: dev's serving fleet would take ports past the 30
	// freeBase checked, and a fleet that fails to start stops the nodes.
	cmd := exec.Command(bin, "dev", "--dir", filepath.Join(dir, "cluster"), "--base-port", strconv.Itoa(base), "--engines", "0", "--demo-fleet=false")
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	var said syncbuf.Buffer // the dev cluster's lines: a node's death and its cause
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the dev cluster said:\n%s", said.String())
			logs, _ := filepath.Glob(filepath.Join(dir, "cluster", "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s, its last lines:\n%s", l, tail(b, 40))
			}
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			said.Write(append(sc.Bytes(), '\n'))
			if !sent && strings.HasPrefix(sc.Text(), "cluster ready") {
				ready <- true
				sent = true
			}
		}
		if !sent {
			ready <- false
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("the dev cluster exited before electing a leader (logs under %s)", dir)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no leader after 60s (logs under %s)", dir)
	}
	return []string{"127.0.0.1:" + strconv.Itoa(base+1), "127.0.0.1:" + strconv.Itoa(base+11), "127.0.0.1:" + strconv.Itoa(base+21)}
}

// tail is the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freeBase finds a base port whose 30 ports (3 nodes × 10) are free now.
func freeBase(t *testing.T) int {
	for try := 0; try < 50; try++ {
		base := 20000 + 10*rand.IntN(3000)
		ok := true
		for p := base + 1; p <= base+25 && ok; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

type pyPub struct {
	in     io.WriteCloser
	out    *bufio.Scanner
	pub    string
	replay string
}

func (p *pyPub) cmd(t *testing.T, c map[string]any) {
	t.Helper()
	b, _ := json.Marshal(c)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	// Bounded: a publisher that never answers must fail this test, not
	// hang the whole test run until its timeout.
	scanned := make(chan bool, 1)
	go func() { scanned <- p.out.Scan() }()
	select {
	case ok := <-scanned:
		if !ok || p.out.Text() != "ok" {
			t.Fatalf("publisher answered %q to %s", p.out.Text(), b)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("publisher did not answer %s within 30 s", b)
	}
}

var scenarioN int

// scenario starts a python publisher and a subscriber for it; the replica
// and tenant are unique to the scenario so scenarios do not see each other.
func scenario(t *testing.T, py string, addrs []string, replay bool) (*pyPub, string, *observe.Metrics) {
	t.Helper()
	return startScenario(t, py, addrs, replay, false)
}

// startScenario is scenario; with connect the publisher's PUB socket
// connects to the subscriber's listen socket (llm-d's topology) with topic
// kv@<replica>@qwen3-8b, and the engine entry is matched by pod.
func startScenario(t *testing.T, py string, addrs []string, replay, connect bool) (*pyPub, string, *observe.Metrics) {
	t.Helper()
	scenarioN++
	name := "py" + strconv.Itoa(scenarioN)
	args := []string{"../testdata/publisher.py"}
	var listen string
	if connect {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listen = "tcp://" + l.Addr().String()
		l.Close()
		args = append(args, "--connect", listen, "--topic", "kv@"+name+"@qwen3-8b")
	}
	cmd := exec.Command(py, args...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &pyPub{in: in, out: bufio.NewScanner(out)}
	if !p.out.Scan() {
		t.Fatal("publisher did not start")
	}
	f := strings.Fields(p.out.Text())
	if len(f) != 3 || f[0] != "ready" {
		t.Fatalf("publisher said %q", p.out.Text())
	}
	p.pub, p.replay = f[1], f[2]
	ec := observe.EngineConfig{Endpoint: p.pub, ReplicaID: name, ModelID: "qwen3-8b", TenantID: name, HashScheme: "vllm", BlockSize: 16}
	if replay {
		ec.ReplayEndpoint = p.replay
	}
	cfg := &observe.Config{Engines: []observe.EngineConfig{ec}}
	if connect {
		cfg.Listen = listen
		cfg.Engines[0].Endpoint, cfg.Engines[0].Pod = "", name
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sink, err := observe.NewGRPCSink(addrs)
	if err != nil {
		t.Fatal(err)
	}
	m := observe.NewMetrics(nil)
	sub := observe.New(cfg, sink, observe.Options{Metrics: m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sub.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; sink.Close() })
	p.cmd(t, map[string]any{"op": "wait_subscriber"})
	return p, name, m
}

func lookup(t *testing.T, cli pb.InferenceCacheClient, toks []uint32, tenant, adapter string) *pb.LookupRouteResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := cli.LookupRoute(ctx, &pb.LookupRouteRequest{TokenIds: toks, ModelId: "qwen3-8b", TenantId: tenant, AdapterId: adapter, HashScheme: "vllm"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitRoute waits until the lookup is a PREFIX_MATCH whose replicas are
// exactly want (any order), the first with matched tokens.
func waitRoute(t *testing.T, cli pb.InferenceCacheClient, toks []uint32, tenant, adapter, first string, matched uint32, more ...string) {
	t.Helper()
	want := append([]string{first}, more...)
	poll.Eventually(t, 15*time.Second, 50*time.Millisecond, func() (bool, string) {
		r := lookup(t, cli, toks, tenant, adapter)
		why := fmt.Sprintf("lookup tenant %s adapter %q: got %v %v, want PREFIX_MATCH %v with %d tokens", tenant, adapter, r.GetReasonCode(), r.GetReplicas(), want, matched)
		if r.GetReasonCode() != pb.ReasonCode_PREFIX_MATCH || len(r.GetReplicas()) != len(want) {
			return false, why
		}
		got := map[string]uint32{}
		for _, h := range r.GetReplicas() {
			got[h.GetReplicaId()] = h.GetMatchedTokens()
		}
		for _, w := range want {
			if m, in := got[w]; !in || m != matched {
				return false, why
			}
		}
		return true, ""
	})
}

func waitNoMatch(t *testing.T, cli pb.InferenceCacheClient, toks []uint32, tenant, adapter string) {
	t.Helper()
	poll.Eventually(t, 15*time.Second, 50*time.Millisecond, func() (bool, string) {
		r := lookup(t, cli, toks, tenant, adapter)
		return r.GetReasonCode() != pb.ReasonCode_PREFIX_MATCH, fmt.Sprintf("lookup tenant %s adapter %q still a PREFIX_MATCH: %v", tenant, adapter, r.GetReplicas())
	})
}
