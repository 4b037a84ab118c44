package raftnode

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/pickerload"
	"github.com/inference-cache/inference-cache/raftnode/forwardpb"
)

// Constants of the load sharing between nodes (contract §5.11), with the
// reason for each value.
const (
	// shareQueue bounds the reports waiting to be sent to one peer. At
	// the default 50 ms interval a peer that stops answering fills it in
	// a few seconds of a handful of pickers; past it reports to that peer
	// are dropped (a report is worth nothing 100 ms later anyway).
	shareQueue = 256
	// shareBatch caps the reports taken from a peer's queue at once.
	shareBatch = 64
	// shareCallBytes caps the encoded reports of one ShareLoad call (a
	// report larger than it goes alone): a quarter of the peer server's
	// 16 MiB message limit (api.MaxMessageBytes), so that a backlog of
	// large reports is never refused whole by the peer.
	shareCallBytes = 4 << 20
	// shareTimeout bounds one ShareLoad call: a report older than two
	// default intervals has expired at the receiver already.
	shareTimeout = 250 * time.Millisecond
	// shareSweep is how often expired reports are dropped (reads ignore
	// them at once; this frees their memory and counts them).
	shareSweep = pickerload.DefaultInterval
)

// peerShare is the queue of reports to one peer's gRPC address, drained
// by one goroutine, so a slow or dead peer never delays the others nor
// the picker that reported.
type peerShare struct {
	addr string
	ch   chan queuedShare
}

// queuedShare is a load report (r) or a provisional picks push (p)
// waiting for a peer, and when this node got it.
type queuedShare struct {
	r  *pb.ReportPickerLoadRequest
	p  *pb.SharePicksRequest
	at time.Time
}

// shareState is the node's side of load sharing.
type shareState struct {
	mu     sync.Mutex
	peers  map[string]*peerShare // by gRPC address
	closed bool                  // shutdown began: no new sender
	wg     sync.WaitGroup        // the senders
}

// PickerLoad returns the node's store of the pickers' load reports
// (soft state: what pickers sent to this node or to its peers).
func (n *Node) PickerLoad() *pickerload.Store { return n.pickers }

// PickerLoadView is the store read at this instant (lookups:
// pickerload.View.Others).
func (n *Node) PickerLoadView() pickerload.View { return n.pickers.At() }

// SharePickerLoad holds a report a picker sent to this node (contract
// §5.11) and, when it is stored (not an older or repeated sequence),
// queues it for every other node that gossip shows alive. It never waits
// on a peer: a peer whose queue is full misses the report (counted in
// Metrics.PickerReportsDropped). Errors are the store's (a
// *pickerload.FieldError wrapping pickerload.ErrInvalid, or
// pickerload.ErrFull); nothing is passed on then.
func (n *Node) SharePickerLoad(req *pb.ReportPickerLoadRequest) (pickerload.Outcome, error) {
	n.metrics.pickerReports.Add(1)
	o, err := n.pickers.Put(pickerload.FromPB(req))
	if err != nil || o != pickerload.Stored {
		return o, err
	}
	n.fanOut(queuedShare{r: req, at: time.Now()})
	return o, nil
}

// livePeers are the gRPC addresses of the other nodes gossip shows
// alive: the nodes a push must reach besides this one.
func (n *Node) livePeers() []string {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	peers := make([]string, 0, len(n.members))
	for id, m := range n.members {
		if id != n.cfg.NodeID && m.alive && m.meta.GRPC != "" {
			peers = append(peers, m.meta.GRPC)
		}
	}
	return peers
}

// fanOut queues item for every alive peer with a gRPC address.
func (n *Node) fanOut(item queuedShare) { n.fanOutTo(n.livePeers(), item) }

// fanOutTo queues item for each of peers (gRPC addresses).
func (n *Node) fanOutTo(peers []string, item queuedShare) {
	if n.shuttingDown() {
		return
	}
	for _, addr := range peers {
		q := n.peerShare(addr)
		if q == nil {
			return
		}
		select {
		case q.ch <- item:
		default:
			if item.p != nil {
				n.metrics.picksDropped.Add(1)
			} else {
				n.metrics.pickerDropped.Add(1)
			}
		}
	}
}

// peerShare returns the queue of addr, starting its sender the first
// time (nil once the node is shutting down).
func (n *Node) peerShare(addr string) *peerShare {
	s := &n.share
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.peers[addr]; q != nil {
		return q
	}
	if s.closed {
		return nil
	}
	if s.peers == nil {
		s.peers = map[string]*peerShare{}
	}
	q := &peerShare{addr: addr, ch: make(chan queuedShare, shareQueue)}
	s.peers[addr] = q
	s.wg.Add(1)
	go n.sendShares(q)
	return q
}

// sendShares sends q's reports and picks pushes to its peer until
// shutdown, taking up to shareBatch from the queue at once: the picks
// pushes first (a pick is worth most in its first milliseconds: contract
// §5.12), then the reports in calls of at most shareCallBytes
// (shareCalls). A failed call drops its reports: the picker's next
// report supersedes them, and its next full state repairs lost picks.
func (n *Node) sendShares(q *peerShare) {
	defer n.share.wg.Done()
	batch := make([]*pb.ReportPickerLoadRequest, 0, shareBatch)
	picks := make([]*pb.SharePicksRequest, 0, shareBatch)
	arrived := make(map[any]time.Time, shareBatch)
	take := func(s queuedShare) {
		if s.p != nil {
			picks = append(picks, s.p)
			arrived[s.p] = s.at
			return
		}
		batch = append(batch, s.r)
		arrived[s.r] = s.at
	}
	for {
		select {
		case <-n.shutdownCh:
			return
		case s := <-q.ch:
			clear(arrived)
			batch, picks = batch[:0], picks[:0]
			take(s)
		}
	drain:
		for len(batch)+len(picks) < shareBatch {
			select {
			case s := <-q.ch:
				take(s)
			default:
				break drain
			}
		}
		n.sharePicksTo(q.addr, picks, arrived)
		calls := shareCalls(batch, shareCallBytes)
		for i, call := range calls {
			if err := n.shareTo(q.addr, call, nil, arrived); err != nil {
				// The peer is down or slow: the batch's other calls would
				// wait on it too (and hold shutdown), so they are dropped
				// with this one; the pickers' next reports follow.
				dropped := 0
				for _, c := range calls[i:] {
					dropped += len(c)
				}
				n.metrics.pickerDropped.Add(uint64(dropped))
				n.log.Debug("raftnode: picker load not passed on to a peer; its next report will be", "peer", q.addr, "reports", dropped, "err", err)
				break
			}
			n.metrics.pickerForwarded.Add(uint64(len(call)))
		}
	}
}

