package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/inference-cache/inference-cache/api"
	"github.com/inference-cache/inference-cache/metrics"
	"github.com/inference-cache/inference-cache/observe"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
	"github.com/inference-cache/inference-cache/tokenizer"
)

// serverInputs are what server reads before it binds anything: the
// policy to start with and the embedded subscriber's configuration.
type serverInputs struct {
	pol    policy.Policy
	subCfg *observe.Config // nil without --subscribe-config
}

// serverRun is one running server: its node, gRPC service, HTTP side port
// and where their serving errors go.
type serverRun struct {
	o        *serverOptions
	log      *slog.Logger
	node     *raftnode.Node
	srv      *api.Server
	hs       *http.Server // nil without --http-addr
	serveErr chan error
}

func runServer(ctx context.Context, o *serverOptions, cmd *cobra.Command) error {
	log, err := newLogger(cmd.ErrOrStderr(), o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	in, err := o.readInputs()
	if err != nil {
		return err
	}
	sec, err := o.security.build(log)
	if err != nil {
		return err
	}
	m := metrics.New()
	if err := m.BridgeRaft(); err != nil {
		log.Warn("raft metrics bridge unavailable", "err", err)
	}
	lis, httpLis, err := o.listen()
	if err != nil {
		return err
	}
	defer lis.Close()
	if httpLis != nil {
		defer httpLis.Close()
	}
	adv, err := advertiseAddrs(ctx, o.advertiseAddr, lis.Addr().String(), o.raftAddr, o.gossipAddr, net.DefaultResolver, advertiseResolveWait)
	if err != nil {
		return err
	}
	if o.raftAdvertise != "" {
		adv.raft = o.raftAdvertise // checked by validate
	}
	cfg, err := o.raftConfig(in.pol, adv, sec, m, log)
	if err != nil {
		return err
	}
	node, err := raftnode.New(cfg)
	if err != nil {
		return fmt.Errorf("start node %s: %w", o.nodeID, err)
	}
	r := &serverRun{o: o, log: log, node: node, serveErr: make(chan error, 2)}
	r.serve(lis, httpLis, adv, sec, m)
	log.Info("server started", "node", o.nodeID, "grpc", lis.Addr().String(), "raft", o.raftAddr,
		"gossip", o.gossipAddr, "advertise_grpc", adv.grpc, "advertise_raft", adv.raft, "advertise_gossip", adv.gossip, "http", o.httpAddr, "bootstrap_expect", o.bootstrapExpect, "join", o.join)
	log.Info("security", sec.summary...)
	if sec.gossipFile != nil {
		go watchGossipKeys(ctx, sec.gossipFile, node, log)
	}
	if o.policyFile != "" {
		go applyPolicyFile(ctx, node, in.pol, o.policyFile, log)
	}
	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	subDone := r.startSubscriber(ctx, subCtx, in.subCfg, m)
	runErr := r.wait(ctx)
	return r.shutdown(stopSub, subDone, runErr)
}

// readInputs validates the flags and reads the files they name: the
// policy, the models directory (checked only) and the subscriber's
// configuration.
func (o *serverOptions) readInputs() (serverInputs, error) {
	in := serverInputs{pol: policy.Default()}
	if err := o.validate(); err != nil {
		return in, err
	}
	var err error
	if o.policyFile != "" {
		if in.pol, err = policy.LoadFile(o.policyFile); err != nil {
			return in, err
		}
	}
	if o.modelsDir != "" {
		// A mistyped directory would silently turn every prompt_text
		// lookup into NO_HINT: refuse it at start.
		if fi, err := os.Stat(o.modelsDir); err != nil || !fi.IsDir() {
			return in, fmt.Errorf("--models-dir %s: not a readable directory (want <dir>/<model_id>/tokenizer.json)", o.modelsDir)
		}
	}
	if o.subscribeConfig != "" {
		if in.subCfg, err = observe.LoadConfig(o.subscribeConfig); err != nil {
			return in, fmt.Errorf("--subscribe-config: %w", err)
		}
	}
	return in, nil
}

// listen binds --grpc-addr and, when set, --http-addr (httpLis nil
// without it).
func (o *serverOptions) listen() (lis, httpLis net.Listener, err error) {
	if lis, err = net.Listen("tcp", o.grpcAddr); err != nil {
		return nil, nil, fmt.Errorf("--grpc-addr %s: %w", o.grpcAddr, err)
	}
	if o.httpAddr != "" {
		if httpLis, err = net.Listen("tcp", o.httpAddr); err != nil {
			lis.Close()
			return nil, nil, fmt.Errorf("--http-addr %s: %w", o.httpAddr, err)
		}
	}
	return lis, httpLis, nil
}

// raftLevel is --raft-log-level as raftnode reads it.
func (o *serverOptions) raftLevel() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(o.raftLogLevel)); err != nil {
		return l, fmt.Errorf("--raft-log-level %q: must be debug, info, warn or error", o.raftLogLevel)
	}
	if l == slog.LevelInfo {
		// raftnode reads the zero Level as its default (warn); one below
		// info passes exactly raft's info lines and up.
		l = slog.LevelInfo - 1
	}
	return l, nil
}

