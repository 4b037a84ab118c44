package client

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// softStateCall makes one call of the pickers' soft state (a load report,
// or a picks push when not sent to every node: SharePicksAll) in a single
// attempt: what it carries is superseded or repaired by the next report,
// so it is never retried. Every call goes to one node, the first by
// address that lookups do not skip: where lookups take their turns and
// the pushes and reports settle them (contract §5.13), and so that a
// picker's calls reach the cluster through one node and its per-peer
// queues, which pass picks on before reports: every node then learns a
// pick no later than the load report sent after it, and a lookup never
// sees a sibling's queue without the pick that explains it (contract
// §5.12). A push sent to every node keeps that order too: it carries the
// load report with its picks' load (LoadShare.Carried), the periodic
// reports wait until every node answered it (PickShareConfig.AfterDelta),
// and when a node missed it, the push is sent again to the reports' node,
// which passes it on ahead of the next report. A node that does not answer (UNAVAILABLE, DEADLINE_EXCEEDED)
// is skipped for lookups and soft
// state as Config.FailBackoff says, and the calls go to the next node by
// address until it is back; any other answer shows the node up. The error is the call's.
func softStateCall[T any](c *Client, call func(*node) (T, error)) (T, error) {
	n, probe, _ := c.pickIn(c.byAddr, lookupTrack, 0, nil, c.cfg.LookupTimeout)
	resp, err := call(n)
	switch status.Code(err) {
	case codes.OK:
		n.lookup.ok()
	case codes.Unavailable, codes.DeadlineExceeded:
		n.lookup.failed(time.Now(), c.cfg.FailBackoff, probe)
	default:
		if probe {
			n.lookup.release(time.Now())
		}
	}
	return resp, err
}

// SharePicksAll sends one picks push to every node the client lists that
// lookups do not skip, all at once, each in a single attempt bounded by
// ctx, and returns when every call has ended: the first answer, or the
// error when no node answered. A pick then reaches each node in one
// round trip instead of one plus the first node's fan-out hop (contract
// §5.12). Each copy says in SentToNodes the number of nodes sent to (req
// itself is not changed): a node passes a delta on to its peers only when
// that is fewer than the nodes gossip shows alive (a node this client
// does not list, or one it skipped, gets the pick that way), so a cluster
// the client lists whole handles each pick once per node, not once per
// node per node. When a
// call fails while another answered, a delta is sent again, with
// SentToNodes 0, to the node the load reports go to (SharePicks), so that
// it passes it on to the node that missed it ahead of the report that
// follows (a copy that arrives twice is held once). When lookups skip
// every node, it is SharePicks (one node, probing).
func (c *Client) SharePicksAll(ctx context.Context, req *pb.SharePicksRequest) (*pb.SharePicksResponse, error) {
	if len(c.nodes) == 1 {
		return c.SharePicks(ctx, req)
	}
	now := time.Now().UnixNano()
	to := make([]*node, 0, len(c.nodes))
	for _, n := range c.nodes {
		if n.lookup.downUntil.Load() <= now {
			to = append(to, n)
		}
	}
	if len(to) == 0 {
		return c.SharePicks(ctx, req)
	}
	sent := sentTo(req, uint32(len(to)))
	type result struct {
		resp *pb.SharePicksResponse
		err  error
	}
	out := make(chan result, len(to))
	for _, n := range to {
		go func() {
			resp, err := n.ic.SharePicks(ctx, sent)
			switch status.Code(err) {
			case codes.OK:
				n.lookup.ok()
			case codes.Unavailable, codes.DeadlineExceeded:
				n.lookup.failed(time.Now(), c.cfg.FailBackoff, false)
			}
			out <- result{resp, err}
		}()
	}
	var first result
	failed := false
	for range to {
		r := <-out
		failed = failed || r.err != nil
		if first.resp == nil && (r.err == nil || first.err == nil) {
			first = r
		}
	}
	// A full state needs no second send: every node passes it on, and a
	// node that holds it already would answer the copy superseded.
	if failed && first.err == nil && len(to) > 1 && !req.GetFullState() {
		// Its failure leaves the repair to the picker's next full state.
		_, _ = c.SharePicks(ctx, sentTo(req, 0))
	}
	return first.resp, first.err
}

// sentTo is a shallow copy of req (its lists shared, not copied: a full
// state can hold thousands of picks) with SentToNodes n, so that the
// caller's request is left as it was.
func sentTo(req *pb.SharePicksRequest, n uint32) *pb.SharePicksRequest {
	return &pb.SharePicksRequest{PickerId: req.GetPickerId(), Sequence: req.GetSequence(), FullState: req.GetFullState(),
		Picks: req.GetPicks(), Removed: req.GetRemoved(), Prefilled: req.GetPrefilled(), SentToNodes: n, Load: req.GetLoad()}
}

// PicksBroadcaster sends a picks push to every node at once; *Client is
// one (SharePicksAll). A PickShare whose sender is one uses it.
type PicksBroadcaster interface {
	SharePicksAll(ctx context.Context, req *pb.SharePicksRequest) (*pb.SharePicksResponse, error)
}
