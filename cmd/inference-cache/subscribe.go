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
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/observe"
)

// subscribeLong is subscribe's help: what it feeds, how it resumes, security and reloads.
const subscribeLong = `Subscribes to the ZMQ KV-cache event streams of the engines listed in --config
(contract §12 "Subscriber configuration") — dialling each engine's PUB socket, or,
with a top-level listen, binding one socket the engines connect to — turns
them into content-fingerprinted block events and writes them to the cluster
with IngestStream, through any of
the --addr nodes (the next one is tried when a node fails). Engines with a
metrics_url are scraped for KV pressure and prefix-cache hit rate, reported
with ReportReplicaStats.

A restarted subscriber resumes each engine's stream from the position the
cluster recorded (contract §6.11): with the engine's replay_endpoint it keeps
the hints of everything the engine still holds; it clears a replica only on
a real gap (the engine restarted, or events were missed with no replay).

Against a secured cluster give the TLS flags and the write token
(--token-file or INFERENCE_CACHE_TOKEN; docs/security.md). The cluster is
asked once at start: a refused token or TLS handshake, or an --addr that is
not a node's gRPC port, stops the command with the cause; an unreachable
cluster is retried.

SIGHUP reloads --config: engines added are started, engines removed are
stopped and their replicas cleared from the index. An invalid file is logged
and the running configuration kept.`

// subscribeExample is subscribe's examples, with the two shapes of
// its configuration file.
const subscribeExample = `  inference-cache subscribe --config engines.yaml --addr 10.0.0.1:7401 --addr 10.0.0.2:7401
  # engines.yaml:
  #   engines:
  #     - endpoint: tcp://10.0.0.5:5557
  #       replay_endpoint: tcp://10.0.0.5:5558
  #       replica_id: vllm-0
  #       model_id: qwen3-8b
  #       tenant_id: team-a
  #       hash_scheme: vllm
  #       block_size: 16
  #       metrics_url: http://10.0.0.5:8000/metrics

  # Engines that connect to the subscriber instead (llm-d's topology; vLLM
  # connects when its kv-events endpoint has no "*" host): bind one socket
  # and match each engine by its topic, exactly or by pod (the pod group of
  # topic_pattern, default kv@<pod>@<model>). Entries with an endpoint are
  # still dialled. See docs/examples/subscriber-listen.yaml.
  #   listen: tcp://0.0.0.0:5557
  #   engines:
  #     - pod: vllm-a-0                      # any topic kv@vllm-a-0@<model>
  #       replay_endpoint: tcp://10.0.0.5:5558
  #       replica_id: vllm-a-0
  #       model_id: qwen3-8b
  #       hash_scheme: vllm
  #     - topic: kv@vllm-b-0@Qwen/Qwen3-8B   # an exact topic
  #       replica_id: vllm-b-0
  #       model_id: qwen3-8b
  #       hash_scheme: vllm`

// newSubscribeCmd is `inference-cache subscribe` (contract §12.6): the
// KV-event subscriber, feeding any cluster node.
func newSubscribeCmd() *cobra.Command {
	o := &subscribeOptions{}
	cmd := &cobra.Command{
		Use:     "subscribe",
		Short:   "Subscribe to vLLM/SGLang KV-cache events and feed the cluster",
		Long:    subscribeLong,
		Example: subscribeExample,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runSubscribe(cmd, o) },
	}
	o.register(cmd)
	return cmd
}

// subscribeOptions are the flags of `inference-cache subscribe`.
type subscribeOptions struct {
	configFile, metricsAddr, logFormat, logLevel string
	addrs                                        []string
	security                                     clientSecurityFlags
}

// register adds subscribe's flags, bound to o.
func (o *subscribeOptions) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.configFile, "config", "", "subscriber configuration YAML (contract §12.6)")
	f.StringArrayVar(&o.addrs, "addr", nil, "cluster node gRPC address host:port (repeat for several nodes)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "HTTP address serving the subscriber's /metrics; empty = off")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: json or text")
	f.StringVar(&o.logLevel, "log-level", "info", "least log level: debug, info, warn or error")
	o.security.register(cmd)
	markPaths(f, "config")
}

