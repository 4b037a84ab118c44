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
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/inference-cache/inference-cache/connlimit"
	"github.com/inference-cache/inference-cache/proxy"
)

type proxyOptions struct {
	gatewayFlags
	listen, backendsFile           string
	backends                       []string
	requestTimeout                 time.Duration
	connectTimeout, healthInterval time.Duration
	healthTimeout                  time.Duration
	maxBodyBytes, maxInFlight      int64
	bodyTimeout, bodyIdleTimeout   time.Duration
	firstByteTimeout, streamIdle   time.Duration
	drainTime, shutdownTimeout     time.Duration
	maxConnections                 int
	logFormat, logLevel            string
}

// proxyLong is the proxy's help: its endpoints, routing, backends, bounds, drain and metrics.
const proxyLong = `Serves the OpenAI API in front of vLLM (or SGLang, or sim-engine) replicas and
sends each request to the replica that already holds its prompt's prefix in its
KV cache, per the cluster's prefix index:

  POST /v1/completions, POST /v1/chat/completions   forwarded (streams relayed
                                                    unbuffered, event by event)
  GET  /v1/models                                   the union of the backends'
  GET  /health                                      200 while a backend is healthy
  GET  /metrics                                     Prometheus metrics (below)

For each request the proxy computes the token ids the engine will prefill
(the model's chat template from --models-dir rendered and tokenized exactly as
vLLM does; <dir>/<model>/tokenizer.json, tokenizer_config.json or
chat_template.jinja), fingerprints them at --block-size, asks the cluster
(--addr) with a deadline of --lookup-budget, and picks with --strategy among
the healthy backends serving the request's model. The cluster unreachable or
slower than the budget never fails or delays a request beyond it: the pick is
then by load (then round robin). Requests without a key (image or audio
parts, no tokenizer for the model) are picked by load too. --strategy dynamo,
llm-d or sglang runs a peer's router with its defaults instead (the same
formulas as bench; docs/proxy.md, "Peer strategies").

Every response carries x-inference-cache-replica, x-inference-cache-reason
(PREFIX_MATCH, AFFINITY_HINT, TENANT_HOT; LOAD when picked without a usable
hint; ROUND_ROBIN, LEAST_LOADED, DYNAMO, LLM_D, SGLANG for those strategies;
NONE when the proxy answered itself) and x-inference-cache-matched-tokens.

With --strategy picker and --addr, the proxy reports what it has in flight per
backend to the cluster every --share-interval (requests before their first
token, their uncached prompt tokens, requests before done), named
--picker-id, and every lookup then carries the other proxies' load
(contract §5.11). The reports are soft state: a proxy that stops is forgotten
within 2 intervals; a failing report never affects a request. After a retry,
x-inference-cache-retried-from names the replica that refused.

Backends come from --backend REPLICA_ID=URL[,ROLE] (repeatable; the models are
read from the backend's /v1/models) and/or --backends FILE, reloaded on SIGHUP:
  backends:
    - replica_id: sim-1                # the subscriber's replica_id
      url: http://127.0.0.1:7431
      model: qwen3                     # optional: else its /v1/models
      role: prefill                    # optional: prefill, decode or both (default)

LoRA adapters: a model a backend's /v1/models lists with a parent (vLLM's
adapter card) is keyed on the parent's tokenizer and template and looked up
under the adapter's name, among the backends listing it; a backend with the
adapter loaded (its vllm:lora_requests_info, or this proxy's requests in
flight) is preferred, one at max_lora with other adapters passed over.

Disaggregated prefill/decode, as vLLM's NixlConnector proxy: with a prefill
backend for the model, a request is first sent to a prefill backend (picked
by prefix and load) with kv_transfer_params {"do_remote_decode": true},
max_tokens 1, not streamed; then, with the answer's kv_transfer_params, to a
decode backend (picked by load and KV room), whose answer goes to the client.
No healthy prefill backend, or a failed prefill: the decode backend serves the
whole request. x-inference-cache-path says disaggregated or aggregated. A
client's own kv_transfer_params is refused (400).
Each backend is checked with GET /health every --health-interval; one that
fails leaves the candidates until it passes again, and one that refuses a
connection leaves at once. A request whose backend refuses the connection or
answers 503 before its body is sent once to the next-best backend.

Client cancellation reaches the backend (its connection is closed). Bad input
(malformed JSON, no model, a field vLLM refuses) gets 400, an unknown model 404,
a body over --max-body-bytes 413, all as OpenAI error JSON, and nothing reaches
a backend. No healthy backend for the model: 503.

Every phase has a bound. A body must arrive within --body-timeout, with no gap
over --body-idle-timeout (else 408). Bodies held at once (read, being keyed, or
kept for a retry until the answer starts) are bounded by
--max-body-bytes-in-flight, their bytes counted as they arrive (not as a
Content-Length declares them): past it 429 with Retry-After. A stream whose
backend sends no response headers within --first-byte-timeout goes once to the
next-best backend (504 if that one is silent too); an answer with no bytes for
--stream-idle-timeout is cut. An answer cut after its headers (the backend
died, a timeout) ends as vLLM ends a failed stream, an error event
data: {"error": {...}} then data: [DONE], and the response is then aborted, so
that HTTP libraries report it; a failure before any byte is a 502 or 504 as
OpenAI error JSON. At start the open-file soft limit is raised to the hard
limit; client connections are bounded by --max-connections (lowered to what
the open-file limit allows: two files per proxied request), and at the bound
the connection that has waited longest for its client (idle, or stalled in
its body for over 250 ms first, else idle for over 1 s) is closed to make room.

On SIGTERM (or SIGINT) the proxy drains: GET /health answers 503 at once, so
that a load balancer or Kubernetes' readiness probe stops sending, while every
request in flight or arriving is still served, for --drain-time; then the
listener closes and the requests in flight get up to --shutdown-timeout to
finish.

Metrics (prefix inference_cache_proxy_): requests_total{endpoint,code},
picks_total{reason}, fail_open_picks_total, no_key_picks_total,
added_latency_seconds (the proxy's own time before forwarding), lookup_seconds,
time_to_first_token_seconds, upstream_errors_total{replica,kind},
retries_total{cause}, prompt_tokens_total, matched_tokens_total (their ratio is
the routed hit rate), requests_in_flight, backend_up{replica},
disagg_requests_total{path,cause}, broken_responses_total{cause},
shed_requests_total, body_timeouts_total.`

