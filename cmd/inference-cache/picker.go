package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/inference-cache/inference-cache/admission"
	"github.com/inference-cache/inference-cache/epp"
)

type pickerOptions struct {
	gatewayFlags
	listen, healthListen, metricsListen string
	endpointsFile                       string
	endpoints                           []string
	poolName, poolNamespace, kubeconfig string
	replicaLabel                        string
	maxBodyBytes                        int
	maxInFlight                         int64
	streamIdle                          time.Duration
	maxStreams                          uint32
	drainTime, shutdownTimeout          time.Duration
	requestMode, responseMode           string
	logFormat, logLevel                 string
}

// pickerLong is the picker's help: its servers, the pick, the load sharing, the endpoints, metrics and drain.
const pickerLong = `Serves the Endpoint Picker Protocol of the Gateway API Inference Extension
(v1.6.0) to an Envoy-based gateway (Envoy Gateway, kgateway, Istio, GKE):

  --listen          :9002  envoy.service.ext_proc.v3.ExternalProcessor, gRPC health
                           and server reflection
  --health-listen   :9003  grpc.health.v1.Health: liveness, readiness,
                           envoy.service.ext_proc.v3.ExternalProcessor
  --metrics-listen  :9090  GET /metrics (Prometheus)

For each request (FULL_DUPLEX_STREAMED or BUFFERED body) it computes the token
ids the engine will prefill (--models-dir: the chat template rendered and
tokenized exactly as vLLM does), fingerprints them at --block-size, asks the
cluster (--addr) within --lookup-budget, and answers after the body's end with
the header x-gateway-destination-endpoint and the dynamic metadata envoy.lb /
x-gateway-destination-endpoint: ip:port of the pick, then its fallbacks, comma
separated. The gateway's subset hint (envoy.lb.subset_hint /
x-gateway-destination-endpoint-subset) restricts the candidates; an empty
subset or no eligible endpoint gets an ImmediateResponse 503, a model no
endpoint serves a 404 (as the proxy and vLLM answer), a body that does not fit
in --max-body-bytes-in-flight a 429 with Retry-After, all with an OpenAI error
body. The cluster
unreachable or slower than the budget never fails or delays a request beyond
it: the pick is then by load.

The response phase (the served endpoint, x-gateway-destination-endpoint-served,
its first token, its end) counts the request's load where it went. Every
picker replica is ready and serving: run as many as you like, each reading the
replicated index from any cluster node; there is no leader election.
With --addr and --strategy picker, each picker replica reports what it has in
flight per endpoint every --share-interval under --picker-id, and every lookup
carries the other replicas' load (contract §5.11); --share-load=false turns
it off.

Endpoints: --endpoint ADDRESS=REPLICA_ID[,MODEL] (repeatable) and/or
--endpoints FILE (YAML: endpoints: [{address, replica_id, model}]), or on
Kubernetes --pool-name: the pods the InferencePool selects, watched. The
replica id of an endpoint must be the replica_id the subscriber reports for
that engine: on Kubernetes the pod name, or the pod's label --replica-label.

Metrics: inference_extension_scheduler_attempts_total,
inference_extension_scheduler_e2e_duration_seconds, inference_pool_ready_pods
(as the reference EPP names them); inference_cache_picker_picks_total{reason},
_fail_open_picks_total, _no_key_picks_total, _unavailable_total{cause},
_served_elsewhere_total, _lookup_seconds, _streams_in_flight.

A connection carries at most --max-streams-per-connection streams at once, and
a stream with no message for --stream-idle-timeout is ended. On SIGTERM (or
SIGINT) readiness turns NOT_SERVING at once while streams are still served,
for --drain-time; then the servers stop, waiting up to --shutdown-timeout for
the streams in flight.`

