package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/metrics"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/raftnode"
	"github.com/inference-cache/inference-cache/turns"
)

// Tokenizer turns prompt text into token ids for a model (contract §5.1 key
// resolution step 3). It is defined here, at the consumer; the tokenizer
// package's Registry implements it from the models directory.
// EncodeContext must be safe for concurrent use; it returns an error when
// it has no tokenizer for modelID. It must stop early, with an error, once
// ctx ends (LookupRoute gives it the lookup's budget as a deadline) and
// once the ids exceed maxTokens: the lookup could not use them anyway, and
// a prompt of MaxPromptBytes can cost far more than the budget to encode.
// Errors wrapping tokenizer.ErrStopped and tokenizer.ErrTooManyTokens are
// told apart in the NO_HINT detail.
type Tokenizer interface {
	EncodeContext(ctx context.Context, modelID, text string, maxTokens int) ([]uint32, error)
}

// Backend is what the InferenceCache service needs of a replicated node,
// in raftnode's own types: a *raftnode.Node is one (NewNodeBackend);
// tests use fakes.
//
// Write methods return errors the service maps to gRPC codes with
// StatusFromError (raftnode's sentinels, or a *status.Status error that
// passes through unchanged).
type Backend interface {
	// Lookup answers req into res from the local index (never blocks on
	// the leader).
	Lookup(req *index.LookupRequest, res *index.Result)
	// Credit queues an LFU access credit for hashes of p (lossy, batched).
	// hashes may be reused by the caller after Credit returns.
	Credit(p index.Partition, hashes []uint64)
	// ReadState is how stale this node's answers may be (contract §8.4 reads).
	// It is cheap: it is called once per lookup.
	ReadState() raftnode.ReadState
	// Ready reports whether the node has loaded its state (snapshot and
	// log) and can answer.
	Ready() bool
	// Policy returns the policy in force (a copy).
	Policy() policy.Policy
	// Ingest commits events through the log and returns the applied index
	// and whether the request id was a duplicate (a retry). requestID is
	// the client's, "" when it sent none: the node makes the ids (contract §8
	// de-duplication), the service never does.
	Ingest(ctx context.Context, requestID string, evs []index.BlockEvent) (raftnode.WriteResult, error)
	// ReportStats commits replica stats through the log, with request ids
	// as Ingest.
	ReportStats(ctx context.Context, requestID string, st []index.ReplicaStats) (raftnode.WriteResult, error)
	// SetPolicy commits a validated policy and returns it with its version.
	SetPolicy(ctx context.Context, p policy.Policy) (policy.Policy, error)
}

// Config configures a Service.
type Config struct {
	// Backend is the node. Required.
	Backend Backend
	// Tokenizer resolves prompt_text; nil = prompt_text lookups answer
	// NO_HINT with DetailNoTokenizer.
	Tokenizer Tokenizer
	// Metrics receives the service's counters; nil = not recorded.
	Metrics *metrics.Metrics
	// Logger; nil = slog.Default().
	Logger *slog.Logger
	// Now is the wall clock for observed_at_ms defaults, skew checks and
	// the lookup's freshness (ranking at now); nil = time.Now. A clock
	// that keeps time.Now's monotonic reading keeps latencies and
	// budgets exact.
	Now func() time.Time
	// Admission bounds write work in flight (zero = the defaults).
	Admission AdmissionLimits
	// PickerLoad holds the pickers' load reports (contract §5.11); nil =
	// ReportPickerLoad answers UNIMPLEMENTED and lookups carry no
	// others_* load.
	PickerLoad PickerLoad
	// Positions holds the engine stream positions (contract §6.11); nil =
	// RecordStreamPositions and GetStreamPositions answer UNIMPLEMENTED.
	Positions Positions
	// Provisional holds the pickers' provisional residencies (contract
	// §5.12); nil = SharePicks answers UNIMPLEMENTED and lookups answer
	// from the confirmed index alone.
	Provisional Provisional
	// Turns orders the picks of several pickers at this node (contract
	// §5.13); nil = a lookup's take_turn is ignored (turn 0).
	Turns *turns.Table
	// TurnWait bounds a lookup's wait for its turn; 0 = turns.DefaultWait.
	TurnWait time.Duration
	// ClockTrusted reports whether Now may stamp writes (raftnode
	// Node.ClockTrusted: checked against the cluster's clocks, or not
	// ahead of the newest observation); while it is false writes are
	// refused with UNAVAILABLE so that a server started with a clock far
	// ahead stamps nothing in it. nil = always trusted.
	ClockTrusted func() bool
}

// policyRefresh is how long LookupRoute keeps its cached copy of the policy
// (for lookupTimeoutMs) before asking the node again. The index ranks with
// its own replicated copy, so this only delays a new lookup budget.
const policyRefresh = 500 * time.Millisecond

