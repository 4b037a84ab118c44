package client

import (
	"context"
	"errors"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// Retriable reports whether a write that failed with err may be retried
// with the same request id (contract §8.5): UNAVAILABLE (not leader, no leader,
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

// Ingest commits a batch of block events (contract §6.1). When req has no
// request_id one is generated; every retry of this call carries the same
// id. Per-event rejections are in the response; an error is a refused
// request (INVALID_ARGUMENT) or the last failure once retries ran out.
// Events rejected for an observed_at_ms ahead of the server's clock are
// counted (Stats.IngestRejectedAheadOfClock) and logged at WARN with the
// skew, at most once per ClockWarnInterval; the call still succeeds and
// is not retried (the other events are committed, and these would be
// rejected again).
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
	if n := resp.GetRejectedAheadOfClock(); err == nil && n > 0 {
		c.aheadOfClock.Add(uint64(n))
		c.warnClock(r.GetEvents(), resp)
	}
	return resp, err
}

// ClockWarnInterval is the least time between two of the client's
// warnings about events rejected for a clock ahead of the server's: a
// wrong clock rejects every batch, and one line a minute is enough to
// name it (the count is in Stats.IngestRejectedAheadOfClock).
const ClockWarnInterval = time.Minute

// warnClock logs, unless another warning went out within
// ClockWarnInterval, how far the newest observed_at_ms of evs runs ahead
// of the server clock in resp, and how far this process's clock does.
func (c *Client) warnClock(evs []*pb.BlockEvent, resp *pb.IngestResponse) {
	now := time.Now()
	last := c.clockWarnAt.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < ClockWarnInterval || !c.clockWarnAt.CompareAndSwap(last, now.UnixNano()) {
		c.clockWarnSkipped.Add(1)
		return
	}
	var newest int64
	for _, e := range evs {
		newest = max(newest, e.GetObservedAtMs())
	}
	server := resp.GetServerTimeMs()
	c.log.Warn("inference-cache: block events rejected: observed_at_ms ahead of the server clock; check the clock (NTP) of whatever stamps them",
		slog.Uint64("rejected_ahead_of_clock", uint64(resp.GetRejectedAheadOfClock())), slog.Int("events", len(evs)),
		slog.Duration("events_ahead_by", MillisDuration(newest-server)),
		slog.Duration("local_clock_ahead_by", MillisDuration(now.UnixMilli()-server)),
		slog.Int64("server_time_ms", server), slog.Uint64("warnings_suppressed", c.clockWarnSkipped.Swap(0)))
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

// MillisDuration is ms milliseconds as a Duration, saturating at the
// largest Duration either way instead of wrapping (a stamp from the year
// 3000 is "ahead by 292 years", not negative).
func MillisDuration(ms int64) time.Duration {
	const lim = math.MaxInt64 / int64(time.Millisecond)
	switch {
	case ms > lim:
		return math.MaxInt64
	case ms < -lim:
		return math.MinInt64
	}
	return time.Duration(ms) * time.Millisecond
}
