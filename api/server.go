package api

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/metrics"
	"github.com/inference-cache/inference-cache/raftnode"
	"github.com/inference-cache/inference-cache/tokenizer"
	"github.com/inference-cache/inference-cache/turns"
)

// ServerConfig assembles the gRPC server of one node.
type ServerConfig struct {
	// Node is the replicated node (required).
	Node *raftnode.Node
	// GRPCAddr is this node's advertised gRPC address (reported by Status).
	GRPCAddr string
	// TurnWait bounds a lookup's wait for its turn among the pickers
	// (contract §5.13); 0 = turns.DefaultWait, < 0 = lookups take no
	// turns.
	TurnWait time.Duration
	// Tokenizer for prompt_text lookups; nil = NO_HINT with a detail.
	// When it is also a Preloader (tokenizer.Registry is), NewServer
	// preloads it and the node reports ready only once that finished or
	// TokenizerLoadTimeout passed.
	Tokenizer Tokenizer
	// TokenizerLoadTimeout bounds how long readiness waits for the
	// Tokenizer's preload; 0 = DefaultTokenizerLoadTimeout, < 0 = do not
	// preload (tokenizers load on their first lookup). Past the bound the
	// node reports ready anyway and the loads go on in the background: a
	// slow disk must not keep a node out of service for good.
	TokenizerLoadTimeout time.Duration
	// Metrics; nil = not recorded.
	Metrics *metrics.Metrics
	// Logger; nil = slog.Default().
	Logger *slog.Logger
	// TmpDir for uploaded restore files; "" = OS default.
	TmpDir string
	// Options are extra grpc.ServerOptions (TLS credentials, interceptors).
	Options []grpc.ServerOption
	// Auth checks bearer tokens per RPC class (auth.go); nil or without
	// any token = every RPC open (the local quick start).
	Auth *Auth
	// Now is the server's wall clock (Config.Now); nil = time.Now.
	Now func() time.Time
	// ClockTrusted gates writes on a checked clock (Config.ClockTrusted);
	// nil = always checked.
	ClockTrusted func() bool
}

// Server is a node's gRPC server: InferenceCache, Cluster, raftnode's
// internal forwarding service, grpc.health.v1 and server reflection.
type Server struct {
	// GRPC is the server to Serve on a listener.
	GRPC *grpc.Server
	// Health is the health service; for "" and both services it reports
	// SERVING while Ready, NOT_SERVING otherwise and after Shutdown. It
	// follows Ready within healthPoll. A NOT_SERVING node still answers
	// lookups, marked stale.
	Health *health.Server
	// Service is the InferenceCache implementation.
	Service *Service

	node        *raftnode.Node
	tokLoaded   atomic.Bool // the tokenizer preload finished or timed out
	tokDone     chan struct{}
	stop        chan struct{}
	healthMu    sync.Mutex // serializes syncHealth
	healthState struct{ serving, started bool }
}

// DefaultTokenizerLoadTimeout is how long readiness waits, by default,
// for every model's tokenizer to load: a byte-level BPE tokenizer.json of
// ~10 MB parses in about a second, so this is room for a handful of models
// on a busy machine, and short enough that a hung disk does not keep a
// node out of service.
const DefaultTokenizerLoadTimeout = 2 * time.Minute

// Preloader is a Tokenizer that can load the tokenizer of every model it
// knows before the first lookup (tokenizer.Registry). Preload returns one
// outcome per model and an error only when it could not list them (an
// unreadable models directory); a model that fails to load is an outcome,
// not an error. It must stop waiting once ctx ends.
type Preloader interface {
	Preload(ctx context.Context) ([]tokenizer.ModelLoad, error)
}

// healthServices are the names whose health follows Node.Serving
// (readiness: a load balancer should send this node traffic).
var healthServices = []string{"", pb.InferenceCache_ServiceDesc.ServiceName, pb.Cluster_ServiceDesc.ServiceName}