// newPickerCmd is `inference-cache picker`: the Endpoint Picker of the
// Gateway API Inference Extension (package epp over package gateway).
func newPickerCmd() *cobra.Command {
	o := &pickerOptions{}
	cmd := &cobra.Command{
		Use:   "picker (--endpoint ADDRESS=REPLICA_ID[,MODEL] … | --endpoints FILE | --pool-name NAME) [--addr HOST:PORT …] [--models-dir DIR]",
		Short: "Run an Endpoint Picker (Envoy ext_proc) that sends each inference request to the endpoint holding its prefix",
		Long:  pickerLong,
		Example: `  # beside make run (its cluster on 7401/7411/7421, sim-1..3 on 7431/7441/7451):
  inference-cache picker --models-dir .dev-cluster/models \
      --addr 127.0.0.1:7401 --addr 127.0.0.1:7411 --addr 127.0.0.1:7421 \
      --endpoint 127.0.0.1:7431=sim-1 --endpoint 127.0.0.1:7441=sim-2 --endpoint 127.0.0.1:7451=sim-3
  # on Kubernetes (deploy/kubernetes/picker):
  inference-cache picker --pool-name vllm-qwen3 --pool-namespace default \
      --addr inference-cache-0.inference-cache:7401 --models-dir /models`,
		Args: cobra.NoArgs,
		RunE: untilSignal(func(ctx context.Context, cmd *cobra.Command) error {
			return runPicker(ctx, o, cmd.ErrOrStderr())
		}),
	}
	o.register(cmd)
	return cmd
}

// register adds the picker's flags, bound to o.
func (o *pickerOptions) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", fmt.Sprintf(":%d", epp.DefaultExtProcPort), "HOST:PORT of the ext_proc gRPC server (port 0 = any free port, logged at start)")
	f.StringVar(&o.healthListen, "health-listen", fmt.Sprintf(":%d", epp.DefaultHealthPort), "HOST:PORT of the gRPC health server; empty = none (health is also served on --listen)")
	f.StringVar(&o.metricsListen, "metrics-listen", fmt.Sprintf(":%d", epp.DefaultMetricsPort), "HOST:PORT of GET /metrics; empty = none")
	f.StringArrayVar(&o.endpoints, "endpoint", nil, "a static endpoint ADDRESS=REPLICA_ID[,MODEL], ADDRESS the ip:port the gateway routes to (repeatable)")
	f.StringVar(&o.endpointsFile, "endpoints", "", "YAML file of static endpoints (address, replica_id, optional model)")
	f.StringVar(&o.poolName, "pool-name", "", "the InferencePool (inference.networking.k8s.io/v1) whose selected pods are the endpoints, watched")
	f.StringVar(&o.poolNamespace, "pool-namespace", "", "the InferencePool's namespace (default: the pod's, else \"default\")")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty = in-cluster config")
	f.StringVar(&o.replicaLabel, "replica-label", epp.DefaultReplicaLabel, "pod label that overrides the replica id (default: the pod name)")
	f.IntVar(&o.maxBodyBytes, "max-body-bytes", epp.DefaultMaxBodyBytes, "bound on a request body; a larger one gets a 413")
	f.Int64Var(&o.maxInFlight, "max-body-bytes-in-flight", admission.DefaultMaxBytesInFlight, "bound on the request body bytes gathered at once; a body that does not fit gets a 429 with Retry-After")
	f.DurationVar(&o.streamIdle, "stream-idle-timeout", epp.DefaultStreamIdleTimeout, "bound on the wait for a stream's next message; past it the stream is ended")
	f.Uint32Var(&o.maxStreams, "max-streams-per-connection", epp.DefaultMaxStreamsPerConnection, "bound on the concurrent ext_proc streams of one connection")
	f.DurationVar(&o.drainTime, "drain-time", defaultDrainTime, "after SIGTERM: time readiness fails while streams are still served, before the servers stop")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "after the drain: bound on the wait for streams in flight to finish")
	f.StringVar(&o.requestMode, "request-body-mode", "FULL_DUPLEX_STREAMED", "request body mode assumed when the gateway sends no protocol_config: FULL_DUPLEX_STREAMED or BUFFERED")
	f.StringVar(&o.responseMode, "response-body-mode", "FULL_DUPLEX_STREAMED", "response body mode assumed when the gateway sends no protocol_config: FULL_DUPLEX_STREAMED or BUFFERED")
	o.registerGateway(cmd, f, "endpoint picker")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.logLevel, "log-level", "info", "least log level: debug, info, warn or error")
	markPaths(f, "models-dir", "endpoints", "kubeconfig")
}

