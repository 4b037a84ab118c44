package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/bench"
	"github.com/inference-cache/inference-cache/client"
)

// devNode is one server of the dev cluster. cmd and done belong to the
// running process (nil while it is down); devProcs guards them.
type devNode struct {
	id                             string
	grpc, raft, gossip, http, data string
	args                           []string // the server command line, the same at every restart
	logPath                        string
	cmd                            *exec.Cmd
	done                           chan struct{} // closed when the process exited
	started                        time.Time     // when the process was last started
	restarts                       int           // supervised restarts so far
}

func newDevCmd() *cobra.Command {
	var dir, host, policyFile, modelsDir string
	var basePort, nodes int
	var demoFleet bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local 3-node cluster on loopback (real server processes)",
		Long: `Starts --nodes server processes of this same binary on loopback, with real
ports and data under --dir (node1, node2, …), bootstraps them into one Raft
cluster, and prints each node's gRPC address and metrics URL. Node i (from 0)
uses ports base+10i+1 (gRPC), +2 (Raft), +3 (gossip), +4 (HTTP). Logs go to
<dir>/nodeN.log. A node that dies (kill -9 its pid to watch failover) is
reported with how it ended and its last log line, and started again after 3 s
while the others keep serving. Busy ports refuse the start with a non-zero
exit. Ctrl-C stops every node cleanly; the data stays, so the next run
restarts the same cluster (delete --dir to start empty).`,
		Example: `  inference-cache dev
  inference-cache dev --dir /tmp/ic --base-port 9400 --policy policy.yaml
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
			addr := func(p int) string { return host + ":" + strconv.Itoa(p) }
			var ns []*devNode
			for i := 0; i < nodes; i++ {
				p := basePort + 10*i
				ns = append(ns, &devNode{id: "node" + strconv.Itoa(i+1), grpc: addr(p + 1), raft: addr(p + 2), gossip: addr(p + 3), http: addr(p + 4),
					data: filepath.Join(dir, "node"+strconv.Itoa(i+1)), logPath: filepath.Join(dir, "node"+strconv.Itoa(i+1)+".log")})
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
			procs := newDevProcs(exe, len(ns))
			for _, n := range ns {
				n.args = []string{"server", "--node-id", n.id, "--data-dir", n.data, "--grpc-addr", n.grpc, "--raft-addr", n.raft,
					"--gossip-addr", n.gossip, "--http-addr", n.http, "--bootstrap-expect", strconv.Itoa(nodes), "--fast-timing"}
				for _, o := range ns {
					if o != n {
						n.args = append(n.args, "--join", o.gossip)
					}
				}
				if policyFile != "" {
					n.args = append(n.args, "--policy", policyFile)
				}
				if modelsDir != "" {
					n.args = append(n.args, "--models-dir", modelsDir)
				}
				if err := procs.start(n); err != nil {
					procs.stop(ns, out)
					return err
				}
			}
			fmt.Fprintf(out, "inference-cache dev: %d nodes, data under %s\n", nodes, dir)
			for _, n := range ns {
				fmt.Fprintf(out, "  %s  pid %d  grpc %s  metrics http://%s/metrics  log %s\n", n.id, n.cmd.Process.Pid, n.grpc, n.http, n.logPath)
			}
			waitCtx, waitStop := context.WithCancel(ctx)
			defer waitStop()
			ready := make(chan string, 1)
			go func() { ready <- waitLeader(waitCtx, ns, 30*time.Second) }()
			var leader string
			select {
			case leader = <-ready:
			case e := <-procs.exits:
				// A node that cannot start (a port taken since the
				// check, a lock, damaged data) fails the whole start.
				procs.exited(e.n)
				waitStop()
				procs.stop(ns, out)
				return fmt.Errorf("%s %s while the cluster was starting: %s (log %s)", e.n.id, howExited(e.err), orNone(lastLogLine(e.n.logPath)), e.n.logPath)
			case <-ctx.Done():
				procs.stop(ns, out)
				return nil
			}
			if leader != "" {
				fmt.Fprintf(out, "cluster ready: leader %s. Try:\n  %s status --addr %s\n", leader, selfCommand(), ns[0].grpc)
				fmt.Fprintf(out, "Failover: kill -9 a node's pid; the others keep answering and dev restarts it after %v.\n", devRestartDelay)
			} else if ctx.Err() == nil {
				fmt.Fprintf(out, "no leader yet after 30s; see the node logs\n")
			}
			fmt.Fprintln(out, "Ctrl-C stops the cluster.")
			demoDone := make(chan struct{})
			demoCtx, demoStop := context.WithCancel(ctx)
			defer demoStop()
			if demoFleet && leader != "" {
				addrs := make([]string, len(ns))
				for i, n := range ns {
					addrs[i] = n.grpc
				}
				fmt.Fprintln(out, "demo fleet: 4 simulated engines (model \"demo\") publish vLLM KV events over ZMQ to a subscriber feeding the cluster;\n"+
					"  a gateway routes generated chat traffic with LookupRoute (--demo-fleet=false turns it off)")
				var demoOut io.Writer = out
				if live {
					demoOut = demoLineSink{mu: &viewMu, v: view}
				}
				go func() {
					defer close(demoDone)
					if err := bench.RunDemo(demoCtx, bench.DemoConfig{Addrs: addrs, Out: demoOut, Live: live}); err != nil && demoCtx.Err() == nil {
						say("demo fleet stopped: %v (the cluster keeps serving)", err)
					}
				}()
			} else {
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
					p.addrs = append(p.addrs, n.grpc)
				}
				defer p.close()
				r := topRun{every: time.Second, mode: topPlain, plainEvery: 10 * time.Second}
				if live {
					r.mode = topTerminal
				}
				_ = runTop(topCtx, out, p, view, &viewMu, r)
			}()
			superviseDev(ctx, procs, say)
			topStop()
			<-topDone
			demoStop()
			<-demoDone
			procs.stop(ns, out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", ".dev-cluster", "data and log directory of the cluster")
	f.StringVar(&host, "host", "127.0.0.1", "loopback host to bind")
	f.IntVar(&basePort, "base-port", 7400, "node i listens on base+10i+1..4 (gRPC, Raft, gossip, HTTP)")
	f.IntVar(&nodes, "nodes", 3, "number of server processes")
	f.StringVar(&policyFile, "policy", "", "CachePolicy YAML file passed to every node")
	f.StringVar(&modelsDir, "models-dir", "", "tokenizer models directory passed to every node")
	markPaths(f, "dir", "policy", "models-dir")
	f.BoolVar(&demoFleet, "demo-fleet", true, "also run a demo fleet: simulated engines publishing KV events and a gateway routing generated traffic, with a live line of hit rate and reason codes")
	return cmd
}

// waitLeader polls Status until some node reports a leader.
func waitLeader(ctx context.Context, ns []*devNode, limit time.Duration) string {
	addrs := make([]string, len(ns))
	for i, n := range ns {
		addrs[i] = n.grpc
	}
	c, err := client.New(client.Config{Addrs: addrs})
	if err != nil {
		return ""
	}
	defer c.Close()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var leader string
		_ = c.Do(ctx, func(ctx context.Context, _ string, _ pb.InferenceCacheClient, cl pb.ClusterClient) error {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			st, err := cl.Status(cctx, &pb.StatusRequest{})
			if err == nil {
				leader = st.LeaderId
			}
			return err
		})
		if leader != "" {
			return leader
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return ""
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