// StartedHealthService is the grpc.health.v1 service name that follows
// Node.Ready instead: SERVING once the node's state is loaded, even while
// it is not Serving (catching up with no leader reachable, a failing
// disk). Startup probes use it, so a node that cannot reach a quorum is
// not restarted over and over for a fault a restart cannot fix.
const StartedHealthService = "inferencecache.started"

// BaseServerOptions are the gRPC server options every node uses (contract §9.9
// limits, keepalive, stream workers), before TLS and authentication.
// Benchmarks use them too, so they measure the production server.
func BaseServerOptions() []grpc.ServerOption {
	return append(baseOptions(), refuseOptions()...)
}

// refuseOptions answer a request whose bytes cannot be decoded (see
// lookupCodec). They come after every other interceptor (serverOptions),
// so an unauthenticated caller is refused before its bytes are looked at.
func refuseOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(refuseUndecodable), grpc.ChainStreamInterceptor(refuseUndecodableStream)}
}

// serverOptions assembles NewServer's options: the base settings, the
// panic recovery (outermost), the caller's, the token interceptors, and
// last the refusal of undecodable requests.
func serverOptions(cfg ServerConfig) []grpc.ServerOption {
	opts := append(baseOptions(), recoveryOptions(cfg.Logger, cfg.Metrics)...)
	opts = append(opts, cfg.Options...)
	if cfg.Auth != nil && cfg.Auth.Enabled() {
		opts = append(opts, cfg.Auth.ServerOptions()...)
	}
	return append(opts, refuseOptions()...)
}

func baseOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.InitialWindowSize(StreamWindowBytes),
		grpc.InitialConnWindowSize(ConnWindowBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, MaxConnectionIdle: MaxConnectionIdle}),
		// A fixed pool of stream workers keeps goroutines (and their grown
		// stacks) across RPCs: with a fresh goroutine per call, every
		// lookup paid for growing its stack (~5 % of CPU at saturation).
		grpc.NumStreamWorkers(StreamWorkers),
		// Lets a lookup whose bytes protobuf refuses reach the handler,
		// which fails open, and answers any other request of ours whose
		// bytes cannot be decoded INVALID_ARGUMENT naming the problem,
		// where gRPC would answer INTERNAL (see lookupCodec). The codec
		// and the interceptors (refuseOptions) work only together.
		grpc.ForceServerCodec(lookupCodec{}),
	}
}

// newTurns is the node's turn table, nil when cfg turns turns off.
func newTurns(cfg ServerConfig) *turns.Table {
	if cfg.TurnWait < 0 {
		return nil
	}
	// The wall clock, not cfg.Now: the cluster's correction of a node's
	// clock jumps, and a turn's hold is a local duration.
	return turns.New(turns.Config{})
}