// check validates the flags, each error naming its flag and the limit.
func (o *pickerOptions) check() error {
	for name, v := range map[string]string{"--listen": o.listen, "--health-listen": o.healthListen, "--metrics-listen": o.metricsListen} {
		if v == "" && name != "--listen" {
			continue
		}
		if _, _, err := net.SplitHostPort(v); err != nil {
			return fmt.Errorf("%s %q: want HOST:PORT (or :PORT)", name, v)
		}
	}
	if _, err := epp.ParseBodyMode(o.requestMode); err != nil {
		return fmt.Errorf("--request-body-mode: %w", err)
	}
	if _, err := epp.ParseBodyMode(o.responseMode); err != nil {
		return fmt.Errorf("--response-body-mode: %w", err)
	}
	static := len(o.endpoints) > 0 || o.endpointsFile != ""
	switch {
	case !static && o.poolName == "":
		return errors.New("--endpoint, --endpoints or --pool-name: give the endpoints to pick from")
	case static && o.poolName != "":
		return errors.New("--pool-name: not with --endpoint/--endpoints (one source of endpoints)")
	case o.maxBodyBytes < 1:
		return fmt.Errorf("--max-body-bytes %d: must be positive", o.maxBodyBytes)
	case o.maxInFlight < int64(o.maxBodyBytes):
		return fmt.Errorf("--max-body-bytes-in-flight %d: must be at least --max-body-bytes (%d)", o.maxInFlight, o.maxBodyBytes)
	case o.streamIdle <= 0:
		return fmt.Errorf("--stream-idle-timeout %v: must be positive", o.streamIdle)
	case o.maxStreams < 1:
		return fmt.Errorf("--max-streams-per-connection %d: must be positive", o.maxStreams)
	case o.drainTime < 0 || o.shutdownTimeout < 0:
		return fmt.Errorf("--drain-time %v, --shutdown-timeout %v: must not be negative", o.drainTime, o.shutdownTimeout)
	}
	if err := o.checkGateway(); err != nil {
		return err
	}
	if static {
		_, err := o.loadEndpoints()
		return err
	}
	return nil
}

// loadEndpoints reads --endpoint and --endpoints together.
func (o *pickerOptions) loadEndpoints() ([]epp.Endpoint, error) {
	return listFlag(o.endpoints, epp.ParseEndpointFlag, o.endpointsFile, "--endpoints", epp.LoadEndpoints,
		epp.CheckEndpoints, "--endpoint/--endpoints")
}

