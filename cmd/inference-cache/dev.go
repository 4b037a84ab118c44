package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/internal/devcluster"
)

func newDevCmd() *cobra.Command {
	var c devcluster.Config
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
		RunE: untilSignal(func(ctx context.Context, cmd *cobra.Command) error {
			return runDev(ctx, c, cmd.OutOrStdout())
		}),
	}
	registerDevFlags(cmd, &c)
	return cmd
}

// registerDevFlags adds dev's flags, bound to c.
func registerDevFlags(cmd *cobra.Command, c *devcluster.Config) {
	f := cmd.Flags()
	f.StringVar(&c.Dir, "dir", ".dev-cluster", "data and log directory of the cluster")
	f.StringVar(&c.Host, "host", "127.0.0.1", "loopback host to bind")
	f.IntVar(&c.BasePort, "base-port", 7400, "node i listens on base+10i+1..4 (gRPC, Raft, gossip, HTTP)")
	f.IntVar(&c.Nodes, "nodes", 3, "number of server processes")
	f.StringVar(&c.PolicyFile, "policy", "", "CachePolicy YAML file passed to every node")
	f.StringVar(&c.ModelsDir, "models-dir", "", "tokenizer models directory passed to every node; the fleet's engines and proxy use it when it holds qwen3")
	markPaths(f, "dir", "policy", "models-dir")
	f.IntVar(&c.Engines, "engines", devcluster.DefaultEngines, "sim engines of the fleet (0 = no fleet: no engines, subscriber or proxy)")
	f.Float64Var(&c.PrefillTPS, "prefill-tps", devcluster.DefaultPrefillTPS, "each sim engine's prefill speed, uncached prompt tokens per second")
	f.Float64Var(&c.DecodeTPS, "decode-tps", 40, "each sim engine's decode speed per request, output tokens per second")
	f.IntVar(&c.KVBlocks, "kv-blocks", devcluster.DefaultKVBlocks, "each sim engine's KV capacity in blocks of 16 tokens")
	f.BoolVar(&c.DemoFleet, "demo-fleet", true, "also send demo traffic through the proxy: the built-in generator's multi-turn chat sessions, about 2 requests/s, with a live line of TTFT and cache hits")
}

// runDev is dev after its flags: the live view dials each node as the
// client commands do, without TLS, and words a failed call as they do.
func runDev(ctx context.Context, c devcluster.Config, out io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	c.Binary, c.Live = exe, isTerminal(out)
	cf := &clientFlags{timeout: time.Second}
	c.Dial = func(a string) (*client.Client, error) { return cf.dialAddrs([]string{a}) }
	c.Explain = explainCallErr
	return devcluster.Run(ctx, c, out)
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
