package client

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// softStateCall makes one call of the pickers' soft state (a load report,
// a picks push) in a single attempt: what it carries is superseded or
// repaired by the next report, so it is never retried. Every call goes to
// one node (softAt: the node of the last call that answered, a random one
// at first), so that a picker's pushes reach the cluster through one node
// and its per-peer queues, which pass picks on before reports: every node
// then learns a pick no later than the load report sent after it, and a
// lookup never sees a sibling's queue without the pick that explains it
// (contract §5.12). A node that does not answer (UNAVAILABLE,
// DEADLINE_EXCEEDED) is skipped for lookups and soft state as
// Config.FailBackoff says, and the next call goes to the next node; any
// other answer shows the node up. The error is the call's.
func softStateCall[T any](c *Client, call func(*node) (T, error)) (T, error) {
	n, probe := c.pick(lookupTrack, c.softAt.Load(), nil, c.cfg.LookupTimeout)
	resp, err := call(n)
	switch status.Code(err) {
	case codes.OK:
		n.lookup.ok()
		c.softAt.Store(uint64(n.idx))
	case codes.Unavailable, codes.DeadlineExceeded:
		n.lookup.failed(time.Now(), c.cfg.FailBackoff, probe)
		c.softAt.Store(uint64(n.idx) + 1)
	default:
		if probe {
			n.lookup.release(time.Now())
		}
		c.softAt.Store(uint64(n.idx))
	}
	return resp, err
}
