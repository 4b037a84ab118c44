package devcluster

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/internal/localfleet"
	"github.com/inference-cache/inference-cache/internal/proccluster"
	"github.com/inference-cache/inference-cache/internal/topview"
)

// Config is one dev run: the flags of `inference-cache dev` and what the
// command hands down.
type Config struct {
	// Dir holds the nodes' data (node1, node2, …), the logs and the
	// fleet's files; Host is the loopback host every process binds.
	Dir, Host string
	// PolicyFile and ModelsDir, when set, are passed to every node
	// (--policy, --models-dir); the fleet uses ModelsDir when it holds
	// localfleet.Model. With a fleet and no ModelsDir, the nodes get the
	// directory the fleet's files are unpacked into.
	PolicyFile, ModelsDir string
	// BasePort: node i (from 0) listens on BasePort+10i+1..4 (gRPC, Raft,
	// gossip, HTTP); the fleet follows (localfleet.Addrs).
	BasePort, Nodes int
	// Engines is the fleet's sim engines (0 = no fleet), each with
	// PrefillTPS and DecodeTPS (tokens per second) and KVBlocks blocks of
	// 16 tokens.
	Engines               int
	PrefillTPS, DecodeTPS float64
	KVBlocks              int
	// DemoFleet sends the demo traffic through the proxy.
	DemoFleet bool
	// Binary is this executable, run for every process.
	Binary string
	// Live: out is a terminal, where the live view redraws its frame and
	// the supervisor's lines join it; otherwise they are printed as lines
	// beside the view's periodic plain line.
	Live bool
	// Dial connects the live view to one node (gRPC HOST:PORT); Explain
	// words a failed Status call for it.
	Dial    func(addr string) (*client.Client, error)
	Explain func(error) string
}

// Defaults of dev's fleet: engines fast enough that a pasted request
// answers at once, with KV caches (1.6 M tokens each) that keep a
// Mooncake conversation's earlier turns until its next one, as the live
// benchmark's do: with 16,384 blocks an engine held about 18 prompts of
// 14,000 tokens and evicted them before the next turn came, so routing
// by prefix gained nothing over round robin.
const (
	DefaultEngines    = 3
	DefaultPrefillTPS = 50000
	DefaultKVBlocks   = 100000
)

// Check refuses values no dev cluster can start with, naming the flag.
func (c *Config) Check() error {
	if c.Nodes < 1 {
		return fmt.Errorf("--nodes %d: must be at least 1", c.Nodes)
	}
	switch {
	case c.Engines < 0 || c.Engines > 16:
		return fmt.Errorf("--engines %d: want 0 (no fleet) to 16", c.Engines)
	case !(c.PrefillTPS > 0), !(c.DecodeTPS > 0):
		return fmt.Errorf("--prefill-tps %v, --decode-tps %v: must be positive", c.PrefillTPS, c.DecodeTPS)
	case c.KVBlocks < 1:
		return fmt.Errorf("--kv-blocks %d: need at least 1", c.KVBlocks)
	}
	return nil
}

// node is one server of the dev cluster (or a process of its fleet): its
// addresses and process, and how often the supervisor restarted it.
type node struct {
	proccluster.Node
	proc     *proccluster.Proc
	restarts int   // supervised restarts so far
	logFrom  int64 // size of its log when the running process started: its lines follow
	fleet    bool  // a process of the serving fleet (engine, subscriber, proxy), not a server node
}

// cluster is one dev run's processes and the view they report to.
type cluster struct {
	cfg        Config
	out        io.Writer
	nodes      []*node
	procs      *proccluster.Cluster
	exits      chan nodeExit
	fleet      *fleet // nil without engines
	modelsNote string
	nodeModels string // --models-dir of every node: the given one, else the fleet's unpacked files
	view       *topview.View
}

