// Package client is the Go gateway SDK of inference-cache (contract §5.10, §8.5).
//
// A Client dials several server nodes and spreads LookupRoute calls across
// them round robin, skipping nodes that failed recently. Lookups fail open:
// an error or the per-call timeout gives a NO_HINT response (counted in
// Stats), never an error, so a gateway can call LookupRoute on every
// request and route round robin on NO_HINT. Fingerprints can be computed
// locally from token ids (LookupTokens). Writes (Ingest,
// ReportReplicaStats) carry a stable request id per logical write and are
// retried with jitter on the contract §8.5 retriable outcomes, rotating nodes, so
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
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

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
	// DefaultWriteRetry is the total time a write is retried (contract §8.5: ~5 s).
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
	// Lookups and writes skip nodes separately. A write still calls a
	// node when every node is skipped; a lookup fails open at once,
	// calling none. 0 = DefaultFailBackoff (1 s).
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
	// Logger receives the client's warnings (only: events the cluster
	// rejected for a clock ahead of its own, at most once per
	// ClockWarnInterval); nil = slog.Default().
	Logger *slog.Logger
}

// Client is safe for concurrent use.
type Client struct {
	cfg     Config
	nodes   []*node
	byAddr  []*node // nodes by address: where turns are taken (LookupRoute)
	next    atomic.Uint64
	writeAt atomic.Uint64 // index of the node of the last successful write (StickyWrites)

	log *slog.Logger

	lookups, failOpen, lookupRetries, writeRetries, writeTimeouts atomic.Uint64
	aheadOfClock                                                  atomic.Uint64
	clockWarnAt                                                   atomic.Int64 // unix ns of the last clock warning (0 = none yet)
	clockWarnSkipped                                              atomic.Uint64
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
	// IngestRejectedAheadOfClock is block events the cluster rejected
	// because their observed_at_ms was over 5 minutes ahead of its clock
	// (IngestResponse.rejected_ahead_of_clock, summed over Ingest calls).
	// Non-zero means the clock stamping the events is wrong: the events
	// are lost for good, since resending them cannot succeed.
	IngestRejectedAheadOfClock uint64
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
	c := &Client{cfg: cfg, log: cfg.Logger}
	if c.log == nil {
		c.log = slog.Default()
	}
	for _, a := range cfg.Addrs {
		cc, err := grpc.NewClient(a, opts...)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("client: dial %s: %w", a, err)
		}
		c.nodes = append(c.nodes, &node{idx: len(c.nodes), addr: a, cc: cc, ic: pb.NewInferenceCacheClient(cc),
			cl: pb.NewClusterClient(cc), hc: healthpb.NewHealthClient(cc)})
	}
	// Lookups that take a turn (contract §5.13) go to the first usable
	// node by address: every gateway listing the same nodes then takes
	// its turns at the same node.
	c.byAddr = slices.Clone(c.nodes)
	slices.SortFunc(c.byAddr, func(a, b *node) int { return strings.Compare(a.addr, b.addr) })
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
		WriteRetries: c.writeRetries.Load(), WriteTimeouts: c.writeTimeouts.Load(),
		IngestRejectedAheadOfClock: c.aheadOfClock.Load()}
}

// LookupRoute asks one node for the hint of req (contract §5.7). It never fails:
// when the node fails (Unavailable, DeadlineExceeded, ResourceExhausted,
// Aborted) it skips that node for lookups (see Config.FailBackoff) and
// tries one other node within the budget; when that fails too, the budget
// LookupTimeout ends, or the request itself fails (e.g. invalid UTF-8 the encoder refuses, a
// refused token: no retry, no node blamed), it returns a NO_HINT response
// whose Detail is "client: <code>: <message>; failing open" (counted in
// Stats.FailOpen). While lookups skip every node it fails open at once,
// calling none, except for the one lookup that probes a node whose skip
// period ended: a cluster that is out costs requests no lookup budget.
//
// A lookup that takes a turn (take_turn, contract §5.13) goes to the first
// usable node by address, so that every gateway listing the same nodes
// takes its turns at one node.
func (c *Client) LookupRoute(ctx context.Context, req *pb.LookupRouteRequest) *pb.LookupRouteResponse {
	c.lookups.Add(1)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LookupTimeout)
	defer cancel()
	var lastErr error
	var prev *node
	for attempt := 0; attempt < 2; attempt++ {
		list, start := c.nodes, c.next.Add(1)
		if req.GetTakeTurn() {
			list, start = c.byAddr, 0
		}
		n, probe, skipped := c.pickIn(list, lookupTrack, start, prev, c.cfg.LookupTimeout)
		if skipped {
			// Every node failed within its skip period: calling one anyway
			// would cost the request the whole budget for as long as the
			// cluster is out. Each node's probe, when its period ends, finds
			// it back.
			if lastErr == nil {
				lastErr = errEveryNodeSkipped
			}
			break
		}
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

// errEveryNodeSkipped is the cause of a lookup that failed open at once:
// every node it could go to failed within its skip period
// (Config.FailBackoff).
var errEveryNodeSkipped = status.Error(codes.Unavailable, "every node is skipped after failing within the last FailBackoff")

// RefusedLookup returns the gRPC code name of a fail-open LookupRoute
// answer whose call the cluster refused for its credentials
// ("Unauthenticated": a missing or unknown token; "PermissionDenied": a
// token of a lesser class), and "" for any other answer, a timeout or an
// unreachable node included. A gateway counts and logs these apart: no
// retry can succeed until its token is fixed (docs/security.md).
func RefusedLookup(resp *pb.LookupRouteResponse) string {
	if resp.GetServedBy() != "" {
		return ""
	}
	for _, c := range [...]codes.Code{codes.Unauthenticated, codes.PermissionDenied} {
		if strings.HasPrefix(resp.GetDetail(), "client: "+c.String()+": ") {
			return c.String()
		}
	}
	return ""
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
// from token ids with blockSize tokens per block (contract §3), exactly as the
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
