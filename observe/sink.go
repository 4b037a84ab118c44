package observe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Sink is the cluster as the observation path sees it: the two write calls
// of SPEC 6. observe never imports the server packages; the gRPC
// implementation is GRPCSink and tests use fakes.
type Sink interface {
	// Ingest writes one batch. It returns after the cluster committed it
	// (the response lists per-event rejections) or with an error, after
	// which the caller retries the same request (same request_id, so the
	// cluster de-duplicates a retry of a write that did commit).
	Ingest(ctx context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error)
	// ReportStats writes replica stats; a failure is not retried (the next
	// scrape reports fresher values).
	ReportStats(ctx context.Context, req *pb.ReportReplicaStatsRequest) (*pb.ReportReplicaStatsResponse, error)
}

// GRPCSink is a Sink over gRPC to one or more cluster nodes. Ingest uses
// one long-lived IngestStream (one response per request, in order) on the
// current address; on any failure the stream is dropped and the next call
// uses the next address, so a dead node costs one retry. Any node accepts
// writes (followers forward to the leader, SPEC 8). Safe for concurrent
// use; Ingest calls are serialised.
type GRPCSink struct {
	addrs   []string
	opts    []grpc.DialOption
	timeout time.Duration
	log     *slog.Logger

	mu     sync.Mutex // serialises Ingest: one request in flight on the stream
	cur    int
	conns  []*grpc.ClientConn
	stream grpc.BidiStreamingClient[pb.IngestRequest, pb.IngestResponse]
	cancel context.CancelFunc
}

// DefaultRPCTimeout bounds one Ingest or ReportStats attempt.
const DefaultRPCTimeout = 10 * time.Second

// ErrNoAddress is returned by NewGRPCSink without addresses.
var ErrNoAddress = errors.New("observe: no cluster address (--addr)")

// NewGRPCSink returns a sink for the cluster nodes at addrs (HOST:PORT).
// opts are extra dial options (TLS credentials, interceptors); without
// transport credentials the connection is plaintext. Connections are made
// lazily.
func NewGRPCSink(addrs []string, log *slog.Logger, opts ...grpc.DialOption) (*GRPCSink, error) {
	if len(addrs) == 0 {
		return nil, ErrNoAddress
	}
	if log == nil {
		log = slog.Default()
	}
	s := &GRPCSink{addrs: addrs, timeout: DefaultRPCTimeout, log: log,
		opts: append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)}
	s.conns = make([]*grpc.ClientConn, len(addrs))
	for i, a := range addrs {
		cc, err := grpc.NewClient(a, s.opts...)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("observe: cluster address %q: %w", a, err)
		}
		s.conns[i] = cc
	}
	return s, nil
}

// Close closes every connection.
func (s *GRPCSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropStream()
	for _, cc := range s.conns {
		if cc != nil {
			cc.Close()
		}
	}
	return nil
}

func (s *GRPCSink) dropStream() {
	if s.cancel != nil {
		s.cancel()
	}
	s.stream, s.cancel = nil, nil
}

// Ingest implements Sink.
func (s *GRPCSink) Ingest(ctx context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	addr := s.addrs[s.cur]
	if s.stream == nil {
		sctx, cancel := context.WithCancel(context.Background())
		st, err := pb.NewInferenceCacheClient(s.conns[s.cur]).IngestStream(sctx, grpc.WaitForReady(false))
		if err != nil {
			cancel()
			s.cur = (s.cur + 1) % len(s.addrs)
			return nil, fmt.Errorf("observe: open IngestStream to %s: %w", addr, err)
		}
		s.stream, s.cancel = st, cancel
	}
	// The stream outlives calls; a stuck attempt is ended by cancelling it.
	cancel := s.cancel
	stop := context.AfterFunc(ctx, cancel)
	timer := time.AfterFunc(s.timeout, cancel)
	defer func() { stop(); timer.Stop() }()
	if err := s.stream.Send(req); err != nil {
		s.dropStream()
		s.cur = (s.cur + 1) % len(s.addrs)
		return nil, fmt.Errorf("observe: IngestStream send to %s: %w", addr, err)
	}
	resp, err := s.stream.Recv()
	if err != nil {
		s.dropStream()
		s.cur = (s.cur + 1) % len(s.addrs)
		return nil, fmt.Errorf("observe: IngestStream to %s: %w", addr, err)
	}
	return resp, nil
}

// ReportStats implements Sink: it tries each address once, starting with
// the current one.
func (s *GRPCSink) ReportStats(ctx context.Context, req *pb.ReportReplicaStatsRequest) (*pb.ReportReplicaStatsResponse, error) {
	var errs []error
	for i := range s.addrs {
		j := (s.currentIndex() + i) % len(s.addrs)
		actx, cancel := context.WithTimeout(ctx, s.timeout)
		resp, err := pb.NewInferenceCacheClient(s.conns[j]).ReportReplicaStats(actx, req)
		cancel()
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", s.addrs[j], err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("observe: ReportReplicaStats: %w", errors.Join(errs...))
}

func (s *GRPCSink) currentIndex() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}