// NewServer builds the gRPC server of cfg.Node with the message size limit
// MaxMessageBytes, at most MaxConcurrentStreams RPCs per connection,
// keepalive enforcement (KeepaliveMinTime) and settings suited to
// long-lived gateway connections, and cfg.Auth's token interceptors.
func NewServer(cfg ServerConfig) *Server {
	gs := grpc.NewServer(serverOptions(cfg)...)
	svc := NewService(Config{Backend: NewNodeBackend(cfg.Node), Tokenizer: cfg.Tokenizer, Metrics: cfg.Metrics, Logger: cfg.Logger, Now: cfg.Now, ClockTrusted: cfg.ClockTrusted,
		PickerLoad: cfg.Node, Positions: cfg.Node, Provisional: cfg.Node, Turns: newTurns(cfg), TurnWait: cfg.TurnWait})
	pb.RegisterInferenceCacheServer(gs, svc)
	pb.RegisterClusterServer(gs, NewClusterService(cfg.Node, cfg.GRPCAddr, cfg.TmpDir, cfg.Metrics))
	cfg.Node.RegisterGRPC(gs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	s := &Server{GRPC: gs, Health: hs, Service: svc, node: cfg.Node, tokDone: make(chan struct{}), stop: make(chan struct{})}
	for _, name := range append(healthServices, StartedHealthService) {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if p, ok := cfg.Tokenizer.(Preloader); ok && cfg.TokenizerLoadTimeout >= 0 {
		d := cfg.TokenizerLoadTimeout
		if d == 0 {
			d = DefaultTokenizerLoadTimeout
		}
		go s.preload(p, d, log)
	} else {
		s.tokenizersLoaded()
	}
	go s.watchHealth()
	return s
}

// Ready reports whether this node should get traffic: the node is Serving
// (state loaded, its log appends succeed, its applies keep up;
// raftnode.Node.Serving) and the tokenizer preload has finished or timed
// out. /readyz and the health service report it.
func (s *Server) Ready() bool { return s.tokLoaded.Load() && s.node.Serving() }

// TokenizersLoaded is closed once the tokenizer preload finished or timed
// out (at once when there is nothing to preload).
func (s *Server) TokenizersLoaded() <-chan struct{} { return s.tokDone }

func (s *Server) tokenizersLoaded() {
	if s.tokLoaded.CompareAndSwap(false, true) {
		close(s.tokDone)
	}
}

// preload loads every model's tokenizer through p, logging each outcome,
// and marks the tokenizers loaded when done or after limit, whichever is
// first, even if p does not stop at its context's end. A broken tokenizer
// is logged and skipped: it fails only its own model's prompt_text
// lookups.
func (s *Server) preload(p Preloader, limit time.Duration, log *slog.Logger) {
	defer s.tokenizersLoaded()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		res, err := p.Preload(ctx)
		if err != nil {
			log.Error("tokenizers not preloaded: prompt_text lookups will load them on first use", "err", err)
			return
		}
		loaded := 0
		for _, m := range res {
			switch {
			case m.Err == nil:
				loaded++
				log.Info("tokenizer loaded", "model_id", m.Model, "took", m.Took.Round(time.Millisecond))
			case errors.Is(m.Err, tokenizer.ErrLoading):
				log.Warn("tokenizer still loading at the readiness time limit; ready without it", "model_id", m.Model, "limit", limit)
			case errors.Is(m.Err, tokenizer.ErrSkipped):
				log.Warn("tokenizer not preloaded; it loads on first use", "model_id", m.Model, "err", m.Err)
			default:
				log.Error("tokenizer skipped: its prompt_text lookups answer NO_HINT", "model_id", m.Model, "err", m.Err)
			}
		}
		log.Info("tokenizers preloaded", "models", len(res), "loaded", loaded, "took", time.Since(start).Round(time.Millisecond))
	}()
	select {
	case <-done:
	case <-ctx.Done():
		log.Warn("tokenizers still loading at the readiness time limit (--tokenizer-load-timeout); reporting ready", "limit", limit)
	case <-s.stop:
	}
}

// healthPoll is how often the health service re-reads Node.Serving.
const healthPoll = 50 * time.Millisecond

// watchHealth keeps the health service's status equal to Ready until
// Shutdown.
func (s *Server) watchHealth() {
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	for {
		s.syncHealth()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

// syncHealth sets the health service's statuses from Ready and
// Node.Ready once.
func (s *Server) syncHealth() {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	h := &s.healthState // NewServer starts NOT_SERVING
	if !h.started && s.node.Ready() {
		h.started = true
		s.Health.SetServingStatus(StartedHealthService, healthpb.HealthCheckResponse_SERVING)
	}
	if now := s.Ready(); now != h.serving {
		h.serving = now
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if now {
			st = healthpb.HealthCheckResponse_SERVING
		}
		for _, name := range healthServices {
			s.Health.SetServingStatus(name, st)
		}
	}
}

// Shutdown marks the health NOT_SERVING and stops the gRPC server
// gracefully, forcing it after ctx ends.
func (s *Server) Shutdown(ctx context.Context) {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.Health.Shutdown()
	done := make(chan struct{})
	go func() { s.GRPC.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.GRPC.Stop()
	}
}
