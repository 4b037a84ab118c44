package api

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/index"
	"github.com/inference-cache/inference-cache/provisional"
)

// Provisional is the pickers' provisional residencies as the service
// needs them (contract §5.12); *raftnode.Node is one. Soft state, kept
// apart from Backend: nothing of it goes through the Raft log.
type Provisional interface {
	// SharePicks applies a picker's push, then its load report (load),
	// and passes it on to the other nodes without waiting on them;
	// errors wrap provisional.ErrInvalid (a *provisional.FieldError),
	// provisional.ErrFull, pickerload.ErrInvalid (a
	// *pickerload.FieldError, its field under "load.") or
	// pickerload.ErrFull.
	SharePicks(req *pb.SharePicksRequest) (provisional.Result, error)
	// Provisional is the store: lookups read it (At) and drop what the
	// confirmed index covers (Confirm).
	Provisional() *provisional.Store
}

// ErrNoProvisional is SharePicks' answer on a service built without a
// Provisional (Config.Provisional nil).
var ErrNoProvisional = status.Error(codes.Unimplemented, "this server holds no provisional residencies (built without Config.Provisional)")

// SharePicks records a picker's picks as provisional residencies
// (contract §5.12) on this node and passes the push on to every other
// node, asynchronously, never through the Raft log. Its load report
// (load), if any, is held after its picks, and its settled_turns end the
// picker's turns at this node (contract §5.13). The answer counts
// the picks added and removed; superseded when it is a full state not
// newer than the last one held of the picker. A load report is taken in
// any push (the gateway sends one with new picks); one the load store has
// no room for is dropped and the push stands. Errors (StatusFromError):
// INVALID_ARGUMENT naming the field at fault (a load report's under
// "load.") and its limit, RESOURCE_EXHAUSTED naming the node's limit of
// (pick, block) entries (nothing held is lost).
func (s *Service) SharePicks(_ context.Context, req *pb.SharePicksRequest) (*pb.SharePicksResponse, error) {
	if s.prov == nil {
		return nil, ErrNoProvisional
	}
	if n := len(req.GetLoad().GetSettledTurns()); n > MaxSettledTurns {
		return nil, status.Errorf(codes.InvalidArgument, "load.settled_turns: %d turns, at most %d", n, MaxSettledTurns)
	}
	res, err := s.prov.SharePicks(req)
	if s.turns != nil && len(req.GetLoad().GetSettledTurns()) > 0 {
		// After the picks and the load are held: a lookup waiting on
		// one of these turns reads both. A refused push ends its turns
		// too.
		s.turns.Settle(req.GetPickerId(), req.GetLoad().GetSettledTurns())
	}
	if err != nil {
		return nil, StatusFromError(err)
	}
	return &pb.SharePicksResponse{Added: uint32(res.Added), Removed: uint32(res.Removed), Superseded: res.Superseded}, nil
}

// mergeProvisional folds the provisional residencies on the lookup's
// chain into resp (provisional.Merge: a deeper provisional match makes a
// hint provisional; an answer without a prefix match becomes one), cut
// to the request's max_replicas (policyMax when 0), and drops the picks
// the confirmed hints cover: the engines' events confirmed them.
func (s *Service) mergeProvisional(req *pb.LookupRouteRequest, res *index.Result, resp *pb.LookupRouteResponse, policyMax uint32) {
	if s.prov == nil || len(res.Chain) == 0 {
		return
	}
	part := provisional.Partition{Scheme: req.GetHashScheme(), Model: req.GetModelId(), Tenant: req.GetTenantId(), Adapter: req.GetAdapterId()}
	limit := req.GetMaxReplicas()
	if limit == 0 {
		limit = policyMax
	}
	s.prov.Provisional().MergeInto(resp, part, res.Chain, int(limit))
}