// raftConfig is the node's configuration from the flags, the policy to
// start with, the advertised addresses and the security material, its
// hooks feeding m.
func (o *serverOptions) raftConfig(pol policy.Policy, adv advertised, sec *serverSecurity, m *metrics.Metrics, log *slog.Logger) (raftnode.Config, error) {
	raftLevel, err := o.raftLevel()
	if err != nil {
		return raftnode.Config{}, err
	}
	clock, err := chaosClock(log)
	if err != nil {
		return raftnode.Config{}, err
	}
	cfg := raftnode.Config{
		NodeID: o.nodeID, DataDir: o.dataDir, RaftAddr: o.raftAddr, GossipAddr: o.gossipAddr,
		RaftAdvertise: adv.raft, GossipAdvertise: adv.gossip, GRPCAddr: adv.grpc, Join: o.join, BootstrapExpect: o.bootstrapExpect, Policy: pol,
		DeadServerCleanup: o.deadServerCleanup, ApplyWorkers: o.applyWorkers, Logger: log, Clock: clock, RaftLogLevel: raftLevel,
		RaftTLS: sec.raftTLS, GossipKeys: sec.gossipKeys, DialOptions: sec.dial,
		Hooks: raftnode.Hooks{
			OnCommit:   m.RaftCommit,
			OnApply:    m.FSMApply,
			OnSnapshot: m.SnapshotPersisted,
			OnRestore:  m.SnapshotRestored,
			OnLeader:   m.LeaderChanged,
		},
	}
	cfg.Timing, err = o.raftTiming.timing(o.fastTiming)
	return cfg, err
}

// serve starts the gRPC API on lis and the HTTP side port on httpLis (when
// set); their errors go to r.serveErr.
func (r *serverRun) serve(lis, httpLis net.Listener, adv advertised, sec *serverSecurity, m *metrics.Metrics) {
	o := r.o
	var tok api.Tokenizer
	if o.modelsDir != "" {
		tok = tokenizer.NewRegistry(o.modelsDir, tokenizer.RegistryOptions{})
	}
	tmp := filepath.Join(o.dataDir, "tmp")
	tokWait := o.tokenizerLoadTimeout
	if tokWait == 0 {
		tokWait = -1 // the flag's 0 is "do not wait"; api's is "default"
	}
	node := r.node
	r.srv = api.NewServer(api.ServerConfig{Node: node, GRPCAddr: adv.grpc, Tokenizer: tok, TokenizerLoadTimeout: tokWait,
		Metrics: m, Logger: r.log, TmpDir: tmp, Options: sec.grpcOptions, Auth: sec.auth, Now: node.Now, ClockTrusted: node.ClockTrusted,
		TurnWait: turnWaitFlag(r.o.turnWait)})
	m.RegisterNode(func() metrics.NodeInfo {
		info := nodeInfo(node)
		info.Serving = r.srv.Ready() // node_serving is what /readyz reports
		ts := r.srv.Service.TurnStats()
		info.TurnsTaken, info.TurnsSettled, info.TurnsLapsed, info.TurnsRefused = ts.Taken, ts.Settled, ts.Lapsed, ts.Refused
		info.TurnsOutstanding, info.TurnsWaiting = ts.Outstanding, ts.Waiting
		return info
	})
	go func() { r.serveErr <- r.srv.GRPC.Serve(lis) }()
	if httpLis != nil {
		r.hs = &http.Server{Handler: metrics.NewMux(m, r.srv.Ready, o.pprof), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := r.hs.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				r.serveErr <- fmt.Errorf("http: %w", err)
			}
		}()
	}
}

