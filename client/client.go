// Package client is the Go gateway SDK of inference-cache (SPEC 5, 8).
//
// A Client dials several server nodes and spreads LookupRoute calls across
// them round robin, skipping nodes that failed recently. Lookups fail open:
// an error or the per-call timeout gives a NO_HINT response (counted in
// Stats), never an error, so a gateway can call LookupRoute on every
// request and route round robin on NO_HINT. Fingerprints can be computed
// locally from token ids (LookupTokens). Writes (Ingest,
// ReportReplicaStats) carry a stable request id per logical write and are
// retried with jitter on the SPEC 8 retriable outcomes, rotating nodes, so
// a retry never double-applies.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
)

// Defaults of Config.
const (
	// DefaultLookupTimeout is the per-call budget of LookupRoute, including
	// one retry on another node. A hint that arrives later than this is
	// worth less than routing at once.
	DefaultLookupTimeout = 50 * time.Millisecond
	// DefaultFailBackoff is how long a node whose call failed is skipped by
	// lookups (unless every node is failing).
	DefaultFailBackoff = time.Second
	// DefaultWriteRetry is the total time a write is retried (SPEC 8: ~5 s).
	DefaultWriteRetry = 5 * time.Second
	// DefaultWriteAttemptTimeout bounds one write attempt; an attempt that
	// times out has an unknown outcome and is retried with the same id.
	DefaultWriteAttemptTimeout = 10 * time.Second
	// DefaultMaxMessageBytes matches the server's api.MaxMessageBytes.
	DefaultMaxMessageBytes = 16 << 20
)

// Config configures a Client.
type Config struct {
	// Addrs are the nodes' gRPC addresses, host:port (at least one).
	Addrs []string
	// DialOptions replace the default (plaintext) transport credentials;
	// add grpc.WithTransportCredentials for TLS.
	DialOptions []grpc.DialOption
	// TLS, when set, dials every node over TLS with this config (see
	// TLSFiles); nil = plaintext (the local quick start).
	TLS *tls.Config
	// Credentials, when set, are sent on every call (see BearerToken and
	// BearerTokenFile for the server's write/admin/lookup tokens).
	Credentials credentials.PerRPCCredentials
	// LookupTimeout is the per-call budget of LookupRoute; 0 = default.
	LookupTimeout time.Duration
	// FailBackoff is how long a failed node is skipped; 0 = default.
	FailBackoff time.Duration
	// WriteRetry is the total retry budget of a write; 0 = default.
	WriteRetry time.Duration
	// WriteAttemptTimeout bounds one write attempt; 0 = default.
	WriteAttemptTimeout time.Duration
}

type node struct {
	addr      string
	cc        *grpc.ClientConn
	ic        pb.InferenceCacheClient
	cl        pb.ClusterClient
	downUntil atomic.Int64 // unix ns; skipped by lookups until then
}

// Client is safe for concurrent use.
type Client struct {
	cfg   Config
	nodes []*node
	next  atomic.Uint64

	lookups, failOpen, lookupRetries, writeRetries atomic.Uint64
}

// Stats are the client's cumulative counters.
type Stats struct {
	// Lookups is LookupRoute calls made through the client.
	Lookups uint64
	// FailOpen is lookups answered NO_HINT by the client itself because
	// every attempt failed or the budget ran out.
	FailOpen uint64
	// LookupRetries is lookups retried on a second node.
	LookupRetries uint64
	// WriteRetries is write attempts retried.
	WriteRetries uint64
}

// New dials every address (lazily: no I/O happens until the first call).
func New(cfg Config) (*Client, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("client: at least one address is required")
	}
	if cfg.LookupTimeout <= 0 {
		cfg.LookupTimeout = DefaultLookupTimeout
	}
	if cfg.FailBackoff <= 0 {
		cfg.FailBackoff = DefaultFailBackoff
	}
	if cfg.WriteRetry <= 0 {
		cfg.WriteRetry = DefaultWriteRetry
	}
	if cfg.WriteAttemptTimeout <= 0 {
		cfg.WriteAttemptTimeout = DefaultWriteAttemptTimeout
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(DefaultMaxMessageBytes), grpc.MaxCallSendMsgSize(DefaultMaxMessageBytes)),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg.TLS)))
	}
	if cfg.Credentials != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(cfg.Credentials))
	}
	opts = append(opts, cfg.DialOptions...)
	c := &Client{cfg: cfg}
	for _, a := range cfg.Addrs {
		cc, err := grpc.NewClient(a, opts...)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("client: dial %s: %w", a, err)
		}
		c.nodes = append(c.nodes, &node{addr: a, cc: cc, ic: pb.NewInferenceCacheClient(cc), cl: pb.NewClusterClient(cc)})
	}
	return c, nil
}

