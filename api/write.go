package api

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/raftnode"
)

// writeKind is what commitWrite needs to know of one kind of write request
// (Ingest's block events, ReportReplicaStats' replica stats), E being the
// kind's valid entry.
type writeKind[E any] struct {
	// commitName names the write in the commit metrics ("ingest",
	// "stats"); refusedName names it when it is refused whole ("events",
	// "stats").
	commitName, refusedName string
	// convert validates and converts the request against the server
	// clock nowMs (unix ms), read at start: the valid entries in request
	// order, one rejection per invalid entry, or a *RequestError refusing
	// the request whole (contract §6, 9).
	convert func(start time.Time, nowMs int64) ([]E, []*pb.Rejection, error)
	// rejected counts the rejections in metrics.
	rejected func(rej []*pb.Rejection, nowMs int64)
	// commit commits the valid entries through the log under the
	// client's request id ("" = the node makes one).
	commit func(ctx context.Context, es []E) (raftnode.WriteResult, error)
	// count counts entries in metrics with an outcome, "accepted" or
	// "failed".
	count func(es []E, outcome string)
}

// written is a write request's outcome as its response reports it.
type written struct {
	// nowMs is the server clock the entries were checked against.
	nowMs    int64
	rejected []*pb.Rejection
	accepted uint32
	// appliedIndex is the write's log index, or this node's applied
	// index when nothing was committed; duplicate: the request id had
	// already been applied (contract §8).
	appliedIndex uint64
	duplicate    bool
}

// commitWrite is the one path of a write request: refused with
// ErrClockUntrusted while the clock is not trusted, then admitted within
// the write bounds (admission.go: RESOURCE_EXHAUSTED when there is no
// room), converted, and its valid entries committed; with no valid entry
// nothing is committed. Its errors are as they came (a *RequestError,
// raftnode's, a status error): callers map them with StatusFromError.
func commitWrite[E any](ctx context.Context, s *Service, req proto.Message, k writeKind[E]) (written, error) {
	start := time.Now()
	if err := s.checkClock(); err != nil {
		return written{}, err
	}
	done, err := s.admit.acquire(ctx, int64(proto.Size(req)))
	if err != nil {
		s.metrics.AdmissionRefused()
		return written{}, err
	}
	defer done()
	w := written{nowMs: s.now().UnixMilli()}
	es, rej, err := k.convert(start, w.nowMs)
	if err != nil {
		s.metrics.IngestRefused(k.refusedName)
		return written{}, err
	}
	w.rejected = rej
	k.rejected(rej, w.nowMs)
	if len(es) == 0 {
		w.appliedIndex = s.node.ReadState().AppliedIndex
		return w, nil
	}
	wr, err := k.commit(ctx, es)
	s.metrics.CommitDone(k.commitName, time.Since(start), err == nil)
	if err != nil {
		k.count(es, "failed")
		return written{}, err
	}
	k.count(es, "accepted")
	w.appliedIndex, w.duplicate, w.accepted = wr.Index, wr.Duplicate, uint32(len(es))
	return w, nil
}