// Run runs the dev cluster until ctx ends (Ctrl-C), printing its banner,
// the commands to try and the supervisor's lines to out, and stops every
// process before it returns. It errors, before starting anything, when
// c fails Check, the --dir holds a cluster made on other addresses, or a
// port is taken; and when a node dies while the cluster starts or the
// fleet does not come up (everything started is stopped then).
func Run(ctx context.Context, c Config, out io.Writer) error {
	if err := c.Check(); err != nil {
		return err
	}
	cl, err := newCluster(c, out)
	if err != nil {
		return err
	}
	if err := cl.startNodes(); err != nil {
		cl.stopAll()
		return err
	}
	members, closeMembers, err := proccluster.DialMembers(cl.nodeList())
	if err != nil {
		cl.stopAll()
		return err
	}
	defer closeMembers()
	if up, err := cl.waitReady(ctx, members); !up {
		cl.stopAll()
		return err
	}
	// The nodes are supervised from "cluster ready" on, as its banner
	// says: a node killed while the fleet starts is reported and
	// restarted then, not once the fleet is up.
	supCtx, supStop := context.WithCancel(ctx)
	supervised := make(chan struct{})
	go func() {
		defer close(supervised)
		newSupervisor(cl.say).run(supCtx, cl.exits)
	}()
	if cl.fleet != nil && ctx.Err() == nil {
		if err := cl.startFleet(ctx); err != nil {
			supStop()
			<-supervised
			cl.stopAll()
			return err
		}
	}
	fmt.Fprintln(out, "Ctrl-C stops the cluster.")
	wait := cl.startLines(ctx)
	<-supervised // until ctx ends
	supStop()
	wait()
	cl.stopAll()
	return nil
}

