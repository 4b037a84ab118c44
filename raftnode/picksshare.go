package raftnode

import (
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/provisional"
	"github.com/inference-cache/inference-cache/raftnode/forwardpb"
)

// picksSweepEvery is how many load sweeps (shareSweep, 50 ms) pass
// between sweeps of the provisional residencies: a pick lives seconds
// (provisional.DefaultMaxAge), and reads ignore expired picks anyway.
const picksSweepEvery = 20

// Provisional returns the node's store of provisional residencies (soft
// state: the picks pickers pushed to this node or to its peers, contract
// §5.12).
func (n *Node) Provisional() *provisional.Store { return n.picks }

// ProvisionalView is the store read at this instant (lookups:
// provisional.View.Matches).
func (n *Node) ProvisionalView() provisional.View { return n.picks.At() }

// SharePicks applies a picks push a picker sent to this node (contract
// §5.12) and, unless it was refused or superseded, queues it for every
// other node that gossip shows alive, on the queues of the picker load
// (pickershare.go): it never waits on a peer, and a peer whose queue is
// full misses the push (Metrics.PicksDropped; the picker's next full
// state repairs it). A delta the picker sent to at least as many nodes
// as gossip shows alive (sent_to_nodes) is not passed on: every node has
// a copy of its own, and passing it on would only make each node handle
// each pick once per node. A full state is always passed on: it is the
// repair of a node that missed pushes (a node restarted within gossip's
// failure detection still counts as alive), and one a second per picker
// costs little. The push's load report (SharePicksRequest.load) is held
// after its picks and goes on with the push. Errors are the stores' (a
// *provisional.FieldError wrapping provisional.ErrInvalid or
// provisional.ErrFull; a *pickerload.FieldError naming the field under
// "load.", or pickerload.ErrFull); nothing is passed on then.
func (n *Node) SharePicks(req *pb.SharePicksRequest) (provisional.Result, error) {
	n.metrics.picksPushes.Add(1)
	res, err := n.applyPush(req, provisional.FromPB(req))
	if err != nil || res.Superseded {
		return res, err
	}
	peers := n.livePeers()
	if sent := int(req.GetSentToNodes()); !req.GetFullState() && sent > 1 && sent >= 1+len(peers) {
		return res, nil
	}
	n.fanOutTo(peers, queuedShare{p: req, at: time.Now()})
	return res, nil
}

// sharePicksTo passes picks pushes on to addr in calls of at most
// shareCallBytes. A failed call drops the rest (counted): the pickers'
// next full states repair them.
func (n *Node) sharePicksTo(addr string, picks []*pb.SharePicksRequest, arrived map[any]time.Time) {
	if len(picks) == 0 {
		return
	}
	for _, call := range picksCalls(picks, shareCallBytes) {
		if err := n.shareTo(addr, nil, call, arrived); err != nil {
			n.metrics.picksDropped.Add(uint64(len(call)))
			n.log.Debug("raftnode: provisional picks not passed on to a peer; the picker's next full state repairs them", "peer", addr, "pushes", len(call), "err", err)
			return
		}
		n.metrics.picksForwarded.Add(uint64(len(call)))
	}
}

// picksCalls splits pushes into calls of at most maxBytes encoded, or a
// single push larger than that, keeping their order (every push counts:
// each is a delta).
func picksCalls(picks []*pb.SharePicksRequest, maxBytes int) [][]*pb.SharePicksRequest {
	var calls [][]*pb.SharePicksRequest
	start, size := 0, 0
	for i, p := range picks {
		sz := proto.Size(p)
		if i > start && size+sz > maxBytes {
			calls = append(calls, picks[start:i])
			start, size = i, 0
		}
		size += sz
	}
	return append(calls, picks[start:])
}

// applyPeerPicks applies the picks pushes a peer passed on, never
// passing them further (a push reaches every node in one hop).
func (f *forwardServer) applyPeerPicks(req *forwardpb.ShareLoadRequest, resp *forwardpb.ShareLoadResponse) {
	ages := req.GetPicksAgesMs()
	for i, p := range req.GetPicks() {
		f.n.metrics.picksFromPeers.Add(1)
		push := provisional.FromPB(p)
		if i < len(ages) {
			push.Age = time.Duration(ages[i]) * time.Millisecond
		}
		if _, err := f.n.applyPush(p, push); err != nil {
			resp.PicksRefused++
			continue
		}
		resp.PicksApplied++
	}
}

// applyPush applies push (req as the store takes it) and then req's load
// report, if any, by provisional.Store.ApplyCarrying. A load report the
// load store has no room for is dropped (the store counts it refused)
// and logged; the push stands, and the picker's periodic reports,
// refused alike, tell it why.
func (n *Node) applyPush(req *pb.SharePicksRequest, push provisional.Push) (provisional.Result, error) {
	res, loadErr, err := n.picks.ApplyCarrying(req, push, n.pickers)
	if loadErr != nil && n.log != nil {
		n.log.Debug("raftnode: the load report a picks push carried was not held", "picker_id", req.GetPickerId(), "err", loadErr)
	}
	return res, err
}