// Service implements inferencecache.v1.InferenceCache (contract §5, §6, §7) over a
// Backend.
type Service struct {
	pb.UnimplementedInferenceCacheServer

	node    Backend
	tok     Tokenizer
	metrics *metrics.Metrics
	log     *slog.Logger
	now     func() time.Time
	// clockTrusted: Config.ClockTrusted, or nil.
	clockTrusted func() bool
	admit        *admission
	pload        PickerLoad
	pos          Positions
	prov         Provisional
	turns        *turns.Table
	turnWait     time.Duration

	pol   atomic.Pointer[policy.Policy]
	polAt atomic.Int64 // unix ns of the cached policy
}

// NewService returns the InferenceCache service for cfg.Backend.
func NewService(cfg Config) *Service {
	s := &Service{node: cfg.Backend, tok: cfg.Tokenizer, metrics: cfg.Metrics, log: cfg.Logger, now: cfg.Now, clockTrusted: cfg.ClockTrusted, admit: newAdmission(cfg.Admission),
		pload: cfg.PickerLoad, pos: cfg.Positions, prov: cfg.Provisional, turns: cfg.Turns, turnWait: cfg.TurnWait}
	if s.turnWait <= 0 {
		s.turnWait = turns.DefaultWait
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// TurnStats are the counters of the node's turn table (contract §5.13);
// zero when lookups take no turns.
func (s *Service) TurnStats() turns.Stats {
	if s.turns == nil {
		return turns.Stats{}
	}
	return s.turns.Stats()
}

// policy returns the cached policy, refreshed every policyRefresh.
func (s *Service) policy(at time.Time) *policy.Policy {
	now := at.UnixNano()
	if p := s.pol.Load(); p != nil && now-s.polAt.Load() < int64(policyRefresh) {
		return p
	}
	p := s.node.Policy()
	s.pol.Store(&p)
	s.polAt.Store(now)
	return &p
}

func (s *Service) invalidatePolicy() { s.polAt.Store(0) }

func kindName(k index.EventKind) string {
	switch k {
	case index.Stored:
		return "stored"
	case index.Removed:
		return "removed"
	case index.Cleared:
		return "cleared"
	}
	return "unknown"
}

func pbKindName(k pb.BlockEvent_Kind) string {
	switch k {
	case pb.BlockEvent_STORED:
		return "stored"
	case pb.BlockEvent_REMOVED:
		return "removed"
	case pb.BlockEvent_CLEARED:
		return "cleared"
	}
	return "unknown"
}

// Ingest validates the events, rejects the invalid ones with reasons and
// commits the rest through the Raft log (contract §6.2). A request over a size
// limit is refused whole with INVALID_ARGUMENT; one that finds no room in
// the write admission bounds within AdmissionWait is refused with
// RESOURCE_EXHAUSTED and a RetryInfo (admission.go). With no valid event nothing
// is committed and applied_index is this node's current one. Every answer
// carries the server clock the events were checked against
// (server_time_ms) and how many were rejected for an observed_at_ms ahead
// of it (rejected_ahead_of_clock), so a caller can tell a clock problem
// from bad events without parsing reasons; it stays an answer, not an
// error, so the valid events of the batch are not lost to a retry.
func (s *Service) Ingest(ctx context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error) {
	resp, err := s.ingest(ctx, req)
	if err != nil {
		return nil, StatusFromError(err)
	}
	return resp, nil
}

// ingest is Ingest with its error as it came (a *RequestError, raftnode's,
// a status error), for IngestStream to tell a refusal from a failure by
// its type.
func (s *Service) ingest(ctx context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error) {
	var ahead uint32
	w, err := commitWrite(ctx, s, req, writeKind[index.BlockEvent]{
		commitName: "ingest", refusedName: "events",
		convert: func(start time.Time, nowMs int64) ([]index.BlockEvent, []*pb.Rejection, error) {
			return EventsFromPB(req, s.policy(start), nowMs)
		},
		rejected: func(rej []*pb.Rejection, nowMs int64) {
			for _, r := range rej {
				e := req.GetEvents()[r.EventIndex]
				s.metrics.IngestEvents(pbKindName(e.GetKind()), "rejected", 1)
				if AheadOfClock(e.GetObservedAtMs(), nowMs) {
					ahead++
				}
			}
		},
		commit: func(ctx context.Context, evs []index.BlockEvent) (raftnode.WriteResult, error) {
			return s.node.Ingest(ctx, req.GetRequestId(), evs)
		},
		count: func(evs []index.BlockEvent, outcome string) {
			for i := range evs {
				s.metrics.IngestEvents(kindName(evs[i].Kind), outcome, 1)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return &pb.IngestResponse{Accepted: w.accepted, Rejected: w.rejected, AppliedIndex: w.appliedIndex, Duplicate: w.duplicate,
		ServerTimeMs: w.nowMs, RejectedAheadOfClock: ahead}, nil
}

// WholeRequestRefused prefixes the one rejection IngestStream answers for a
// request refused whole (over a size limit); the rest names the limit.
const WholeRequestRefused = "whole request refused: "

// IngestStream answers each request with one response, in order. A request
// refused whole (over a size limit, bytes that are not an IngestRequest,
// or any error Ingest answers INVALID_ARGUMENT: a command the node or its
// state machine refused) is answered with accepted = 0 and one rejection
// (event_index 0) whose reason is WholeRequestRefused and the error's
// text, and the stream goes on. A failed commit (no leader, timeout) ends the
// stream with that status; the requests answered before it are committed,
// the ones after it are not (resend them, with their request ids).
func (s *Service) IngestStream(stream pb.InferenceCache_IngestStreamServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		var bad *undecodableError
		if errors.As(err, &bad) {
			// Bytes that are not an IngestRequest, framed correctly: refused
			// whole, and the stream goes on.
			resp := &pb.IngestResponse{AppliedIndex: s.node.ReadState().AppliedIndex,
				Rejected: []*pb.Rejection{{EventIndex: 0, Reason: WholeRequestRefused + bad.msg}}}
			if err := stream.Send(resp); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		resp, err := s.ingest(stream.Context(), req)
		if err != nil {
			reason, refused := refusal(err)
			if !refused {
				return StatusFromError(err)
			}
			// A request refused whole must not end the stream: the
			// requests behind it are valid and are owed their answers, in
			// order. The refusal travels as the response.
			resp = &pb.IngestResponse{AppliedIndex: s.node.ReadState().AppliedIndex,
				Rejected: []*pb.Rejection{{EventIndex: 0, Reason: WholeRequestRefused + reason}}}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// ErrClockUntrusted is the UNAVAILABLE a write gets from a server that
// started moments ago with a clock ahead of the newest observation and has
// not compared it with the cluster's yet (Config.ClockTrusted): retry, on
// this server or another.
var ErrClockUntrusted = status.Error(codes.Unavailable, "this server started moments ago with a clock ahead of the newest observation in its index and has not compared it with the cluster's yet; it stamps no write until it has: retry")

// checkClock is ErrClockUntrusted while the clock is not trusted.
func (s *Service) checkClock() error {
	if s.clockTrusted != nil && !s.clockTrusted() {
		return ErrClockUntrusted
	}
	return nil
}

// ReportReplicaStats validates replica stats and commits the valid entries
// through the log, on Ingest's path (commitWrite) and with its rules.
func (s *Service) ReportReplicaStats(ctx context.Context, req *pb.ReportReplicaStatsRequest) (*pb.ReportReplicaStatsResponse, error) {
	w, err := commitWrite(ctx, s, req, writeKind[index.ReplicaStats]{
		commitName: "stats", refusedName: "stats",
		convert: func(_ time.Time, nowMs int64) ([]index.ReplicaStats, []*pb.Rejection, error) {
			return StatsFromPB(req, nowMs)
		},
		rejected: func(rej []*pb.Rejection, _ int64) { s.metrics.IngestEvents("stats", "rejected", len(rej)) },
		commit: func(ctx context.Context, sts []index.ReplicaStats) (raftnode.WriteResult, error) {
			return s.node.ReportStats(ctx, req.GetRequestId(), sts)
		},
		count: func(sts []index.ReplicaStats, outcome string) { s.metrics.IngestEvents("stats", outcome, len(sts)) },
	})
	if err != nil {
		return nil, StatusFromError(err)
	}
	return &pb.ReportReplicaStatsResponse{Accepted: w.accepted, Rejected: w.rejected, AppliedIndex: w.appliedIndex, Duplicate: w.duplicate}, nil
}

// GetCachePolicy returns the policy in force on this node (contract §7.2). A
// leader that has not finished its post-election Barrier (it may not have
// applied entries committed in earlier terms yet, e.g. right after a
// restart) first waits for it, within the call's deadline, so the leader
// never answers an older policy than one already acknowledged (found by
// the chaos register check). Followers answer their local copy.
func (s *Service) GetCachePolicy(ctx context.Context, _ *pb.GetCachePolicyRequest) (*pb.CachePolicy, error) {
	for rs := s.node.ReadState(); rs.Leader && rs.Stale; rs = s.node.ReadState() {
		select {
		case <-ctx.Done():
			return nil, status.Error(codes.Unavailable, "leader has not applied the committed log yet; retry")
		case <-time.After(5 * time.Millisecond):
		}
	}
	return PolicyToPB(s.node.Policy()), nil
}

// SetCachePolicy validates the policy (a whole replacement, see
// PolicyFromPB), commits it through the log and returns it with the version
// the server set. An invalid knob is INVALID_ARGUMENT naming it.
func (s *Service) SetCachePolicy(ctx context.Context, req *pb.SetCachePolicyRequest) (*pb.CachePolicy, error) {
	p, err := PolicyFromPB(req.GetPolicy())
	if err == nil {
		err = wireField(p.CheckInput(), req.GetPolicy())
	}
	if err != nil {
		return nil, StatusFromError(err)
	}
	got, err := s.node.SetPolicy(ctx, p)
	if err != nil {
		return nil, StatusFromError(err)
	}
	s.invalidatePolicy()
	return PolicyToPB(got), nil
}
