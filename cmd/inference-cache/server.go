package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/inference-cache/inference-cache/api"
	"github.com/inference-cache/inference-cache/metrics"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
	"github.com/inference-cache/inference-cache/turns"
)

// Default ports of a single server; `dev` offsets them by 10 per node.
const (
	defaultGRPCAddr   = "127.0.0.1:7401"
	defaultRaftAddr   = "127.0.0.1:7402"
	defaultGossipAddr = "127.0.0.1:7403"
	defaultHTTPAddr   = "127.0.0.1:7404"
)

// serverOptions are the flags of `inference-cache server` (contract §12.2).
type serverOptions struct {
	nodeID, dataDir                          string
	grpcAddr, raftAddr, gossipAddr, httpAddr string
	advertiseAddr                            string
	raftAdvertise                            string
	join                                     []string
	bootstrapExpect                          int
	policyFile, modelsDir                    string
	tokenizerLoadTimeout                     time.Duration
	logFormat, logLevel, raftLogLevel        string
	pprof                                    bool
	fastTiming                               bool
	raftTiming                               raftTimingFlags
	deadServerCleanup                        time.Duration
	turnWait                                 time.Duration
	applyWorkers                             int
	shutdownTimeout                          time.Duration
	subscribeConfig                          string
	security                                 serverSecurityFlags
}

func newServerCmd() *cobra.Command {
	o := &serverOptions{}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run one inference-cache server node",
		Long: `Runs one server node: the Raft-replicated prefix index, the gRPC API
(InferenceCache, Cluster, health, reflection) on --grpc-addr and the HTTP side
port (/metrics, /healthz, /readyz, opt-in /debug/pprof) on --http-addr.

The same command line serves first boot, restart and scale-out: a node with
no Raft state bootstraps a new cluster once --bootstrap-expect servers
(found through --join gossip addresses) see each other; later nodes join the
existing cluster as voters.

Every flag can also be set through an environment variable named
INFERENCE_CACHE_<FLAG>, e.g. INFERENCE_CACHE_NODE_ID=n1 or
INFERENCE_CACHE_JOIN=10.0.0.2:7403,10.0.0.3:7403; the command line wins.

TLS, mutual TLS, Raft over TLS, gossip encryption and bearer tokens are off
by default (the local quick start); see docs/security.md for production.`,
		Example: `  # three servers on three hosts
  inference-cache server --node-id n1 --data-dir /var/lib/inference-cache \
    --grpc-addr 10.0.0.1:7401 --raft-addr 10.0.0.1:7402 --gossip-addr 10.0.0.1:7403 \
    --http-addr 10.0.0.1:7404 --join 10.0.0.2:7403 --join 10.0.0.3:7403 --bootstrap-expect 3

  # one node alone
  inference-cache server --node-id solo --data-dir ./data --bootstrap-expect 1

  # TLS everywhere, tokens for writes and admin (make certs writes test files)
  inference-cache server --node-id n1 ... --tls-cert node.pem --tls-key node-key.pem --tls-ca ca.pem \
    --raft-tls --gossip-key-file gossip.key --write-token-file write.token --admin-token-file admin.token`,
		Args: cobra.NoArgs,
		RunE: untilSignal(func(ctx context.Context, cmd *cobra.Command) error {
			return runServer(ctx, o, cmd)
		}),
	}
	host, _ := os.Hostname()
	f := cmd.Flags()
	f.StringVar(&o.nodeID, "node-id", host, "unique, stable id of this server; defaults to the host name")
	f.StringVar(&o.dataDir, "data-dir", "./data", "directory for the Raft log, stable store and snapshots; the same on every restart")
	f.StringVar(&o.grpcAddr, "grpc-addr", defaultGRPCAddr, "gRPC listen address host:port, also advertised to peers for write forwarding")
	f.StringVar(&o.raftAddr, "raft-addr", defaultRaftAddr, "Raft TCP address host:port (bound, and advertised unless --advertise-addr is set or it is 0.0.0.0)")
	f.StringVar(&o.gossipAddr, "gossip-addr", defaultGossipAddr, "memberlist gossip address host:port (TCP and UDP)")
	f.StringVar(&o.advertiseAddr, "advertise-addr", "", "host name or IP peers reach this node at (Raft, gossip, write forwarding), with the ports of --grpc-addr, --raft-addr and --gossip-addr; needed when those bind 0.0.0.0, as in containers (default: each bind address; for 0.0.0.0 this host's name)")
	f.StringVar(&o.raftAdvertise, "raft-advertise", "", "Raft address host:port peers dial, when it differs from --raft-addr and --advertise-addr's host with --raft-addr's port (a NAT or a proxy in between); default: derived as described there")
	f.StringVar(&o.httpAddr, "http-addr", defaultHTTPAddr, "HTTP side port for /metrics, /healthz, /readyz (and /debug/pprof with --pprof); empty = off")
	f.StringSliceVar(&o.join, "join", nil, "gossip address host:port of another server (repeatable, or comma-separated); any one reachable is enough; a host name may resolve later")
	f.IntVar(&o.bootstrapExpect, "bootstrap-expect", 3, "bootstrap a new cluster once this many servers without Raft state see each other; 0 = only join an existing cluster")
	f.StringVar(&o.policyFile, "policy", "", "CachePolicy YAML file (kind: CachePolicy, spec: …) committed at start when it differs from the replicated policy")
	f.StringVar(&o.modelsDir, "models-dir", "", "directory of <model_id>/tokenizer.json for prompt_text lookups; empty = prompt_text answers NO_HINT")
	f.DurationVar(&o.tokenizerLoadTimeout, "tokenizer-load-timeout", api.DefaultTokenizerLoadTimeout, "with --models-dir: /readyz and gRPC health wait this long at most for every model's tokenizer to load (a broken one is logged and skipped); 0 = do not wait, load each on its first prompt_text lookup")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: json or text")
	f.StringVar(&o.logLevel, "log-level", "info", "least log level: debug, info, warn or error")
	f.StringVar(&o.raftLogLevel, "raft-log-level", "warn", "least level of hashicorp/raft's own log lines passed on (debug, info, warn or error); info shows elections, configuration changes and snapshot installs")
	f.BoolVar(&o.pprof, "pprof", false, "serve /debug/pprof on the HTTP side port")
	f.BoolVar(&o.fastTiming, "fast-timing", false, "loopback Raft and gossip timings (elections in ~0.3 s; = --raft-timing fast); for dev clusters and tests, not for networks")
	o.raftTiming.register(f)
	f.DurationVar(&o.turnWait, "turn-wait", turns.DefaultWait, "bound on a lookup's wait for its turn among several gateways' picks (contract §5.13; take_turn); 0 = lookups take no turns")
	f.DurationVar(&o.deadServerCleanup, "dead-server-cleanup", 0, "remove servers gossip reports dead for this long (0 = never, else at least 10s); never below 3 voters")
	f.IntVar(&o.applyWorkers, "apply-workers", 0, "goroutines applying the blocks of a log entry (0 = one per CPU, at most 4; 1 = one); the replicated state does not depend on it")
	f.StringVar(&o.subscribeConfig, "subscribe-config", "", "run the KV-event subscriber inside this server with this engines YAML (contract §12.6; same format as subscribe --config); SIGHUP reloads it")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "bound on graceful shutdown after SIGINT/SIGTERM")
	o.security.register(f)
	markPaths(f, "data-dir", "policy", "models-dir", "subscribe-config")
	return cmd
}

