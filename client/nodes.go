package client

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// maxBackoffShift caps how often a node's skip period doubles: a node that
// keeps failing is skipped for at most FailBackoff << maxBackoffShift
// (8 s with the default FailBackoff) between probes.
const maxBackoffShift = 3

type node struct {
	idx  int // position in Config.Addrs
	addr string
	cc   *grpc.ClientConn
	ic   pb.InferenceCacheClient
	cl   pb.ClusterClient
	hc   healthpb.HealthClient

	// lookup and write are tracked apart: each path learns only from its
	// own calls, so a follower that cannot reach the leader (writes hang)
	// still serves lookups, and a lookup that missed its 50 ms budget on a
	// busy node does not push writes away from it.
	lookup, write backoff
}

// backoff is one path's view of whether a node is worth calling.
//
// A node is up while fails is 0. A call that fails for the node's own
// sake (see failed) marks it down for base, doubling with every further
// failed probe up to base << maxBackoffShift. When that period ends, pick
// hands the node to exactly one caller (the probe) and keeps skipping it
// for the others until the probe's call ends; a probe that succeeds (or
// any other call that succeeds) brings the node back up.
type backoff struct {
	downUntil atomic.Int64 // unix ns; skipped until then
	fails     atomic.Int32 // consecutive failed periods; 0 = up
}

// ok records a successful call: the node is up.
func (b *backoff) ok() {
	if b.fails.Load() != 0 {
		b.fails.Store(0)
		b.downUntil.Store(0)
	}
}

// failed records a call that failed for the node's own sake. A failure of
// an up node starts its first skip period; a failed probe doubles it;
// other failures while the node is already down (calls that were in
// flight when it went down, or a fallback when every node is down) leave
// the period as it is.
func (b *backoff) failed(now time.Time, base time.Duration, probe bool) {
	var f int32
	switch {
	case probe:
		f = b.fails.Add(1)
	case b.fails.CompareAndSwap(0, 1):
		f = 1
	default:
		return
	}
	b.downUntil.Store(now.Add(base << min(f-1, maxBackoffShift)).UnixNano())
}

// release ends a probe that taught nothing about the node (the caller
// gave up, or the write's budget ran out): the next call probes it again
// at once instead of waiting out the probe's hold.
func (b *backoff) release(now time.Time) {
	if b.fails.Load() != 0 && b.downUntil.Load() > now.UnixNano() {
		b.downUntil.Store(now.UnixNano())
	}
}

// claim reports whether the node may be called now, and whether that
// call is its probe. A down node whose period ended is claimed by one
// caller, which holds it for hold (the longest its call can take).
func (b *backoff) claim(now time.Time, hold time.Duration) (usable, probe bool) {
	until := b.downUntil.Load()
	if until > now.UnixNano() {
		return false, false
	}
	if b.fails.Load() == 0 {
		return true, false
	}
	if b.downUntil.CompareAndSwap(until, now.Add(hold).UnixNano()) {
		return true, true
	}
	return false, false
}

// pick returns the first node from index start (mod the node count) that
// track (lookup or write) does not skip, and whether the call is that
// node's probe; when it skips every node, the first from start. skip (may
// be nil) is avoided unless it is the only node. hold bounds the call
// (see backoff.claim).
func (c *Client) pick(track func(*node) *backoff, start uint64, skip *node, hold time.Duration) (*node, bool) {
	n, probe, _ := c.pickIn(c.nodes, track, start, skip, hold)
	return n, probe
}

// pickIn is pick over list (c.nodes, or c.byAddr); skipped reports that
// track skips every node, so n is a fallback that failed within its
// skip period.
func (c *Client) pickIn(list []*node, track func(*node) *backoff, start uint64, skip *node, hold time.Duration) (n *node, probe, skipped bool) {
	now := time.Now()
	var fallback *node
	for i := range list {
		n := list[(start+uint64(i))%uint64(len(list))]
		if n == skip {
			continue
		}
		if fallback == nil {
			fallback = n
		}
		if usable, probe := track(n).claim(now, hold); usable {
			return n, probe, false
		}
	}
	if fallback == nil {
		return skip, false, true // the only node
	}
	return fallback, false, true
}

func lookupTrack(n *node) *backoff { return &n.lookup }
func writeTrack(n *node) *backoff  { return &n.write }

// unresponsive reports whether n failed to answer a gRPC health check
// within ProbeTimeout. Any answer, even NOT_SERVING or an error status,
// shows the process is running and its connection alive. ctx ending
// first (the call being probed finished) is not a verdict: false.
func (c *Client) unresponsive(ctx context.Context, n *node) bool {
	pctx, cancel := context.WithTimeout(ctx, c.cfg.ProbeTimeout)
	defer cancel()
	_, err := n.hc.Check(pctx, &healthpb.HealthCheckRequest{})
	if ctx.Err() != nil {
		return false
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Unavailable:
		return true
	}
	return false
}
