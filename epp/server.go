package epp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inference-cache/inference-cache/gateway"
)

// Default ports, as the reference EPP's (contract §14.1).
const (
	// DefaultExtProcPort serves envoy.service.ext_proc.v3.ExternalProcessor.
	DefaultExtProcPort = 9002
	// DefaultHealthPort serves grpc.health.v1.Health.
	DefaultHealthPort = 9003
	// DefaultMetricsPort serves Prometheus metrics over HTTP.
	DefaultMetricsPort = 9090
)

// DefaultMaxBodyBytes bounds a request body the picker holds (the
// proxy's bound); a larger one is answered 413.
const DefaultMaxBodyBytes = 32 << 20

// Options configure a Server.
type Options struct {
	// Gateway decides each pick (required).
	Gateway *gateway.Gateway
	// Endpoints are the pool's endpoints (required).
	Endpoints *Table
	// Metrics; nil = registered nowhere.
	Metrics *Metrics
	// MaxBodyBytes bounds a request body; 0 = DefaultMaxBodyBytes.
	MaxBodyBytes int
	// RequestBodyMode and ResponseBodyMode are the body modes assumed
	// when the data plane does not send protocol_config on a stream's
	// first message (Envoy sends it); NONE (the zero value) =
	// FULL_DUPLEX_STREAMED, the mode the protocol requires gateways to
	// support.
	RequestBodyMode, ResponseBodyMode BodyMode
	// Logger; nil = slog.Default().
	Logger *slog.Logger
}

// Server is the Endpoint Picker: an Envoy external processor that picks
// an endpoint for each request over the gateway core (contract §14).
// Every Server is active: any number of them may serve one pool, each
// reading the replicated index from any cluster node. Safe for
// concurrent use.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	gw      *gateway.Gateway
	decode  *gateway.Gateway // decode picks of disaggregated requests (disagg.go)
	eps     *Table
	m       *Metrics
	maxBody int
	reqMode BodyMode
	rspMode BodyMode
	log     *slog.Logger
	refused gateway.RefusedLog
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Gateway == nil || opts.Endpoints == nil {
		return nil, errors.New("epp: Gateway and Endpoints are required")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(prometheus.NewRegistry(), "", nil)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RequestBodyMode == ModeNone {
		opts.RequestBodyMode = ModeFullDuplexStreamed
	}
	if opts.ResponseBodyMode == ModeNone {
		opts.ResponseBodyMode = ModeFullDuplexStreamed
	}
	decode, err := gateway.New(gateway.Config{Strategy: gateway.StrategyLeastLoaded})
	if err != nil {
		return nil, err
	}
	return &Server{gw: opts.Gateway, decode: decode, eps: opts.Endpoints, m: opts.Metrics, maxBody: opts.MaxBodyBytes,
		reqMode: opts.RequestBodyMode, rspMode: opts.ResponseBodyMode, log: opts.Logger}, nil
}

// recvHeadroom is what a request message may hold beyond its body: the
// headers, the metadata context, the protobuf framing.
const recvHeadroom = 1 << 20

// GRPCOptions are the options of the grpc server s is registered on: a
// receive limit of the body limit plus headroom, so that a BUFFERED body
// of up to Options.MaxBodyBytes (one message) reaches the picker, which
// answers a larger one 413, rather than gRPC refusing it at its default
// 4 MiB (contract §14.2).
func (s *Server) GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(s.maxBody + recvHeadroom)}
}

// Register registers the Server as grpc server g's ExternalProcessor.
func (s *Server) Register(g *grpc.Server) { extprocv3.RegisterExternalProcessorServer(g, s) }

// Process serves one ext_proc stream: one HTTP request and its response
// (contract §14.2). It returns nil when the data plane ends the stream,
// after an ImmediateResponse, or when the request was cancelled; a panic
// is logged and ends the stream with codes.Internal, never the process.
func (s *Server) Process(srv grpc.BidiStreamingServer[extprocv3.ProcessingRequest, extprocv3.ProcessingResponse]) (err error) {
	s.m.Streams.Inc()
	x := &exchange{s: s, srv: srv, reqMode: s.reqMode, rspMode: s.rspMode}
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("ext_proc stream panic", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = status.Error(codes.Internal, "epp: internal error")
		}
		x.end()
		s.m.Streams.Dec()
	}()
	for first := true; ; first = false {
		req, rerr := srv.Recv()
		if rerr == io.EOF || status.Code(rerr) == codes.Canceled {
			return nil
		}
		if rerr != nil {
			return rerr
		}
		if first {
			x.configure(req)
		}
		done, herr := x.handle(req)
		if herr != nil {
			if status.Code(herr) == codes.Canceled || srv.Context().Err() != nil {
				return nil
			}
			return herr
		}
		if done {
			return nil
		}
	}
}