// Close closes every connection.
func (c *Client) Close() error {
	var first error
	for _, n := range c.nodes {
		if err := n.cc.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Stats returns the counters.
func (c *Client) Stats() Stats {
	return Stats{Lookups: c.lookups.Load(), FailOpen: c.failOpen.Load(), LookupRetries: c.lookupRetries.Load(), WriteRetries: c.writeRetries.Load()}
}

// pick returns the next node round robin that is not backing off, or the
// plain round-robin choice when all are. skip (may be nil) is avoided
// unless it is the only node.
func (c *Client) pick(skip *node) *node {
	now := time.Now().UnixNano()
	start := c.next.Add(1)
	var fallback *node
	for i := range c.nodes {
		n := c.nodes[(start+uint64(i))%uint64(len(c.nodes))]
		if n == skip {
			continue
		}
		if fallback == nil {
			fallback = n
		}
		if n.downUntil.Load() <= now {
			return n
		}
	}
	if fallback == nil {
		return skip // the only node
	}
	return fallback
}

func (c *Client) markDown(n *node) {
	n.downUntil.Store(time.Now().Add(c.cfg.FailBackoff).UnixNano())
}

// LookupRoute asks one node for the hint of req (SPEC 5). It never fails:
// when the node fails (Unavailable, DeadlineExceeded, ResourceExhausted,
// Aborted) it skips that node for FailBackoff and tries one other node
// within the budget; when that fails too, the budget LookupTimeout ends,
// or the request itself fails (e.g. invalid UTF-8 the encoder refuses, a
// refused token: no retry, no node blamed), it returns a NO_HINT response
// whose Detail is "client: <code>: <message>; failing open" (counted in
// Stats.FailOpen).
func (c *Client) LookupRoute(ctx context.Context, req *pb.LookupRouteRequest) *pb.LookupRouteResponse {
	c.lookups.Add(1)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LookupTimeout)
	defer cancel()
	var lastErr error
	var prev *node
	for attempt := 0; attempt < 2; attempt++ {
		n := c.pick(prev)
		if attempt > 0 {
			c.lookupRetries.Add(1)
		}
		resp, err := n.ic.LookupRoute(ctx, req)
		if err == nil {
			return resp
		}
		lastErr = err
		if !nodeFault(err) {
			// The request itself failed (it could not be encoded, or the
			// node refused it): another node would do the same, and this
			// one is not down.
			break
		}
		c.markDown(n)
		prev = n
		if ctx.Err() != nil || len(c.nodes) == 1 {
			break
		}
	}
	c.failOpen.Add(1)
	st := status.Convert(lastErr)
	return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT,
		Detail: "client: " + st.Code().String() + ": " + st.Message() + "; failing open"}
}

// nodeFault reports whether a LookupRoute error says the node (or the way
// to it) failed, so another node may answer, rather than the request.
func nodeFault(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}

// Fingerprint fills req's block_hashes, block_token_counts and prefix_hash
// from token ids with blockSize tokens per block (SPEC 3), exactly as the
// server would, and clears token_ids and prompt_text. With fewer tokens
// than one block the key stays empty (the server answers NO_HINT).
func Fingerprint(req *pb.LookupRouteRequest, tokens []uint32, blockSize int) error {
	hs, err := fingerprint.AppendBlockHashes(req.BlockHashes[:0], tokens, blockSize)
	if err != nil {
		return err
	}
	req.BlockHashes = hs
	req.BlockTokenCounts = req.BlockTokenCounts[:0]
	for range hs {
		req.BlockTokenCounts = append(req.BlockTokenCounts, uint32(blockSize))
	}
	req.PrefixHash = 0
	if len(hs) > 0 {
		req.PrefixHash = hs[len(hs)-1]
	}
	req.TokenIds, req.PromptText = nil, ""
	return nil
}

