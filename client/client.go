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
// a retry never double-applies. A write attempt on a node that stops
// answering (a paused or hung process) is abandoned within about a second
// (a health check after WriteProbeAfter fails) or at WriteAttemptTimeout,
// and retried on another node; a node that failed is skipped for a while
// and probed again later (Config.FailBackoff).
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

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
)

// Defaults of Config.
//
// The write defaults fit together: a node that stops answering (a paused
// or hung process, a dead host whose connection was never closed) is
// detected within WriteProbeAfter + ProbeTimeout (1 s) and the write moves
// on; an attempt on a node that answers health checks but not the write
// ends at WriteAttemptTimeout (2 s); both leave room for further attempts
// within WriteRetry (5 s).
const (
	// DefaultLookupTimeout is the per-call budget of LookupRoute, including
	// one retry on another node. A hint that arrives later than this is
	// worth less than routing at once.
	DefaultLookupTimeout = 50 * time.Millisecond
	// DefaultFailBackoff is how long a node whose call failed is first
	// skipped (unless every node is skipped); it doubles per failed probe.
	DefaultFailBackoff = time.Second
	// DefaultWriteRetry is the total time a write is retried (SPEC 8: ~5 s).
	DefaultWriteRetry = 5 * time.Second
	// DefaultWriteAttemptTimeout bounds one write attempt; an attempt that
	// times out has an unknown outcome and is retried with the same id on
	// another node. It covers a follower's forward during a leader
	// election (the server moves it to the new leader within ~1-2 s).
	DefaultWriteAttemptTimeout = 2 * time.Second
	// DefaultWriteProbeAfter is how long a write attempt waits for its
	// answer before health-checking the node it went to.
	DefaultWriteProbeAfter = 500 * time.Millisecond
	// DefaultProbeTimeout bounds that health check.
	DefaultProbeTimeout = 500 * time.Millisecond
	// DefaultMaxMessageBytes matches the server's api.MaxMessageBytes.
	DefaultMaxMessageBytes = 16 << 20
)

// Config configures a Client. Fields are read once by New.
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
	// LookupTimeout is the per-call budget of LookupRoute, including its
	// one retry on another node; 0 = DefaultLookupTimeout (50 ms).
	LookupTimeout time.Duration
	// FailBackoff is how long a node is skipped after a call to it failed
	// for the node's own sake (UNAVAILABLE, DEADLINE_EXCEEDED or no answer;
	// for lookups also RESOURCE_EXHAUSTED and ABORTED), never for a
	// refused request (INVALID_ARGUMENT etc.). When the period ends one
	// call probes the node while the others keep skipping it; each failed
	// probe doubles the period, up to 8x FailBackoff; a success ends it.
	// Lookups and writes skip nodes separately. A node is still called
	// when every node is skipped. 0 = DefaultFailBackoff (1 s).
	FailBackoff time.Duration
	// WriteRetry is the total budget of one write (Ingest,
	// ReportReplicaStats), all attempts and the jittered pauses between
	// them included: no attempt runs past it. 0 = DefaultWriteRetry (5 s).
	WriteRetry time.Duration
	// WriteAttemptTimeout bounds one write attempt; the attempt's outcome
	// is then unknown and the write is retried on another node with the
	// same request id (the server de-duplicates it). Keep it well below
	// WriteRetry so a timed-out attempt can be retried.
	// 0 = DefaultWriteAttemptTimeout (2 s).
	WriteAttemptTimeout time.Duration
	// WriteProbeAfter: a write attempt still unanswered after this long
	// health-checks its node (grpc.health.v1, bounded by ProbeTimeout). A
	// node that does not answer the check is hung or gone: the attempt is
	// abandoned and retried at once with the same request id on another
	// node, so a paused node costs a write about WriteProbeAfter +
	// ProbeTimeout instead of WriteAttemptTimeout. A node that answers is
	// left to finish the write (it may be waiting for a leader election).
	// 0 = DefaultWriteProbeAfter (500 ms); negative = no health checks.
	WriteProbeAfter time.Duration
	// ProbeTimeout bounds the health check of WriteProbeAfter.
	// 0 = DefaultProbeTimeout (500 ms).
	ProbeTimeout time.Duration
	// StickyWrites sends each write to the node that answered the last
	// one (Addrs[0] at first) instead of the next node round robin, and
	// moves on only when that node fails for its own sake. For a writer
	// that knows the leader and names it first (the KV-event subscriber):
	// its writes skip the follower's forwarding hop until the leader
	// fails. Lookups are spread round robin either way.
	StickyWrites bool
}

