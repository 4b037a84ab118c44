package observe

import (
	"context"
	"fmt"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// PositionStore is the cluster's record of engine stream positions
// (contract §6.11). A Sink that implements it lets streams resume after a
// subscriber restart (resume.go); one that does not starts every stream
// from empty.
type PositionStore interface {
	// StreamPositions returns the positions held for replicaIDs; a
	// replica without one is absent from the map.
	StreamPositions(ctx context.Context, replicaIDs []string) (map[string]Position, error)
	// RecordStreamPositions commits positions; call it only once the
	// events of the batches they name are acknowledged.
	RecordStreamPositions(ctx context.Context, req *pb.RecordStreamPositionsRequest) error
}

// Position recording and fetching.
const (
	// positionInterval is the least time between two position records:
	// a position older than the last batch applied only makes a resume
	// replay (and resend) a little more, so one write a second suffices.
	positionInterval = time.Second
	// positionFetchTimeout bounds a stream's wait for its position at
	// start; past it the stream starts from empty.
	positionFetchTimeout = 10 * time.Second
)

// StreamPositions implements PositionStore with client.Client.GetStreamPositions.
func (s *GRPCSink) StreamPositions(ctx context.Context, replicaIDs []string) (map[string]Position, error) {
	resp, err := s.c.GetStreamPositions(ctx, replicaIDs)
	if err != nil {
		return nil, fmt.Errorf("observe: GetStreamPositions: %w", err)
	}
	out := make(map[string]Position, len(resp.GetPositions()))
	for _, p := range resp.GetPositions() {
		out[p.GetReplicaId()] = Position{Seq: p.GetSeq(), Hash: p.GetBatchHash()}
	}
	return out, nil
}

// RecordStreamPositions implements PositionStore with client.Client.RecordStreamPositions.
func (s *GRPCSink) RecordStreamPositions(ctx context.Context, req *pb.RecordStreamPositionsRequest) error {
	if _, err := s.c.RecordStreamPositions(ctx, req); err != nil {
		return fmt.Errorf("observe: RecordStreamPositions: %w", err)
	}
	return nil
}

// EnqueuePosition queues the position of replica's stream after the
// events enqueued before it: the forwarder records it once those are
// acknowledged (at most every positionInterval). It blocks like Enqueue.
func (f *Forwarder) EnqueuePosition(ctx context.Context, replica string, p Position) error {
	select {
	case f.ch <- queued{pos: &pb.StreamPosition{ReplicaId: replica, Seq: p.Seq, BatchHash: p.Hash}}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notePositions keeps the latest position per replica of an acknowledged
// batch for the next record. A CLEARED queued after a position voids it
// (the cluster forgets a cleared replica's position, contract §6.11).
func (f *Forwarder) notePositions(batch []queued) {
	for _, q := range batch {
		if q.ev.GetKind() == pb.BlockEvent_CLEARED {
			delete(f.pendingPos, q.ev.GetReplicaId())
		}
		if q.pos != nil {
			if f.pendingPos == nil {
				f.pendingPos = map[string]*pb.StreamPosition{}
			}
			f.pendingPos[q.pos.ReplicaId] = q.pos
		}
	}
}

// flushPositions records the pending positions when positionInterval has
// passed since the last record (or force). A failure keeps them pending
// for the next try; the positions only make a later resume cheaper.
func (f *Forwarder) flushPositions(ctx context.Context, force bool) {
	ps, ok := f.sink.(PositionStore)
	if !ok || len(f.pendingPos) == 0 || !force && f.now().Sub(f.posRecorded) < positionInterval {
		return
	}
	req := &pb.RecordStreamPositionsRequest{Positions: make([]*pb.StreamPosition, 0, len(f.pendingPos))}
	for _, p := range f.pendingPos {
		req.Positions = append(req.Positions, p)
	}
	f.posRecorded = f.now()
	if err := ps.RecordStreamPositions(ctx, req); err != nil {
		if ctx.Err() == nil {
			f.log.Debug("stream positions not recorded; retrying with the next batch", "positions", len(req.Positions), "err", err)
		}
		return
	}
	clear(f.pendingPos)
}