func nodeInfo(n *raftnode.Node) metrics.NodeInfo {
	st := n.Status()
	sz := n.Index().Sizes()
	info := metrics.NodeInfo{
		Partitions: sz.Partitions, Blocks: sz.Blocks, Residencies: sz.Residencies, Replicas: sz.Replicas,
		State: st.State, Term: st.Term, AppliedIndex: st.AppliedIndex, CommitIndex: st.CommitIndex,
		LastLogIndex: st.LastLogIndex, LastLeaderContactMs: uint64(st.LastLeaderContact.Milliseconds()),
	}
	m, h := n.Metrics(), n.Health()
	info.LastSnapshotIndex, info.LastSnapshotBytes = n.LastSnapshot()
	info.SnapshotsByLogBytes, info.ExpireClamped = m.SnapshotsByLogBytes, m.ExpireClamped
	ps := n.PickerLoad().Stats()
	info.PickerReports, info.PickerReportsFromPeers = m.PickerReports, m.PickerReportsFromPeers
	info.PickerReportsForwarded, info.PickerReportsDropped = m.PickerReportsForwarded, m.PickerReportsDropped
	info.PickerReportsStored, info.PickerReportsIgnored, info.PickerReportsRefused = ps.Stored, ps.Ignored, ps.Refused
	info.PickerReportsExpired, info.PickerLoadEntries, info.PickerLoadPickers = ps.Expired, ps.Entries, ps.Pickers
	pv := n.Provisional().Stats()
	info.PicksPushes, info.PicksFromPeers, info.PicksForwarded, info.PicksDropped = m.PicksPushes, m.PicksFromPeers, m.PicksForwarded, m.PicksDropped
	info.PicksRefused, info.ProvisionalBlocks, info.ProvisionalHeld = pv.Refused, pv.Blocks, pv.Picks
	info.ProvisionalPicks = map[string]uint64{"added": pv.Added, "removed": pv.Removed, "confirmed": pv.Confirmed, "expired": pv.Expired, "ignored": pv.Ignored}
	if d, ok := n.ClockOffsetToLeader(); ok {
		info.ClockOffsetToLeader, info.ClockOffsetToLeaderKnown = d.Seconds(), true
	}
	info.ClockCorrection = n.ClockCorrection().Seconds()
	info.LogAppends, info.LogAppendEntries, info.LogAppendFailures = m.LogAppends, m.LogAppendEntries, h.AppendFailures
	info.LogAppendBytes, info.ApplyParallelBatches = m.LogAppendBytes, n.Index().ParallelBatches()
	info.Serving, info.StaleReason = h.Serving, n.ReadState().StaleReason
	info.WriteFormat = st.WriteFormat
	for _, mb := range st.Members {
		if mb.Suffrage == "Voter" {
			info.Voters++
		}
	}
	return info
}