// newProxyCmd is `inference-cache proxy`: the OpenAI-compatible routing
// proxy (package proxy over package gateway).
func newProxyCmd() *cobra.Command {
	o := &proxyOptions{}
	cmd := &cobra.Command{
		Use:   "proxy --backend REPLICA_ID=URL … [--addr HOST:PORT …] [--models-dir DIR]",
		Short: "Run an OpenAI-compatible reverse proxy that routes each request to the replica holding its prefix",
		Long:  proxyLong,
		Example: `  # beside make run (its cluster on 7401/7411/7421, sim-1..3 on 7431/7441/7451):
  inference-cache proxy --listen 127.0.0.1:8080 --models-dir .dev-cluster/models \
      --addr 127.0.0.1:7401 --addr 127.0.0.1:7411 --addr 127.0.0.1:7421 \
      --backend sim-1=http://127.0.0.1:7431 --backend sim-2=http://127.0.0.1:7441 --backend sim-3=http://127.0.0.1:7451
  # a chat request through make run's proxy (the one above listens on 8080):
  curl -si localhost:7461/v1/chat/completions \
      -d '{"model": "qwen3", "messages": [{"role": "user", "content": "hi"}]}' | grep -i x-inference-cache
  kill -HUP <pid>   # reload --backends`,
		Args: cobra.NoArgs,
		RunE: untilSignal(func(ctx context.Context, cmd *cobra.Command) error {
			return runProxy(ctx, o, cmd.ErrOrStderr())
		}),
	}
	o.register(cmd)
	return cmd
}

