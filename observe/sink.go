package observe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// Sink is the cluster as the observation path sees it: the two write calls
// of contract §6.9. observe never imports the server packages; the gRPC
// implementation is GRPCSink and tests use fakes.
type Sink interface {
	// Ingest writes one batch. It returns after the cluster committed it
	// (the response lists per-event rejections) or with an error, after
	// which the caller retries the same request (same request_id, so the
	// cluster de-duplicates a retry of a write that did commit).
	Ingest(ctx context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error)
	// ReportStats writes replica stats. The caller does not retry a
	// failure (the next scrape reports fresher values).
	ReportStats(ctx context.Context, req *pb.ReportReplicaStatsRequest) (*pb.ReportReplicaStatsResponse, error)
}

// GRPCSink is a Sink over gRPC to one or more cluster nodes, on the
// client SDK's failover client (client.Client with StickyWrites): every
// write goes to the node that answered the last one, starting with the
// first address (name the leader first to skip the forwarding hop), and
// moves to the next node when that one fails or stops answering, so a
// dead node costs one retry. Any node accepts writes (followers forward
// to the leader, contract §8.5). Each call is retried with the same request id
// on the contract §8.5 retriable outcomes within client.DefaultWriteRetry (and
// ctx) before it returns an error. Safe for concurrent use.
type GRPCSink struct {
	c *client.Client
}

// ErrNoAddress is returned by NewGRPCSink without addresses.
var ErrNoAddress = errors.New("observe: no cluster address (--addr)")

// NewGRPCSink returns a sink for the cluster nodes at addrs (HOST:PORT).
// opts are extra dial options (TLS credentials, interceptors); without
// transport credentials the connection is plaintext. Connections are made
// lazily. The sink logs nothing: its errors go to the Forwarder, which
// logs them with the backlog they hold up.
func NewGRPCSink(addrs []string, opts ...grpc.DialOption) (*GRPCSink, error) {
	return NewGRPCSinkConfig(client.Config{Addrs: addrs, DialOptions: opts})
}

// NewGRPCSinkConfig is NewGRPCSink with the client configuration cfg:
// cfg.TLS and cfg.Credentials carry the TLS and bearer token a secured
// cluster requires (docs/security.md). The sink sets StickyWrites and its
// own logger; cfg.Addrs must not be empty (ErrNoAddress).
func NewGRPCSinkConfig(cfg client.Config) (*GRPCSink, error) {
	if len(cfg.Addrs) == 0 {
		return nil, ErrNoAddress
	}
	cfg.StickyWrites = true
	// The client's own clock warning would repeat the Forwarder's.
	cfg.Logger = slog.New(slog.DiscardHandler)
	c, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("observe: cluster addresses %q: %w", cfg.Addrs, err)
	}
	return &GRPCSink{c: c}, nil
}

// Close closes every connection.
func (s *GRPCSink) Close() error { return s.c.Close() }

// Ingest implements Sink with client.Client.Ingest.
func (s *GRPCSink) Ingest(ctx context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error) {
	resp, err := s.c.Ingest(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("observe: Ingest: %w", err)
	}
	return resp, nil
}

// ReportStats implements Sink with client.Client.ReportReplicaStats,
// bounded by ctx (the scraper gives it one scrape interval).
func (s *GRPCSink) ReportStats(ctx context.Context, req *pb.ReportReplicaStatsRequest) (*pb.ReportReplicaStatsResponse, error) {
	resp, err := s.c.ReportReplicaStats(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("observe: ReportReplicaStats: %w", err)
	}
	return resp, nil
}