// LookupTokens fingerprints tokens locally (see Fingerprint) into req and
// calls LookupRoute. A bad block size gives NO_HINT (counted as fail-open).
func (c *Client) LookupTokens(ctx context.Context, req *pb.LookupRouteRequest, tokens []uint32, blockSize int) *pb.LookupRouteResponse {
	if err := Fingerprint(req, tokens, blockSize); err != nil {
		c.lookups.Add(1)
		c.failOpen.Add(1)
		return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_NO_HINT, Detail: "client: " + err.Error()}
	}
	return c.LookupRoute(ctx, req)
}

// NewRequestID returns a random 128-bit hex request id.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Retriable reports whether a write that failed with err may be retried
// with the same request id (SPEC 8): UNAVAILABLE (not leader, no leader,
// leadership transfer, leadership lost, node down) and DEADLINE_EXCEEDED
// of one attempt (outcome unknown; the server de-duplicates by id).
func Retriable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// write runs one logical write with retries: each attempt goes to the next
// node round robin; retriable failures back off 25 ms doubling to 500 ms,
// with full jitter, for at most WriteRetry in total.
func (c *Client) write(ctx context.Context, call func(ctx context.Context, n *node) error) error {
	deadline := time.Now().Add(c.cfg.WriteRetry)
	backoff := 25 * time.Millisecond
	var prev *node
	for {
		n := c.pick(prev)
		actx, cancel := context.WithTimeout(ctx, c.cfg.WriteAttemptTimeout)
		err := call(actx, n)
		cancel()
		if err == nil {
			return nil
		}
		if !Retriable(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		if status.Code(err) == codes.Unavailable {
			c.markDown(n)
		}
		prev = n
		c.writeRetries.Add(1)
		sleep := time.Duration(mrand.Int64N(int64(backoff))) + time.Millisecond
		backoff = min(2*backoff, 500*time.Millisecond)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(sleep):
		}
	}
}

// Ingest commits a batch of block events (SPEC 6). When req has no
// request_id one is generated; every retry of this call carries the same
// id. Per-event rejections are in the response; an error is a refused
// request (INVALID_ARGUMENT) or the last failure once retries ran out.
func (c *Client) Ingest(ctx context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error) {
	r := &pb.IngestRequest{Events: req.GetEvents(), RequestId: req.GetRequestId()}
	if r.RequestId == "" {
		r.RequestId = NewRequestID()
	}
	var resp *pb.IngestResponse
	err := c.write(ctx, func(ctx context.Context, n *node) (err error) {
		resp, err = n.ic.Ingest(ctx, r)
		return err
	})
	return resp, err
}

// ReportReplicaStats commits replica stats with the retry rules of Ingest.
func (c *Client) ReportReplicaStats(ctx context.Context, req *pb.ReportReplicaStatsRequest) (*pb.ReportReplicaStatsResponse, error) {
	r := &pb.ReportReplicaStatsRequest{Stats: req.GetStats(), RequestId: req.GetRequestId()}
	if r.RequestId == "" {
		r.RequestId = NewRequestID()
	}
	var resp *pb.ReportReplicaStatsResponse
	err := c.write(ctx, func(ctx context.Context, n *node) (err error) {
		resp, err = n.ic.ReportReplicaStats(ctx, r)
		return err
	})
	return resp, err
}

// Do calls fn with each node's clients in turn (starting round robin)
// until fn returns nil or an error other than UNAVAILABLE; it returns the
// last error. For admin and policy calls that any node (or only the
// leader) can answer.
func (c *Client) Do(ctx context.Context, fn func(ctx context.Context, addr string, ic pb.InferenceCacheClient, cl pb.ClusterClient) error) error {
	start := c.next.Add(1)
	var err error
	for i := range c.nodes {
		n := c.nodes[(start+uint64(i))%uint64(len(c.nodes))]
		err = fn(ctx, n.addr, n.ic, n.cl)
		if status.Code(err) != codes.Unavailable {
			return err
		}
	}
	return err
}

// Addrs returns the configured addresses in order.
func (c *Client) Addrs() []string { return append([]string(nil), c.cfg.Addrs...) }
