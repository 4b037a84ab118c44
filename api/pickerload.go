package api

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/pickerload"
)

// PickerLoad is the pickers' shared in-flight load as the service needs
// it (contract §5.11); *raftnode.Node is one. It is soft state, kept apart
// from Backend: nothing of it goes through the Raft log.
type PickerLoad interface {
	// SharePickerLoad holds a picker's report and passes it on to the
	// other nodes without waiting on them; errors wrap
	// pickerload.ErrInvalid (a *pickerload.FieldError) or
	// pickerload.ErrFull.
	SharePickerLoad(req *pb.ReportPickerLoadRequest) (pickerload.Outcome, error)
	// PickerLoadView reads the held reports at this instant.
	PickerLoadView() pickerload.View
}

// ErrNoPickerLoad is ReportPickerLoad's answer on a service built
// without a PickerLoad (Config.PickerLoad nil).
var ErrNoPickerLoad = status.Error(codes.Unimplemented, "this server holds no picker load (built without Config.PickerLoad)")

// MaxSettledTurns bounds ReportPickerLoadRequest.settled_turns (contract
// §5.13): a picker settles one turn per decision, and reports at each.
const MaxSettledTurns = 1024

// ReportPickerLoad holds one picker's in-flight load per replica
// (contract §5.11): it replaces the picker's previous report on this node
// and is passed on to every other node, asynchronously, never through
// the Raft log. The answer's accepted is the replicas recorded, 0 with
// superseded when the node holds a report of the picker with the same or
// a higher sequence. Errors (StatusFromError): INVALID_ARGUMENT naming the
// field at fault, RESOURCE_EXHAUSTED naming the node's limit of (picker,
// replica) entries. settled_turns end the picker's turns at this node
// (contract §5.13), once the report is held.
func (s *Service) ReportPickerLoad(_ context.Context, req *pb.ReportPickerLoadRequest) (*pb.ReportPickerLoadResponse, error) {
	if s.pload == nil {
		return nil, ErrNoPickerLoad
	}
	if n := len(req.GetSettledTurns()); n > MaxSettledTurns {
		return nil, status.Errorf(codes.InvalidArgument, "settled_turns: %d turns, at most %d", n, MaxSettledTurns)
	}
	o, err := s.pload.SharePickerLoad(req)
	if s.turns != nil && len(req.GetSettledTurns()) > 0 {
		// After the report is held: a lookup waiting on one of these
		// turns then reads the load (and the picks pushed before it). A
		// refused report ends its turns too.
		s.turns.Settle(req.GetPickerId(), req.GetSettledTurns())
	}
	if err != nil {
		return nil, StatusFromError(err)
	}
	if o == pickerload.Ignored {
		return &pb.ReportPickerLoadResponse{Superseded: true}, nil
	}
	return &pb.ReportPickerLoadResponse{Accepted: uint32(len(req.GetLoads()))}, nil
}

// fillOthers sets others_* of resp from the other pickers' reports
// (pickerload.View.FillOthers).
func (s *Service) fillOthers(req *pb.LookupRouteRequest, resp *pb.LookupRouteResponse) {
	if s.pload == nil {
		return
	}
	s.pload.PickerLoadView().FillOthers(resp, req.GetPickerId())
}
