package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/internal/proccluster"
)

// devNode is one server of the dev cluster: its addresses and process,
// and how often the supervisor restarted it.
type devNode struct {
	proccluster.Node
	proc     *proccluster.Proc
	restarts int   // supervised restarts so far
	logFrom  int64 // size of its log when the running process started: its lines follow
}

func newDevCmd() *cobra.Command {
	var dir, host, policyFile, modelsDir string
	var basePort, nodes, engines, kvBlocks int
	var prefillTPS, decodeTPS float64
	var demoFleet bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local 3-node cluster on loopback (real server processes)",
		Long: `Starts --nodes server processes of this same binary on loopback, with real
ports and data under --dir (node1, node2, …), bootstraps them into one Raft
cluster, and prints each node's gRPC address and metrics URL. Node i (from 0)
uses ports base+10i+1 (gRPC), +2 (Raft), +3 (gossip), +4 (HTTP). Logs go to
<dir>/nodeN.log.

Beside the cluster it runs a serving fleet, each part a process of this
binary: --engines sim engines (sim-1, sim-2, …: "inference-cache sim-engine",
model qwen3, whose tokenizer and chat template are unpacked from the
repository's testdata/tokenizers/qwen3 into <dir>/models unless --models-dir
holds qwen3), publishing vLLM KV events that the subscriber
("inference-cache subscribe", dialling them) feeds to the cluster, and the
routing proxy ("inference-cache proxy", strategy picker) in front of them.
Engine j (from 0) uses ports base+10(nodes+j)+1 (HTTP), +2 (KV events) and
+3 (KV-event replay, so a restarted subscriber keeps the engine's hints);
the proxy base+10(nodes+engines)+1, the subscriber's metrics +2, and +3 a
second proxy, strategy round-robin, in front of the same engines: the
baseline of "loadgen --compare" (7461 against 7463 by default). dev
prints a curl pair to paste: two chat requests sharing a long system prompt,
the second routed to the engine that served the first, as its headers say.
With --demo-fleet the built-in generator's chat sessions flow through the
proxy (about 2 requests/s); the live view shows the proxy's line (requests/s,
picks by reason, hit rates) and the demo's.

A process that dies (kill -9 its pid to watch failover) is reported with how
it ended, its log and the line there that says why (the last panic, error or
warning it wrote), and started again after 3 s while the others keep
serving. Busy ports refuse the start with a non-zero exit. Ctrl-C stops
everything cleanly; the cluster's data stays, so the next run restarts the
same cluster (delete --dir to start empty).`,
		Example: `  inference-cache dev
  inference-cache dev --dir /tmp/ic --base-port 9400 --policy policy.yaml
  inference-cache dev --engines 0 --demo-fleet=false   # the cluster alone
  # then, in another shell:
  inference-cache status --addr 127.0.0.1:7401 --addr 127.0.0.1:7411 --addr 127.0.0.1:7421`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			if nodes < 1 {
				return fmt.Errorf("--nodes %d: must be at least 1", nodes)
			}
			switch {
			case engines < 0 || engines > 16:
				return fmt.Errorf("--engines %d: want 0 (no fleet) to 16", engines)
			case !(prefillTPS > 0), !(decodeTPS > 0):
				return fmt.Errorf("--prefill-tps %v, --decode-tps %v: must be positive", prefillTPS, decodeTPS)
			case kvBlocks < 1:
				return fmt.Errorf("--kv-blocks %d: need at least 1", kvBlocks)
			}
			addr := func(p int) string { return host + ":" + strconv.Itoa(p) }
			var ns []*devNode
			for i := 0; i < nodes; i++ {
				p, id := basePort+10*i, "node"+strconv.Itoa(i+1)
				ns = append(ns, &devNode{Node: proccluster.Node{ID: id, DataDir: filepath.Join(dir, id),
					GRPC: addr(p + 1), Raft: addr(p + 2), Gossip: addr(p + 3), HTTP: addr(p + 4)}})
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := checkDevLayout(dir, host, basePort, nodes); err != nil {
				return err
			}
			if err := checkDevPorts(ns); err != nil {
				return err
			}
			// Every exit reaches the supervisor; a process has at most
			// one exit outstanding (it restarts only after its exit was
			// received), so the buffer never blocks a process's reaper.
			exits := make(chan devExit, len(ns)+engines+2)
			byProc := map[*proccluster.Proc]*devNode{}
			procs := proccluster.New(proccluster.Options{Binary: exe, OwnProcessGroup: true,
				OnExit: func(p *proccluster.Proc, e proccluster.Exit) { exits <- devExit{n: byProc[p], exit: e} }})
			var fleet *devFleet
			modelsNote := ""
			if engines > 0 {
				fm, err := fleetModelsDir(dir, modelsDir)
				if err != nil {
					return err
				}
				modelsNote = "tokenizer and chat template in " + fm
				if fleet, err = newDevFleet(procs, byProc, dir, host, basePort, ns, engines, fm, prefillTPS, decodeTPS, kvBlocks); err != nil {
					return err
				}
				if err := fleet.checkPorts(); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			live := isTerminal(out)
			// The live view (top.go): on a terminal, supervisor lines and
			// the demo's status join its frame; elsewhere they print as
			// lines beside its periodic summary.
			var viewMu sync.Mutex
			view := &topView{}
			say := func(format string, args ...any) {
				line := fmt.Sprintf(format, args...)
				if live {
					viewMu.Lock()
					view.event(time.Now().Format("15:04:05 ") + line)
					viewMu.Unlock()
					return
				}
				fmt.Fprintln(out, line)
			}
			stopAll := func() {
				procs.StopAll(devStopTimeout)
				fmt.Fprintln(out, "cluster stopped")
			}
			for _, n := range ns {
				extra := []string{"--fast-timing"}
				if policyFile != "" {
					extra = append(extra, "--policy", policyFile)
				}
				if modelsDir != "" {
					extra = append(extra, "--models-dir", modelsDir)
				}
				n.proc = procs.Add(proccluster.Spec{Name: n.ID, Args: proccluster.ServerArgs(n.Node, nodes, nodeList(ns), extra...),
					LogPath: filepath.Join(dir, n.ID+".log")})
				byProc[n.proc] = n
			}
			for _, n := range ns {
				if err := startNode(n); err != nil {
					stopAll()
					return err
				}
			}
			fmt.Fprintf(out, "inference-cache dev: %d nodes, data under %s\n", nodes, dir)
			for _, n := range ns {
				fmt.Fprintf(out, "  %s  pid %d  grpc %s  metrics http://%s/metrics  log %s\n", n.ID, n.proc.Pid(), n.GRPC, n.HTTP, n.proc.LogPath())
			}
			members, closeMembers, err := devMembers(ns)
			if err != nil {
				stopAll()
				return err
			}
			defer closeMembers()
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
			case e := <-exits:
				// A node that cannot start (a port taken since the
				// check, a lock, damaged data) fails the whole start.
				waitStop()
				stopAll()
				return fmt.Errorf("%s %s while the cluster was starting; %s", e.n.ID, e.exit, deathReport(e.n, e.exit))
			case <-ctx.Done():
				stopAll()
				return nil
			}
			if leader != "" {
				fmt.Fprintf(out, "cluster ready: leader %s. Try:\n  %s status --addr %s\n", leader, selfCommand(), ns[0].GRPC)
				fmt.Fprintf(out, "Failover: kill -9 a node's pid; the others keep answering and dev restarts it after %v.\n", devRestartDelay)
			} else if ctx.Err() == nil {
				fmt.Fprintf(out, "no leader yet after 30s; see the node logs\n")
			}
			if fleet != nil && ctx.Err() == nil {
				if err := fleet.start(ctx); err != nil {
					stopAll()
					return fmt.Errorf("the fleet: %w", err)
				}
				fleet.banner(out, modelsNote)
				if err := fleet.writeCurlPair(out, dir, time.Now()); err != nil {
					stopAll()
					return err
				}
			}
			fmt.Fprintln(out, "Ctrl-C stops the cluster.")
			demoDone := make(chan struct{})
			demoCtx, demoStop := context.WithCancel(ctx)
			defer demoStop()
			if fleet != nil {
				setLine := func(l string, field *string) {
					viewMu.Lock()
					*field = l
					viewMu.Unlock()
				}
				pl := &proxyLine{proxyURL: fleet.proxyURL(), window: 10 * time.Second}
				for _, e := range fleet.cfg.Engines {
					pl.engines = append(pl.engines, e.URL())
				}
				go pl.run(demoCtx, time.Second, func(l string) { setLine(l, &view.proxy) })
				if demoFleet {
					fmt.Fprintln(out, "demo traffic: the built-in generator's chat sessions through the proxy, about 2 requests/s (--demo-fleet=false turns it off)")
					every := 10 * time.Second
					if live {
						every = 2 * time.Second
					}
					go func() {
						defer close(demoDone)
						runDevTraffic(demoCtx, fleet.proxyURL(), every, func(l string) {
							if live {
								setLine(l, &view.demo)
							} else {
								fmt.Fprintln(out, l)
							}
						})
					}()
				}
			}
			if fleet == nil || !demoFleet {
				close(demoDone)
			}
			topDone := make(chan struct{})
			topCtx, topStop := context.WithCancel(ctx)
			defer topStop()
			go func() {
				defer close(topDone)
				cf := &clientFlags{timeout: time.Second}
				p := &topPoller{cf: cf, conns: map[string]*client.Client{}}
				for _, n := range ns {
					p.addrs = append(p.addrs, n.GRPC)
				}
				defer p.close()
				r := topRun{every: time.Second, mode: topPlain, plainEvery: 10 * time.Second}
				if live {
					r.mode = topTerminal
				}
				_ = runTop(topCtx, out, p, view, &viewMu, r)
			}()
			superviseDev(ctx, exits, say)
			topStop()
			<-topDone
			demoStop()
			<-demoDone
			stopAll()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", ".dev-cluster", "data and log directory of the cluster")
	f.StringVar(&host, "host", "127.0.0.1", "loopback host to bind")
	f.IntVar(&basePort, "base-port", 7400, "node i listens on base+10i+1..4 (gRPC, Raft, gossip, HTTP)")
	f.IntVar(&nodes, "nodes", 3, "number of server processes")
	f.StringVar(&policyFile, "policy", "", "CachePolicy YAML file passed to every node")
	f.StringVar(&modelsDir, "models-dir", "", "tokenizer models directory passed to every node; the fleet's engines and proxy use it when it holds qwen3")
	markPaths(f, "dir", "policy", "models-dir")
	f.IntVar(&engines, "engines", devEngines, "sim engines of the fleet (0 = no fleet: no engines, subscriber or proxy)")
	f.Float64Var(&prefillTPS, "prefill-tps", devPrefillTPS, "each sim engine's prefill speed, uncached prompt tokens per second")
	f.Float64Var(&decodeTPS, "decode-tps", 40, "each sim engine's decode speed per request, output tokens per second")
	f.IntVar(&kvBlocks, "kv-blocks", devKVBlocks, "each sim engine's KV capacity in blocks of 16 tokens")
	f.BoolVar(&demoFleet, "demo-fleet", true, "also send demo traffic through the proxy: the built-in generator's multi-turn chat sessions, about 2 requests/s, with a live line of TTFT and cache hits")
	return cmd
}

// nodeList is the nodes' addresses, for the join flags.
func nodeList(ns []*devNode) []proccluster.Node {
	out := make([]proccluster.Node, len(ns))
	for i, n := range ns {
		out[i] = n.Node
	}
	return out
}

// devMembers dials every node for the leader wait (dev's servers run
// without TLS); closeAll releases the connections.
func devMembers(ns []*devNode) (ms []proccluster.Member, closeAll func(), err error) {
	var conns []*grpc.ClientConn
	closeAll = func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for _, n := range ns {
		cc, err := grpc.NewClient(n.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("dial %s at %s: %w", n.ID, n.GRPC, err)
		}
		conns = append(conns, cc)
		ms = append(ms, proccluster.Member{Name: n.ID, Conn: cc})
	}
	return ms, closeAll, nil
}

// isTerminal reports whether w is a terminal (the demo line is then
// rewritten in place).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// isTerminalReader reports whether r is a terminal (a confirmation can be
// asked on it).
func isTerminalReader(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
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