// shareCalls splits the reports taken from a peer's queue into ShareLoad
// calls: only each picker's report of the highest sequence is kept (the
// peer would ignore the others: contract §5.11), in queue order, and a
// call carries reports of at most maxBytes encoded, or a single report
// larger than that. Superseded reports are left out of the metrics
// (neither forwarded nor dropped).
func shareCalls(batch []*pb.ReportPickerLoadRequest, maxBytes int) [][]*pb.ReportPickerLoadRequest {
	latest := make(map[string]int, len(batch)) // picker → index in batch of its newest report
	for i, r := range batch {
		if j, ok := latest[r.GetPickerId()]; !ok || r.GetSequence() > batch[j].GetSequence() {
			latest[r.GetPickerId()] = i
		}
	}
	var calls [][]*pb.ReportPickerLoadRequest
	var cur []*pb.ReportPickerLoadRequest
	size := 0
	for i, r := range batch {
		if latest[r.GetPickerId()] != i {
			continue
		}
		sz := proto.Size(r)
		if len(cur) > 0 && size+sz > maxBytes {
			calls = append(calls, cur)
			cur, size = nil, 0
		}
		cur = append(cur, r)
		size += sz
	}
	if len(cur) > 0 {
		calls = append(calls, cur)
	}
	return calls
}

// shareTo makes one ShareLoad call to addr with reports and picks
// pushes, each with its age since this node received it (arrived).
func (n *Node) shareTo(addr string, batch []*pb.ReportPickerLoadRequest, picks []*pb.SharePicksRequest, arrived map[any]time.Time) error {
	cc, err := n.dial(addr)
	if err != nil {
		return err
	}
	now := time.Now()
	age := func(k any) uint32 { return uint32(min(max(0, now.Sub(arrived[k]).Milliseconds()), math.MaxUint32)) }
	req := &forwardpb.ShareLoadRequest{FromNode: n.cfg.NodeID, Reports: batch, Picks: picks}
	if len(batch) > 0 {
		req.AgesMs = make([]uint32, len(batch))
		for i, r := range batch {
			req.AgesMs[i] = age(r)
		}
	}
	if len(picks) > 0 {
		req.PicksAgesMs = make([]uint32, len(picks))
		for i, p := range picks {
			req.PicksAgesMs[i] = age(p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), shareTimeout)
	defer cancel()
	_, err = forwardpb.NewForwardClient(cc).ShareLoad(ctx, req)
	return err
}

// dial returns the node's connection to a peer's gRPC address, made on
// first use with Config.DialOptions (ErrShutdown once shutting down).
func (n *Node) dial(addr string) (*grpc.ClientConn, error) {
	n.connsMu.Lock()
	defer n.connsMu.Unlock()
	select {
	case <-n.shutdownCh:
		return nil, ErrShutdown
	default:
	}
	cc := n.conns[addr]
	if cc == nil {
		opts := n.cfg.DialOptions
		if opts == nil {
			opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		}
		var err error
		cc, err = grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, fmt.Errorf("%w: dial %s: %v", ErrForward, addr, err)
		}
		n.conns[addr] = cc
	}
	return cc, nil
}

// ShareLoad stores reports a peer passes on, never passing them further
// (each node fans out only what pickers sent to it, so a report reaches
// every node in one hop and never loops).
func (f *forwardServer) ShareLoad(_ context.Context, req *forwardpb.ShareLoadRequest) (*forwardpb.ShareLoadResponse, error) {
	resp := &forwardpb.ShareLoadResponse{}
	ages := req.GetAgesMs()
	for i, r := range req.GetReports() {
		f.n.metrics.pickerFromPeers.Add(1)
		rep := pickerload.FromPB(r)
		if i < len(ages) {
			rep.Age = time.Duration(ages[i]) * time.Millisecond
		}
		o, err := f.n.pickers.Put(rep)
		switch {
		case err != nil:
			resp.Refused++
		case o == pickerload.Ignored:
			resp.Ignored++
		default:
			resp.Stored++
		}
	}
	f.applyPeerPicks(req, resp)
	return resp, nil
}

// stopShares waits for the senders to end once shutdownCh is closed,
// and keeps new ones from starting.
func (n *Node) stopShares() {
	n.share.mu.Lock()
	n.share.closed = true
	n.share.mu.Unlock()
	n.share.wg.Wait()
}

// sweepPickerLoad drops expired reports every shareSweep until shutdown.
func (n *Node) sweepPickerLoad() {
	defer n.wg.Done()
	t := time.NewTicker(shareSweep)
	defer t.Stop()
	sweeps := 0
	for {
		select {
		case <-n.shutdownCh:
			return
		case <-t.C:
			n.pickers.Sweep()
			if sweeps++; sweeps%picksSweepEvery == 0 {
				n.picks.Sweep()
			}
		}
	}
}