// samePolicy compares the knobs of two policies (not the version).
func samePolicy(a, b policy.Policy) bool {
	a, b = a.Clone(), b.Clone()
	a.Version, b.Version = 0, 0
	return reflect.DeepEqual(a, b)
}

// applyPolicyFile commits the --policy file's knobs when the replicated
// policy differs (a restored or older state), retrying until a leader takes
// it or ctx ends. Every node started with the same file converges on one
// commit: a node that sees the knobs already in force does nothing.
func applyPolicyFile(ctx context.Context, n *raftnode.Node, want policy.Policy, file string, log *slog.Logger) {
	for attempt := 0; ; attempt++ {
		if samePolicy(n.Policy(), want) {
			return
		}
		if st := n.Status(); st.LeaderID != "" {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			got, err := n.SetPolicy(cctx, want)
			cancel()
			if err == nil {
				log.Info("policy file committed", "file", file, "version", got.Version)
				return
			}
			if attempt%10 == 0 {
				log.Warn("policy file not committed yet; retrying", "file", file, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// minDeadServerCleanup is the shortest --dead-server-cleanup grace.
const minDeadServerCleanup = 10 * time.Second

// validate refuses flag values that would start a server that cannot work
// (or only wait forever), naming the flag and the rule.
func (o *serverOptions) validate() error {
	if _, err := o.raftTiming.timing(o.fastTiming); err != nil {
		return err
	}
	switch {
	case o.nodeID == "":
		return errors.New("--node-id is required")
	case raftnode.NodeIDProblem(o.nodeID) != "":
		return fmt.Errorf("--node-id %q: %s", o.nodeID, raftnode.NodeIDProblem(o.nodeID))
	case o.bootstrapExpect < 0:
		return fmt.Errorf("--bootstrap-expect %d: must be 0 (join only) or the number of servers to bootstrap with", o.bootstrapExpect)
	case o.tokenizerLoadTimeout < 0:
		return fmt.Errorf("--tokenizer-load-timeout %v: must be 0 (do not wait) or positive", o.tokenizerLoadTimeout)
	case o.shutdownTimeout <= 0:
		return fmt.Errorf("--shutdown-timeout %v: must be positive", o.shutdownTimeout)
	case o.applyWorkers < 0:
		return fmt.Errorf("--apply-workers %d: must be 0 (one per CPU) or positive", o.applyWorkers)
	case o.turnWait < 0:
		return fmt.Errorf("--turn-wait %v: must be 0 (no turns) or positive", o.turnWait)
	case o.deadServerCleanup < 0:
		return fmt.Errorf("--dead-server-cleanup %v: must be 0 (never) or positive", o.deadServerCleanup)
	case o.deadServerCleanup > 0 && o.deadServerCleanup < minDeadServerCleanup:
		// Gossip declares a node dead within seconds: a shorter grace
		// would remove servers that are merely restarting.
		return fmt.Errorf("--dead-server-cleanup %v: must be 0 (never) or at least %v", o.deadServerCleanup, minDeadServerCleanup)
	}
	for i, a := range o.join {
		if err := checkJoinAddr(a); err != nil {
			return fmt.Errorf("--join item %d %q: %w", i+1, a, err)
		}
	}
	// Peers dial the Raft port as configured: port 0 would bind a random
	// port and advertise 0 (gRPC's is read back from its listener).
	if _, p, err := net.SplitHostPort(o.raftAddr); o.raftAddr != "" && (err != nil || p == "0") {
		return fmt.Errorf("--raft-addr %q: want host:port with a fixed port (peers dial it; 0 would advertise 0)", o.raftAddr)
	}
	if o.raftAdvertise != "" {
		if err := checkJoinAddr(o.raftAdvertise); err != nil {
			return fmt.Errorf("--raft-advertise %q: %w", o.raftAdvertise, err)
		}
	}
	return nil
}

// checkJoinAddr refuses a --join address the node could only retry
// forever: it must be host:port with a port of 1..65535 and a host that is
// an IP or could be a DNS name. The name is not resolved: in a StatefulSet
// the peers' names appear in DNS only once their pods run.
func checkJoinAddr(a string) error {
	if a == "" {
		return errors.New("empty; want host:port")
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want host:port (%v)", err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("port %q: must be a number between 1 and 65535", port)
	}
	if host == "" {
		return errors.New("no host; want host:port")
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if len(host) > 253 {
		return fmt.Errorf("host is %d bytes, over the DNS limit of 253", len(host))
	}
	if i := strings.IndexFunc(host, func(r rune) bool {
		return !(r == '-' || r == '.' || r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}); i >= 0 {
		r, _ := utf8.DecodeRuneInString(host[i:])
		return fmt.Errorf("host %q: character %q at byte %d is not allowed in a host name or IP address", host, r, i)
	}
	return nil
}