// startSubscriber runs the embedded subscriber until subCtx ends, SIGHUP
// reloading its configuration; without one, SIGHUP is logged and ignored
// until ctx ends. done closes once the subscriber stopped (at once
// without one).
func (r *serverRun) startSubscriber(ctx, subCtx context.Context, subCfg *observe.Config, m *metrics.Metrics) (done <-chan struct{}) {
	subDone := make(chan struct{})
	log := r.log
	if subCfg == nil {
		close(subDone)
		// SIGHUP's default action ends the process. Operators send it to
		// reload; without --subscribe-config there is nothing to reload
		// (TLS files reload on change by themselves), so say so and serve on.
		go ignoreHUP(ctx, log)
		return subDone
	}
	sub := observe.New(subCfg, serviceSink{r.srv.Service}, observe.Options{Metrics: observe.NewMetrics(m.Registry), Logger: log.With("component", "subscriber")})
	go reloadOnHUP(subCtx, sub, r.o.subscribeConfig, log)
	go func() {
		defer close(subDone)
		if err := sub.Run(subCtx); err != nil && subCtx.Err() == nil {
			log.Error("subscriber stopped", "err", err)
		}
	}()
	log.Info("subscriber started", "engines", len(subCfg.Engines), "config", r.o.subscribeConfig)
	return subDone
}

// ignoreHUP logs each SIGHUP as nothing to reload, until ctx ends.
func ignoreHUP(ctx context.Context, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			log.Info("SIGHUP: nothing to reload without --subscribe-config")
		}
	}
}

// wait serves until ctx ends (nil), serving fails, or the node's state
// can no longer be trusted (that error).
func (r *serverRun) wait(ctx context.Context) error {
	var runErr error
	select {
	case <-ctx.Done():
		r.log.Info("shutting down", "node", r.o.nodeID)
	case runErr = <-r.serveErr:
		r.log.Error("serve failed", "err", runErr)
	case <-r.node.Fatal():
		// A damaged log entry: serving on would answer from state that
		// stopped at the damage while the cluster moves on.
		runErr = r.node.FatalErr()
		r.log.Error("stopping: this node's state can no longer be trusted (damaged raft data, or a broken apply)", "err", runErr)
	}
	return runErr
}

// shutdown stops the server within --shutdown-timeout: the embedded
// subscriber first (it writes through this node), then the node (which
// hands leadership over), then the serving; it returns runErr.
func (r *serverRun) shutdown(stopSub func(), subDone <-chan struct{}, runErr error) error {
	sctx, cancel := context.WithTimeout(context.Background(), r.o.shutdownTimeout)
	defer cancel()
	stopSub()
	select {
	case <-subDone:
	case <-sctx.Done():
	}
	if err := r.node.Shutdown(); err != nil {
		r.log.Warn("node shutdown", "err", err)
	}
	r.srv.Shutdown(sctx)
	if r.hs != nil {
		_ = r.hs.Shutdown(sctx)
	}
	r.log.Info("stopped", "node", r.o.nodeID)
	return runErr
}

// turnWaitFlag is the TurnWait of api.ServerConfig and bench.Config for a
// --turn-wait flag, where 0 turns turns off (their 0 is the default).
func turnWaitFlag(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