// register adds the proxy's flags, bound to o.
func (o *proxyOptions) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "HOST:PORT of the OpenAI-compatible HTTP API (port 0 = any free port, logged at start)")
	f.StringArrayVar(&o.backends, "backend", nil, "a backend REPLICA_ID=URL[,ROLE], REPLICA_ID as the subscriber names the engine, ROLE prefill, decode or both (repeatable)")
	f.StringVar(&o.backendsFile, "backends", "", "YAML file of backends (replica_id, url, optional model), reloaded on SIGHUP")
	o.registerGateway(cmd, f, "proxy")
	f.Int64Var(&o.maxBodyBytes, "max-body-bytes", proxy.DefaultMaxBodyBytes, "bound on a request body; a larger one gets a 413")
	f.DurationVar(&o.requestTimeout, "request-timeout", 10*time.Minute, "bound on a whole request, streams included (504 without an answer by then); 0 = none")
	f.Int64Var(&o.maxInFlight, "max-body-bytes-in-flight", proxy.DefaultMaxBodyBytesInFlight, "bound on the request body bytes held at once; a body that does not fit gets a 429 with Retry-After")
	f.DurationVar(&o.bodyTimeout, "body-timeout", proxy.DefaultBodyTimeout, "bound on reading a request body, first byte to last (408 past it)")
	f.DurationVar(&o.bodyIdleTimeout, "body-idle-timeout", proxy.DefaultBodyIdleTimeout, "bound on a gap between two reads of a request body (408 past it)")
	f.DurationVar(&o.firstByteTimeout, "first-byte-timeout", defaultFirstByteTimeout, "bound on a stream's wait for its response headers; past it the request goes once to the next-best backend; 0 = none")
	f.DurationVar(&o.streamIdle, "stream-idle-timeout", defaultStreamIdleTimeout, "bound on a gap in an answer's bytes; past it the answer is cut with an error event; 0 = none")
	f.IntVar(&o.maxConnections, "max-connections", defaultMaxConnections, "bound on client connections (lowered to what the open-file limit allows)")
	f.DurationVar(&o.drainTime, "drain-time", defaultDrainTime, "after SIGTERM: time /health fails while requests are still served, before the listener closes")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "after the drain: bound on the wait for requests in flight to finish")
	f.DurationVar(&o.connectTimeout, "connect-timeout", proxy.DefaultConnectTimeout, "bound on connecting to a backend; past it the request goes to the next-best")
	f.DurationVar(&o.healthInterval, "health-interval", proxy.DefaultHealthInterval, "time between two health checks (GET /health) of a backend")
	f.DurationVar(&o.healthTimeout, "health-timeout", proxy.DefaultHealthTimeout, "bound on one health check")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.logLevel, "log-level", "info", "least log level: debug, info, warn or error")
	markPaths(f, "models-dir", "backends")
}

// check validates the flags, each error naming its flag and the limit.
func (o *proxyOptions) check() error {
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT", o.listen)
	}
	switch {
	case len(o.backends) == 0 && o.backendsFile == "":
		return errors.New("--backend or --backends: give at least one backend (REPLICA_ID=URL)")
	case o.maxBodyBytes < 1:
		return fmt.Errorf("--max-body-bytes %d: must be positive", o.maxBodyBytes)
	case o.requestTimeout < 0:
		return fmt.Errorf("--request-timeout %v: must not be negative", o.requestTimeout)
	case o.maxInFlight < o.maxBodyBytes:
		return fmt.Errorf("--max-body-bytes-in-flight %d: must be at least --max-body-bytes (%d)", o.maxInFlight, o.maxBodyBytes)
	case o.bodyTimeout <= 0 || o.bodyIdleTimeout <= 0:
		return fmt.Errorf("--body-timeout %v, --body-idle-timeout %v: must be positive", o.bodyTimeout, o.bodyIdleTimeout)
	case o.firstByteTimeout < 0 || o.streamIdle < 0:
		return fmt.Errorf("--first-byte-timeout %v, --stream-idle-timeout %v: must not be negative", o.firstByteTimeout, o.streamIdle)
	case o.maxConnections < 1:
		return fmt.Errorf("--max-connections %d: must be positive", o.maxConnections)
	case o.drainTime < 0 || o.shutdownTimeout < 0:
		return fmt.Errorf("--drain-time %v, --shutdown-timeout %v: must not be negative", o.drainTime, o.shutdownTimeout)
	case o.connectTimeout <= 0:
		return fmt.Errorf("--connect-timeout %v: must be positive", o.connectTimeout)
	case o.healthInterval <= 0:
		return fmt.Errorf("--health-interval %v: must be positive", o.healthInterval)
	case o.healthTimeout <= 0:
		return fmt.Errorf("--health-timeout %v: must be positive", o.healthTimeout)
	}
	if err := o.checkGateway(); err != nil {
		return err
	}
	_, err := o.loadBackends()
	return err
}

// loadBackends reads --backend and --backends together.
func (o *proxyOptions) loadBackends() ([]proxy.Backend, error) {
	return listFlag(o.backends, proxy.ParseBackendFlag, o.backendsFile, "--backends", proxy.LoadBackends,
		proxy.CheckBackends, "--backend/--backends")
}