// Client is safe for concurrent use.
type Client struct {
	cfg     Config
	nodes   []*node
	next    atomic.Uint64
	writeAt atomic.Uint64 // index of the node of the last successful write (StickyWrites)

	lookups, failOpen, lookupRetries, writeRetries, writeTimeouts atomic.Uint64
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
	// WriteTimeouts is write attempts that ended without an answer: they
	// reached WriteAttemptTimeout or were abandoned because their node
	// did not answer a health check (included in WriteRetries when the
	// write was retried).
	WriteTimeouts uint64
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
	if cfg.WriteProbeAfter == 0 {
		cfg.WriteProbeAfter = DefaultWriteProbeAfter
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
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
		c.nodes = append(c.nodes, &node{idx: len(c.nodes), addr: a, cc: cc, ic: pb.NewInferenceCacheClient(cc),
			cl: pb.NewClusterClient(cc), hc: healthpb.NewHealthClient(cc)})
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
	return Stats{Lookups: c.lookups.Load(), FailOpen: c.failOpen.Load(), LookupRetries: c.lookupRetries.Load(),
		WriteRetries: c.writeRetries.Load(), WriteTimeouts: c.writeTimeouts.Load()}
}

// LookupRoute asks one node for the hint of req (SPEC 5). It never fails:
// when the node fails (Unavailable, DeadlineExceeded, ResourceExhausted,
// Aborted) it skips that node for lookups (see Config.FailBackoff) and
// tries one other node within the budget; when that fails too, the budget
// LookupTimeout ends, or the request itself fails (e.g. invalid UTF-8 the encoder refuses, a
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
		n, probe := c.pick(lookupTrack, c.next.Add(1), prev, c.cfg.LookupTimeout)
		if attempt > 0 {
			c.lookupRetries.Add(1)
		}
		resp, err := n.ic.LookupRoute(ctx, req)
		if err == nil {
			n.lookup.ok()
			return resp
		}
		lastErr = err
		if !nodeFault(err) {
			// The request itself failed (it could not be encoded, or the
			// node refused it): another node would do the same, and this
			// one is not down.
			if _, answered := status.FromError(err); answered && status.Code(err) != codes.Canceled {
				n.lookup.ok()
			} else if probe {
				n.lookup.release(time.Now())
			}
			break
		}
		n.lookup.failed(time.Now(), c.cfg.FailBackoff, probe)
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
// server would, and clears token_ids and prompt_text. A non-empty
// req.CacheSalt fingerprints in that salt's hash domain
// (fingerprint.AppendSaltedBlockHashes), as the server does for salted
// token lookups. With fewer tokens than one block the key stays empty (the
// server answers NO_HINT).
func Fingerprint(req *pb.LookupRouteRequest, tokens []uint32, blockSize int) error {
	hs, err := fingerprint.AppendSaltedBlockHashes(req.BlockHashes[:0], tokens, blockSize, req.GetCacheSalt())
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

// retryAfter reports the delay a RESOURCE_EXHAUSTED refusal asks for in
// its google.rpc.RetryInfo (the server's write admission control); ok is
// false for any other error.
func retryAfter(err error) (time.Duration, bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// errUnresponsive is the cause an attempt is abandoned with when its node
// does not answer a health check.
var errUnresponsive = errors.New("node did not answer a health check")

// write runs one logical write with retries: each attempt goes to the next
// node round robin that writes are not skipping (with StickyWrites, the
// first such node from the last one that answered a write). Retriable failures
// (UNAVAILABLE; DEADLINE_EXCEEDED, also of an attempt that timed out or
// whose node stopped answering) skip the node for writes (see
// Config.FailBackoff) and are retried on another node after a pause of
// 25 ms doubling to 500 ms, with full jitter; everything within
// WriteRetry. A RESOURCE_EXHAUSTED refusal with a RetryInfo (the node is
// busy) is retried after the delay it asks for, blaming no node. Other
// errors (the request refused) end the write at once
// and blame no node.
func (c *Client) write(ctx context.Context, call func(ctx context.Context, n *node) error) error {
	deadline := time.Now().Add(c.cfg.WriteRetry)
	backoff := 25 * time.Millisecond
	var prev *node
	for {
		start := c.writeAt.Load()
		if !c.cfg.StickyWrites {
			start = c.next.Add(1)
		}
		n, probe := c.pick(writeTrack, start, prev, c.cfg.WriteAttemptTimeout)
		err := c.attempt(ctx, n, deadline, call)
		if err == nil {
			n.write.ok()
			c.writeAt.Store(uint64(n.idx))
			return nil
		}
		now := time.Now()
		if d, ok := retryAfter(err); ok && ctx.Err() == nil {
			// The node is up and refused for load (write admission):
			// wait what it asks, on the same rotation, blaming no node.
			n.write.ok()
			if left := deadline.Sub(now); left > d {
				select {
				case <-ctx.Done():
					return err
				case <-time.After(d):
				}
				c.writeRetries.Add(1)
				continue
			}
			return err
		}
		if !Retriable(err) || ctx.Err() != nil {
			if ctx.Err() == nil {
				n.write.ok() // a refusal is an answer: the node is up
			} else if probe {
				n.write.release(now)
			}
			return err
		}
		if !now.Before(deadline) {
			// The write's budget ran out: that says nothing against
			// this node.
			if probe {
				n.write.release(now)
			}
			return err
		}
		n.write.failed(now, c.cfg.FailBackoff, probe)
		sleep := time.Duration(mrand.Int64N(int64(backoff))) + time.Millisecond
		backoff = min(2*backoff, 500*time.Millisecond)
		left := deadline.Sub(now)
		if left <= 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(min(sleep, left)):
		}
		if !time.Now().Before(deadline) {
			return err // the budget ran out while pausing
		}
		prev = n
		c.writeRetries.Add(1)
	}
}

// attempt makes one write call to n, bounded by WriteAttemptTimeout and
// the write's deadline, and abandons it early when n does not answer a
// health check started WriteProbeAfter into the call. A call that ends
// without an answer returns DEADLINE_EXCEEDED naming the node.
func (c *Client) attempt(ctx context.Context, n *node, deadline time.Time, call func(ctx context.Context, n *node) error) error {
	start := time.Now()
	if d := start.Add(c.cfg.WriteAttemptTimeout); d.Before(deadline) {
		deadline = d
	}
	tctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	actx, abandon := context.WithCancelCause(tctx)
	defer abandon(nil)
	if c.cfg.WriteProbeAfter > 0 {
		t := time.AfterFunc(c.cfg.WriteProbeAfter, func() {
			if c.unresponsive(actx, n) {
				abandon(errUnresponsive)
			}
		})
		defer t.Stop()
	}
	err := call(actx, n)
	if err == nil || ctx.Err() != nil {
		return err
	}
	code := status.Code(err)
	if code != codes.DeadlineExceeded && code != codes.Canceled {
		return err // an answer, even if it came as the attempt ended
	}
	switch {
	case errors.Is(context.Cause(actx), errUnresponsive):
		c.writeTimeouts.Add(1)
		return status.Errorf(codes.DeadlineExceeded, "client: write to %s abandoned after %v: %v (outcome unknown): %v",
			n.addr, time.Since(start).Round(time.Millisecond), errUnresponsive, err)
	case tctx.Err() != nil, code == codes.DeadlineExceeded:
		// The server sees the propagated deadline too and may report it
		// a moment before this attempt's own timer fires.
		c.writeTimeouts.Add(1)
		return status.Errorf(codes.DeadlineExceeded, "client: write to %s timed out after %v (outcome unknown): %v",
			n.addr, time.Since(start).Round(time.Millisecond), err)
	}
	return err
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
