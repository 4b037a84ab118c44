package client

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// softStateCall makes one call of the pickers' soft state (a load report,
// a picks push) on the next node in turn, skipping nodes whose lookups
// failed recently, in a single attempt: what it carries is superseded or
// repaired by the next report, so it is never retried. A node that does
// not answer (UNAVAILABLE, DEADLINE_EXCEEDED) is skipped for lookups and
// soft state as Config.FailBackoff says; any other answer shows the node
// up. The error is the call's.
func softStateCall[T any](c *Client, call func(*node) (T, error)) (T, error) {
	n, probe := c.pick(lookupTrack, c.next.Add(1), nil, c.cfg.LookupTimeout)
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