func runProxy(ctx context.Context, o *proxyOptions, errw io.Writer) error {
	log, err := newLogger(errw, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	bs, _ := o.loadBackends() // checked
	gw, closeGateway, err := o.newGateway(ctx, log)
	if err != nil {
		return err
	}
	defer closeGateway()

	pool := proxy.NewPool(proxy.PoolOptions{HealthInterval: o.healthInterval, HealthTimeout: o.healthTimeout, Logger: log})
	defer pool.Close()
	if err := pool.Set(bs); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p, err := proxy.New(proxy.Options{Gateway: gw, Pool: pool, Metrics: proxy.NewMetrics(reg, pool),
		MetricsHandler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), MaxBodyBytes: o.maxBodyBytes,
		MaxBodyBytesInFlight: o.maxInFlight, BodyTimeout: o.bodyTimeout, BodyIdleTimeout: o.bodyIdleTimeout,
		FirstByteTimeout: o.firstByteTimeout, StreamIdleTimeout: o.streamIdle,
		RequestTimeout: o.requestTimeout, Transport: proxy.NewTransport(o.connectTimeout), Logger: log})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.listen, err)
	}
	nofile := raiseNoFile()
	limiter := connlimit.New(connectionBound(o.maxConnections, nofile))
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ConnState: limiter.ConnState, ConnContext: limiter.ConnContext}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP) // before the start line: a SIGHUP after it never ends the process
	defer signal.Stop(hup)
	go reloadBackendsOnHUP(ctx, hup, o, pool, log)
	log.Info("proxy serving", "http", "http://"+lis.Addr().String(), "backends", len(bs), "cluster", strings.Join(o.addrs, ","),
		"strategy", gw.Strategy(), "lookup_budget", o.lookupBudget, "models_dir", o.modelsDir, "picker_id", gw.PickerID(),
		"max_connections", limiter.Max(), "open_files", nofile)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(limiter.Listener(lis)) }()
	select {
	case err := <-served:
		return fmt.Errorf("--listen %s: %w", o.listen, err)
	case <-ctx.Done():
	}
	return drainAndStop(srv, p, served, o.drainTime, o.shutdownTimeout, log)
}

// Defaults of the proxy's bounds that the proxy package leaves to its
// caller.
const (
	// defaultFirstByteTimeout: vLLM sends a stream's headers before its
	// first token, right after tokenizing the prompt, so a backend silent
	// this long is hung, not busy.
	defaultFirstByteTimeout = 30 * time.Second
	// defaultStreamIdleTimeout: longer than a queued request's wait for
	// its first token on a saturated engine.
	defaultStreamIdleTimeout = 5 * time.Minute
	// defaultMaxConnections bounds client connections before the
	// open-file limit does.
	defaultMaxConnections = 16384
	// defaultDrainTime: Kubernetes' readiness probes run every 10 s by
	// default, so 15 s covers one failed probe and its propagation.
	defaultDrainTime = 15 * time.Second
	// defaultShutdownTimeout leaves streams time to end within
	// Kubernetes' default grace period of 30 s after a 15 s drain.
	defaultShutdownTimeout = 10 * time.Second
)

// drainAndStop drains the proxy for drain (GET /health fails while every
// request is still served, each answer closing its connection so that
// clients reconnect through their load balancer), then closes the
// listener and waits up to shutdown for the requests in flight.
func drainAndStop(srv *http.Server, p *proxy.Proxy, served <-chan error, drain, shutdown time.Duration, log *slog.Logger) error {
	p.Drain()
	log.Info("proxy draining", "drain_time", drain)
	select {
	case err := <-served:
		return fmt.Errorf("serving while draining: %w", err)
	case <-time.After(drain):
	}
	log.Info("proxy stopping", "shutdown_timeout", shutdown)
	shut, cancel := context.WithTimeout(context.Background(), shutdown)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		log.Warn("requests still in flight at the shutdown timeout", "err", err)
	}
	return nil
}

// reloadBackendsOnHUP rereads --backend and --backends on every SIGHUP
// until ctx ends; an invalid list is logged and the running one kept.
func reloadBackendsOnHUP(ctx context.Context, hup <-chan os.Signal, o *proxyOptions, pool *proxy.Pool, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			bs, err := o.loadBackends()
			if err == nil {
				err = pool.Set(bs)
			}
			if err != nil {
				log.Error("backends reload failed; keeping the running list", "err", err)
				continue
			}
			log.Info("backends reloaded", "backends", len(bs))
		}
	}
}