func runPicker(ctx context.Context, o *pickerOptions, errw io.Writer) error {
	log, err := newLogger(errw, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	reqMode, _ := epp.ParseBodyMode(o.requestMode)
	rspMode, _ := epp.ParseBodyMode(o.responseMode)

	gw, closeGateway, err := o.newGateway(ctx, log)
	if err != nil {
		return err
	}
	defer closeGateway()
	table, poolName, stopWatch, err := o.endpointTable(ctx, log)
	if err != nil {
		return err
	}
	defer stopWatch()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := epp.New(epp.Options{Gateway: gw, Endpoints: table, Metrics: epp.NewMetrics(reg, poolName, table),
		MaxBodyBytes: o.maxBodyBytes, RequestBodyMode: reqMode, ResponseBodyMode: rspMode, Logger: log,
		MaxBodyBytesInFlight: o.maxInFlight, StreamIdleTimeout: o.streamIdle, MaxStreamsPerConnection: o.maxStreams})
	if err != nil {
		return err
	}
	health := epp.NewHealth(table)
	ps := &pickerServers{served: make(chan error, 3)}
	defer ps.close()
	attrs, err := ps.start(o, srv, health, reg)
	if err != nil {
		return err
	}
	attrs = append(attrs, "endpoints", table.Len(), "pool", poolName, "cluster", strings.Join(o.addrs, ","), "strategy", gw.Strategy(),
		"lookup_budget", o.lookupBudget, "models_dir", o.modelsDir)
	log.Info("picker serving", attrs...)
	return ps.drain(ctx, o, health, log)
}

// endpointTable is the endpoints to pick from: the static ones
// (--endpoint, --endpoints; pool "static"), or the InferencePool's pods,
// watched until stop.
func (o *pickerOptions) endpointTable(ctx context.Context, log *slog.Logger) (table *epp.Table, poolName string, stop func(), err error) {
	table = &epp.Table{}
	if o.poolName != "" {
		stop, err := watchPool(ctx, o, table, log)
		if err != nil {
			return nil, "", nil, err
		}
		return table, o.poolName, stop, nil
	}
	eps, _ := o.loadEndpoints() // checked
	if err := table.Set(eps); err != nil {
		return nil, "", nil, err
	}
	return table, "static", func() {}, nil
}

// pickerServers are the picker's servers: ext_proc (g), health (hg) and
// metrics (hs), the latter two optional; served receives the error of
// any that stops serving.
type pickerServers struct {
	g, hg  *grpc.Server
	hs     *http.Server
	served chan error
}

// start binds and serves --listen, --health-listen and --metrics-listen
// (the last two when set); attrs name their addresses for the log.
func (ps *pickerServers) start(o *pickerOptions, srv *epp.Server, health *epp.Health, reg *prometheus.Registry) (attrs []any, err error) {
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", o.listen, err)
	}
	ps.g = grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(ps.g)
	health.Register(ps.g)
	reflection.Register(ps.g)
	go func() { ps.served <- fmt.Errorf("--listen %s: %w", o.listen, ps.g.Serve(lis)) }()
	attrs = []any{"ext_proc", lis.Addr().String()}
	if o.healthListen != "" {
		hl, err := net.Listen("tcp", o.healthListen)
		if err != nil {
			return nil, fmt.Errorf("--health-listen %s: %w", o.healthListen, err)
		}
		ps.hg = grpc.NewServer()
		health.Register(ps.hg)
		reflection.Register(ps.hg)
		go func() { ps.served <- fmt.Errorf("--health-listen %s: %w", o.healthListen, ps.hg.Serve(hl)) }()
		attrs = append(attrs, "health", hl.Addr().String())
	}
	if o.metricsListen != "" {
		ml, err := net.Listen("tcp", o.metricsListen)
		if err != nil {
			return nil, fmt.Errorf("--metrics-listen %s: %w", o.metricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ps.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { ps.served <- fmt.Errorf("--metrics-listen %s: %w", o.metricsListen, ps.hs.Serve(ml)) }()
		attrs = append(attrs, "metrics", "http://"+ml.Addr().String()+"/metrics")
	}
	return attrs, nil
}

// drain serves until ctx ends (or a server fails: its error), then turns
// readiness NOT_SERVING for --drain-time while streams are still served,
// then stops ext_proc gracefully within --shutdown-timeout.
func (ps *pickerServers) drain(ctx context.Context, o *pickerOptions, health *epp.Health, log *slog.Logger) error {
	select {
	case err := <-ps.served:
		return err
	case <-ctx.Done():
	}
	health.Drain()
	log.Info("picker draining", "drain_time", o.drainTime)
	select {
	case err := <-ps.served:
		return fmt.Errorf("serving while draining: %w", err)
	case <-time.After(o.drainTime):
	}
	log.Info("picker stopping", "shutdown_timeout", o.shutdownTimeout)
	stopped := make(chan struct{})
	go func() { ps.g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(o.shutdownTimeout):
	}
	return nil
}

// close stops every server started, at once.
func (ps *pickerServers) close() {
	if ps.hs != nil {
		ps.hs.Close()
	}
	if ps.hg != nil {
		ps.hg.Stop()
	}
	if ps.g != nil {
		ps.g.Stop()
	}
}

// watchPool starts the InferencePool watch (--pool-name) with the
// in-cluster config or --kubeconfig, and waits up to a minute for the
// informers' first list.
func watchPool(ctx context.Context, o *pickerOptions, t *epp.Table, log *slog.Logger) (func(), error) {
	var cfg *rest.Config
	var err error
	if o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("--pool-name: the Kubernetes API: %w (outside a cluster, give --kubeconfig)", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--pool-name: %w", err)
	}
	ns := o.poolNamespace
	if ns == "" {
		ns = "default"
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			ns = strings.TrimSpace(string(b))
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	w, err := epp.WatchPool(wctx, epp.PoolWatchConfig{Dynamic: dyn, Namespace: ns, Name: o.poolName,
		ReplicaLabel: o.replicaLabel, Table: t, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--pool-name %s/%s: %w", ns, o.poolName, err)
	}
	if !t.Synced() {
		log.Warn("InferencePool not found yet: not ready until it exists", "pool", ns+"/"+o.poolName)
	}
	return w.Stop, nil
}
