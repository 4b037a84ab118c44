package epp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inference-cache/inference-cache/admission"
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
	// MaxBodyBytesInFlight bounds the request body bytes gathered at once
	// across streams: a body that does not fit is answered 429 with
	// Retry-After; 0 = admission.DefaultMaxBytesInFlight. Large bodies
	// are keyed a few at a time (admission.Controller.KeyLarge).
	MaxBodyBytesInFlight int64
	// StreamIdleTimeout ends a stream on which the data plane sends
	// nothing for this long (DEADLINE_EXCEEDED): a stream that is never
	// closed does not hold its state for good; 0 =
	// DefaultStreamIdleTimeout.
	StreamIdleTimeout time.Duration
	// MaxStreamsPerConnection bounds the concurrent ext_proc streams of
	// one HTTP/2 connection (GRPCOptions); 0 = DefaultMaxStreamsPerConnection.
	MaxStreamsPerConnection uint32
}

// Defaults of Options.
const (
	// DefaultStreamIdleTimeout: longer than any wait between the
	// messages of one request (a response's chunks arrive as the engine
	// decodes; a queued request's first chunk within minutes).
	DefaultStreamIdleTimeout = 10 * time.Minute
	// DefaultMaxStreamsPerConnection: Envoy opens one ext_proc stream per
	// request, and multiplexes them over few connections.
	DefaultMaxStreamsPerConnection = 4096
)

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
	adm     *admission.Controller
	idle    time.Duration
	streams uint32
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
	if opts.StreamIdleTimeout <= 0 {
		opts.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if opts.MaxStreamsPerConnection == 0 {
		opts.MaxStreamsPerConnection = DefaultMaxStreamsPerConnection
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
		reqMode: opts.RequestBodyMode, rspMode: opts.ResponseBodyMode, log: opts.Logger,
		adm: admission.New(opts.MaxBodyBytesInFlight), idle: opts.StreamIdleTimeout, streams: opts.MaxStreamsPerConnection}, nil
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
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(s.maxBody + recvHeadroom), grpc.MaxConcurrentStreams(s.streams)}
}

// Register registers the Server as grpc server g's ExternalProcessor.
// causeIdle counts streams ended by the idle timeout (unavailable_total).
const causeIdle = "stream_idle"

// received is one Recv's result.
type received struct {
	req *extprocv3.ProcessingRequest
	err error
}

// receive moves the stream's messages, and Recv's final error, to out
// until Recv fails or quit closes (Process returned; its stream's context
// then ends, and Recv with it), so that Process can wait for a message
// and the idle timeout at once.
func receive(srv grpc.BidiStreamingServer[extprocv3.ProcessingRequest, extprocv3.ProcessingResponse], out chan<- received, quit <-chan struct{}) {
	for {
		req, err := srv.Recv()
		select {
		case out <- received{req, err}:
		case <-quit:
			return
		}
		if err != nil {
			return
		}
	}
}

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
	recv, quit := make(chan received, 1), make(chan struct{})
	defer close(quit)
	go receive(srv, recv, quit)
	idle := time.NewTimer(s.idle)
	defer idle.Stop()
	for first := true; ; first = false {
		var req *extprocv3.ProcessingRequest
		var rerr error
		select {
		case r := <-recv:
			req, rerr = r.req, r.err
		case <-idle.C:
			s.m.Unavailable.WithLabelValues(causeIdle).Inc()
			return status.Errorf(codes.DeadlineExceeded, "epp: no message on the stream for %s", s.idle)
		}
		idle.Reset(s.idle)
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