// newCluster lays out the nodes and the fleet and adds their processes,
// after checking --dir's layout and every port.
func newCluster(c Config, out io.Writer) (*cluster, error) {
	addr := func(p int) string { return c.Host + ":" + strconv.Itoa(p) }
	cl := &cluster{cfg: c, out: out, view: &topview.View{}}
	for i := 0; i < c.Nodes; i++ {
		p, id := c.BasePort+10*i, "node"+strconv.Itoa(i+1)
		cl.nodes = append(cl.nodes, &node{Node: proccluster.Node{ID: id, DataDir: filepath.Join(c.Dir, id),
			GRPC: addr(p + 1), Raft: addr(p + 2), Gossip: addr(p + 3), HTTP: addr(p + 4)}})
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := checkDevLayout(c.Dir, c.Host, c.BasePort, c.Nodes); err != nil {
		return nil, err
	}
	if err := checkPorts(cl.nodes); err != nil {
		return nil, err
	}
	// Every exit reaches the supervisor; a process has at most one exit
	// outstanding (it restarts only after its exit was received), so the
	// buffer never blocks a process's reaper.
	cl.exits = make(chan nodeExit, len(cl.nodes)+c.Engines+2)
	byProc := map[*proccluster.Proc]*node{}
	cl.procs = proccluster.New(proccluster.Options{Binary: c.Binary, OwnProcessGroup: true,
		OnExit: func(p *proccluster.Proc, e proccluster.Exit) { cl.exits <- nodeExit{n: byProc[p], exit: e} }})
	if c.Engines > 0 {
		fm, err := localfleet.ModelsDir(c.Dir, c.ModelsDir)
		if err != nil {
			return nil, err
		}
		cl.modelsNote = "tokenizer and chat template in " + fm
		// The nodes tokenize a lookup's prompt text with the fleet's
		// files, so "lookup --model qwen3 --prompt …" keys it as the
		// proxy does.
		cl.nodeModels = fm
		if cl.fleet, err = newFleet(cl.procs, byProc, c.Dir, c.Host, c.BasePort, cl.nodes, c.Engines, fm, c.PrefillTPS, c.DecodeTPS, c.KVBlocks); err != nil {
			return nil, err
		}
		if err := cl.fleet.checkPorts(); err != nil {
			return nil, err
		}
	}
	cl.addNodes(byProc)
	return cl, nil
}

// addNodes adds every node's server process.
func (cl *cluster) addNodes(byProc map[*proccluster.Proc]*node) {
	extra := []string{"--fast-timing"}
	if cl.cfg.PolicyFile != "" {
		extra = append(extra, "--policy", cl.cfg.PolicyFile)
	}
	if m := cmp.Or(cl.cfg.ModelsDir, cl.nodeModels); m != "" {
		extra = append(extra, "--models-dir", m)
	}
	for _, n := range cl.nodes {
		n.proc = cl.procs.Add(proccluster.Spec{Name: n.ID, Args: proccluster.ServerArgs(n.Node, cl.cfg.Nodes, cl.nodeList(), extra...),
			LogPath: filepath.Join(cl.cfg.Dir, n.ID+".log")})
		byProc[n.proc] = n
	}
}

// startNodes starts every node and prints each one's pid and addresses.
func (cl *cluster) startNodes() error {
	for _, n := range cl.nodes {
		if err := startNode(n); err != nil {
			return err
		}
	}
	fmt.Fprintf(cl.out, "inference-cache dev: %d nodes, data under %s\n", cl.cfg.Nodes, cl.cfg.Dir)
	for _, n := range cl.nodes {
		fmt.Fprintf(cl.out, "  %s  pid %d  grpc %s  metrics http://%s/metrics  log %s\n", n.ID, n.proc.Pid(), n.GRPC, n.HTTP, n.proc.LogPath())
	}
	return nil
}

// waitReady waits up to 30 s for a leader and prints how to use the
// cluster. up is false, with the error, when a node died meanwhile (a port
// taken since the check, a lock, damaged data: it fails the whole start),
// and false with nil when ctx ended.
func (cl *cluster) waitReady(ctx context.Context, members []proccluster.Member) (up bool, err error) {
	waitCtx, waitStop := context.WithCancel(ctx)
	defer waitStop()
	ready := make(chan string, 1)
	go func() {
		leader := ""
		if i, err := proccluster.WaitLeader(waitCtx, members, 30*time.Second); err == nil {
			leader = members[i].Name
		}
		ready <- leader
	}()
	var leader string
	select {
	case leader = <-ready:
	case e := <-cl.exits:
		waitStop()
		return false, fmt.Errorf("%s %s while the cluster was starting; %s", e.n.ID, e.exit, deathReport(e.n, e.exit))
	case <-ctx.Done():
		return false, nil
	}
	if leader != "" {
		fmt.Fprintf(cl.out, "cluster ready: leader %s. Try:\n  %s status --addr %s\n", leader, selfCommand(), cl.nodes[0].GRPC)
		fmt.Fprintf(cl.out, "Failover: kill -9 a node's pid; the others keep answering and dev restarts it after %v.\n", restartDelay)
	} else if ctx.Err() == nil {
		fmt.Fprintf(cl.out, "no leader yet after 30s; see the node logs\n")
	}
	return true, nil
}

// startFleet starts the fleet and prints its banner and the curl pair.
func (cl *cluster) startFleet(ctx context.Context) error {
	if err := cl.fleet.start(ctx); err != nil {
		return fmt.Errorf("the fleet: %w", err)
	}
	cl.fleet.banner(cl.out, cl.modelsNote)
	return cl.fleet.writeCurlPair(cl.out, cl.cfg.Dir, time.Now())
}

// say writes one supervisor line: into the live view's frame on a
// terminal, else as a line of its own.
func (cl *cluster) say(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if cl.cfg.Live {
		cl.view.Event(time.Now().Format("15:04:05 ") + line)
		return
	}
	fmt.Fprintln(cl.out, line)
}

// startLines starts the proxy's line and the demo traffic (with a fleet)
// and the live view; wait stops them all and returns once they ended.
func (cl *cluster) startLines(ctx context.Context) (wait func()) {
	demoDone := make(chan struct{})
	demoCtx, demoStop := context.WithCancel(ctx)
	if cl.fleet != nil {
		pl := &proxyLine{proxyURL: cl.fleet.proxyURL(), window: 10 * time.Second}
		for _, e := range cl.fleet.cfg.Engines {
			pl.engines = append(pl.engines, e.URL())
		}
		go pl.run(demoCtx, time.Second, cl.view.SetProxy)
		if cl.cfg.DemoFleet {
			cl.startDemo(demoCtx, demoDone)
		}
	}
	if cl.fleet == nil || !cl.cfg.DemoFleet {
		close(demoDone)
	}
	topDone := make(chan struct{})
	topCtx, topStop := context.WithCancel(ctx)
	go func() {
		defer close(topDone)
		cl.runView(topCtx)
	}()
	return func() {
		topStop()
		<-topDone
		demoStop()
		<-demoDone
	}
}

// startDemo starts the demo traffic through the proxy; done closes when
// it ended.
func (cl *cluster) startDemo(ctx context.Context, done chan<- struct{}) {
	fmt.Fprintln(cl.out, "demo traffic: the built-in generator's chat sessions through the proxy, about 2 requests/s (--demo-fleet=false turns it off)")
	every := 10 * time.Second
	if cl.cfg.Live {
		every = 2 * time.Second
	}
	go func() {
		defer close(done)
		runTraffic(ctx, cl.fleet.proxyURL(), every, func(l string) {
			if cl.cfg.Live {
				cl.view.SetDemo(l)
			} else {
				fmt.Fprintln(cl.out, l)
			}
		})
	}()
}

// runView runs the live view of the nodes until ctx ends: a frame on a
// terminal, else a plain line every 10 s.
func (cl *cluster) runView(ctx context.Context) {
	addrs := make([]string, len(cl.nodes))
	for i, n := range cl.nodes {
		addrs[i] = n.GRPC
	}
	p := topview.NewPoller(addrs, cl.cfg.Dial, time.Second, cl.cfg.Explain)
	defer p.Close()
	r := topview.RunConfig{Every: time.Second, Mode: topview.Plain, PlainEvery: 10 * time.Second}
	if cl.cfg.Live {
		r.Mode = topview.Terminal
	}
	_ = topview.Run(ctx, cl.out, p, cl.view, r)
}

// stopAll stops every process and says so.
func (cl *cluster) stopAll() {
	cl.procs.StopAll(localfleet.StopTimeout)
	fmt.Fprintln(cl.out, "cluster stopped")
}

// nodeList is the nodes' addresses, for the join flags.
func (cl *cluster) nodeList() []proccluster.Node {
	out := make([]proccluster.Node, len(cl.nodes))
	for i, n := range cl.nodes {
		out[i] = n.Node
	}
	return out
}

// devLayoutFile records, in a dev cluster's --dir, the addresses its Raft
// configuration was made with.
const devLayoutFile = "dev-layout"

// checkDevLayout refuses to restart a dev cluster's data on other
// addresses: Raft keeps its peers' addresses in its stored configuration,
// so the nodes would vote for peers at the old ports forever and no
// leader would ever be elected. A new --dir (or an emptied one) records
// the layout for next time.
func checkDevLayout(dir, host string, basePort, nodes int) error {
	want := fmt.Sprintf("host=%s base-port=%d nodes=%d\n", host, basePort, nodes)
	path := filepath.Join(dir, devLayoutFile)
	b, err := os.ReadFile(path)
	if err == nil && string(b) != want {
		return fmt.Errorf("--dir %s holds a cluster made with %s; its Raft configuration keeps those addresses, so restart it with the same --host, --base-port and --nodes, or delete %s to start an empty cluster",
			dir, strings.TrimSpace(string(b)), dir)
	}
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(path, []byte(want), 0o644)
}

// selfCommand is how to run this binary from the current directory, for
// commands printed to be pasted: relative when it lies below the
// directory (bin/inference-cache for make run), else as invoked.
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, exe); err == nil && !strings.HasPrefix(rel, "..") {
			if !strings.ContainsRune(rel, filepath.Separator) {
				rel = "." + string(filepath.Separator) + rel
			}
			return rel
		}
	}
	return exe
}
