package api

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/metrics"
	"github.com/inference-cache/inference-cache/raftnode"
)

// ServerConfig assembles the gRPC server of one node.
type ServerConfig struct {
	// Node is the replicated node (required).
	Node *raftnode.Node
	// GRPCAddr is this node's advertised gRPC address (reported by Status).
	GRPCAddr string
	// Tokenizer for prompt_text lookups; nil = NO_HINT with a detail.
	Tokenizer Tokenizer
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
}

// Server is a node's gRPC server: InferenceCache, Cluster, raftnode's
// internal forwarding service, grpc.health.v1 and server reflection.
type Server struct {
	// GRPC is the server to Serve on a listener.
	GRPC *grpc.Server
	// Health is the health service; for "" and both services it reports
	// SERVING while the node is Serving (state loaded, its log appends
	// succeed, its applies keep up; raftnode.Node.Serving), NOT_SERVING
	// otherwise and after Shutdown. It follows the node within
	// healthPoll. A NOT_SERVING node still answers lookups, marked stale.
	Health *health.Server
	// Service is the InferenceCache implementation.
	Service *Service

	stop chan struct{}
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

// BaseServerOptions are the gRPC server options every node uses (SPEC 9
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

// NewServer builds the gRPC server of cfg.Node with the message size limit
// MaxMessageBytes, at most MaxConcurrentStreams RPCs per connection,
// keepalive enforcement (KeepaliveMinTime) and settings suited to
// long-lived gateway connections, and cfg.Auth's token interceptors.
func NewServer(cfg ServerConfig) *Server {
	gs := grpc.NewServer(serverOptions(cfg)...)
	svc := NewService(Config{Backend: NewNodeBackend(cfg.Node), Tokenizer: cfg.Tokenizer, Metrics: cfg.Metrics, Logger: cfg.Logger})
	pb.RegisterInferenceCacheServer(gs, svc)
	pb.RegisterClusterServer(gs, NewClusterService(cfg.Node, cfg.GRPCAddr, cfg.TmpDir))
	cfg.Node.RegisterGRPC(gs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	s := &Server{GRPC: gs, Health: hs, Service: svc, stop: make(chan struct{})}
	for _, name := range append(healthServices, StartedHealthService) {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	go s.watchHealth(cfg.Node)
	return s
}

// healthPoll is how often the health service re-reads Node.Serving.
const healthPoll = 50 * time.Millisecond

// watchHealth keeps the health service's status equal to n.Serving()
// until Shutdown.
func (s *Server) watchHealth(n *raftnode.Node) {
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	serving, started := false, false // NewServer starts NOT_SERVING
	for {
		if !started && n.Ready() {
			started = true
			s.Health.SetServingStatus(StartedHealthService, healthpb.HealthCheckResponse_SERVING)
		}
		if now := n.Serving(); now != serving {
			serving = now
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if now {
				st = healthpb.HealthCheckResponse_SERVING
			}
			for _, name := range healthServices {
				s.Health.SetServingStatus(name, st)
			}
		}
		select {
		case <-s.stop:
			return
		case <-t.C:
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