// runSubscribe is subscribe after its flags: the configuration read, the
// cluster asked once (preflight), then the subscriber run until SIGINT
// or SIGTERM, its /metrics served on --metrics-addr.
func runSubscribe(cmd *cobra.Command, o *subscribeOptions) error {
	log, err := newLogger(cmd.ErrOrStderr(), o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	if o.configFile == "" {
		return errors.New("--config is required")
	}
	cfg, err := observe.LoadConfig(o.configFile)
	if err != nil {
		return err
	}
	ccfg := client.Config{Addrs: o.addrs}
	if err := o.security.apply(&ccfg); err != nil {
		return err
	}
	sink, err := observe.NewGRPCSinkConfig(ccfg)
	if err != nil {
		return err
	}
	defer sink.Close()
	if err := preflight(cmd.Context(), sink, cfg, o.addrs, &o.security, log); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := observe.NewMetrics(reg)
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.metricsAddr != "" {
		stopMetrics, err := serveSubscriberMetrics(reg, o.metricsAddr, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	sub := observe.New(cfg, sink, observe.Options{Metrics: m, Logger: log})
	go reloadOnHUP(ctx, sub, o.configFile, log)
	log.Info("subscriber started", "engines", len(cfg.Engines), "cluster", o.addrs)
	return sub.Run(ctx)
}

// serveSubscriberMetrics serves reg's /metrics on addr until stop.
func serveSubscriberMetrics(reg *prometheus.Registry, addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("subscriber metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() { srv.Close() }, nil
}

// preflightTimeout bounds subscribe's first call to the cluster.
const preflightTimeout = 10 * time.Second

// preflight reads the engines' stream positions once before the
// subscriber starts: a cluster that refuses the token or the TLS
// handshake, or an --addr that is not a node's gRPC port, stops the
// command with the cause in words (callCause) instead of retrying
// forever. A cluster that is only unreachable (down, or still starting)
// is logged, and the subscriber starts and retries.
func preflight(ctx context.Context, sink *observe.GRPCSink, cfg *observe.Config, addrs []string, sec *clientSecurityFlags, log *slog.Logger) error {
	ids := make([]string, 0, len(cfg.Engines))
	for _, e := range cfg.Engines {
		ids = append(ids, e.ReplicaForRank(0))
	}
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	_, err := sink.StreamPositions(ctx, ids)
	if err == nil {
		return nil
	}
	if cause, fatal := callCause(err); fatal {
		return fmt.Errorf("the cluster at %s refused the subscriber: %s (%v)", strings.Join(addrs, ", "), cause, err)
	}
	if k := failure(err.Error()); k == "notgrpc" || k == "reset" {
		for _, a := range addrs {
			if cause := sec.probeCause(ctx, a); cause != "" {
				return fmt.Errorf("the cluster refused the subscriber: %s: %s", a, cause)
			}
		}
	}
	log.Warn("cluster not reachable yet; the subscriber starts and retries", "err", err)
	return nil
}

// reloadOnHUP reloads the subscriber configuration file on every SIGHUP
// until ctx ends: engines added start, engines removed stop and have their
// replicas cleared. An invalid file is logged and the running
// configuration kept.
func reloadOnHUP(ctx context.Context, sub *observe.Subscriber, configFile string, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			c, err := observe.LoadConfig(configFile)
			if err != nil {
				log.Error("config reload failed; keeping the running configuration", "err", err)
				continue
			}
			log.Info("config reloaded", "engines", len(c.Engines))
			sub.Reload(c)
		}
	}
}

// serviceSink is the observe.Sink of a subscriber embedded in the server
// (`server --subscribe-config`): it calls this node's own InferenceCache
// service in process, so writes take the same validation, forwarding and
// retry path as a remote subscriber's without a network hop.
type serviceSink struct{ s *api.Service }

func (k serviceSink) Ingest(ctx context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error) {
	return k.s.Ingest(ctx, req)
}

func (k serviceSink) ReportStats(ctx context.Context, req *pb.ReportReplicaStatsRequest) (*pb.ReportReplicaStatsResponse, error) {
	return k.s.ReportReplicaStats(ctx, req)
}

// StreamPositions implements observe.PositionStore on the node's own
// service.
func (k serviceSink) StreamPositions(ctx context.Context, replicaIDs []string) (map[string]observe.Position, error) {
	resp, err := k.s.GetStreamPositions(ctx, &pb.GetStreamPositionsRequest{ReplicaIds: replicaIDs})
	if err != nil {
		return nil, err
	}
	out := make(map[string]observe.Position, len(resp.GetPositions()))
	for _, p := range resp.GetPositions() {
		out[p.GetReplicaId()] = observe.Position{Seq: p.GetSeq(), Hash: p.GetBatchHash()}
	}
	return out, nil
}

// RecordStreamPositions implements observe.PositionStore on the node's
// own service.
func (k serviceSink) RecordStreamPositions(ctx context.Context, req *pb.RecordStreamPositionsRequest) error {
	_, err := k.s.RecordStreamPositions(ctx, req)
	return err
}
