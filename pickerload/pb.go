package pickerload

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// FromPB converts a ReportPickerLoadRequest (no validation: Put
// validates). interval_ms keeps its value, 0 meaning the default.
func FromPB(req *pb.ReportPickerLoadRequest) Report {
	r := Report{PickerID: req.GetPickerId(), Sequence: req.GetSequence(),
		Interval: time.Duration(req.GetIntervalMs()) * time.Millisecond, Loads: make([]ReplicaLoad, len(req.GetLoads()))}
	for i, l := range req.GetLoads() {
		r.Loads[i] = ReplicaLoad{ReplicaID: l.GetReplicaId(), PrefillingRequests: l.GetPrefillingRequests(),
			PrefillTokens: l.GetPrefillTokens(), RunningRequests: l.GetRunningRequests()}
	}
	return r
}

// ToPB converts a Report to its wire form (an interval is sent in whole
// milliseconds).
func ToPB(r *Report) *pb.ReportPickerLoadRequest {
	out := &pb.ReportPickerLoadRequest{PickerId: r.PickerID, Sequence: r.Sequence, IntervalMs: uint32(r.Interval.Milliseconds()),
		Loads: make([]*pb.PickerReplicaLoad, len(r.Loads))}
	slab := make([]pb.PickerReplicaLoad, len(r.Loads))
	for i := range r.Loads {
		l := &r.Loads[i]
		slab[i] = pb.PickerReplicaLoad{ReplicaId: l.ReplicaID, PrefillingRequests: l.PrefillingRequests,
			PrefillTokens: l.PrefillTokens, RunningRequests: l.RunningRequests}
		out.Loads[i] = &slab[i]
	}
	return out
}

// FillOthers sets others_* of every entry of resp.Loads from the reports
// of every picker but asker ("" = every picker; contract §5.11), and adds
// an entry for each replica named by a hint that has no entry (no fresh
// stats) but has other pickers' load, keeping resp.Loads sorted by
// replica id. The view does not know which replicas serve the request's
// model; a hint says the replica does, which bounds the answer to
// replicas the asker may route to. The one rule a node's lookups and a
// simulation of them run.
func (v View) FillOthers(resp *pb.LookupRouteResponse, asker string) {
	for _, l := range resp.Loads {
		setOthers(l, v.Others(asker, l.ReplicaId))
	}
	added := false
	for _, h := range resp.Replicas {
		id := h.GetReplicaId()
		if slices.ContainsFunc(resp.Loads, func(l *pb.ReplicaLoad) bool { return l.ReplicaId == id }) {
			continue
		}
		if sum := v.Others(asker, id); sum.Pickers > 0 {
			l := &pb.ReplicaLoad{ReplicaId: id}
			setOthers(l, sum)
			resp.Loads = append(resp.Loads, l)
			added = true
		}
	}
	if added {
		slices.SortFunc(resp.Loads, func(a, b *pb.ReplicaLoad) int { return strings.Compare(a.ReplicaId, b.ReplicaId) })
	}
}

func setOthers(l *pb.ReplicaLoad, sum Sum) {
	l.OthersPrefillingRequests, l.OthersPrefillTokens, l.OthersRunningRequests, l.OthersPickers =
		sum.PrefillingRequests, sum.PrefillTokens, sum.RunningRequests, sum.Pickers
}

// FromPush is the load report a picks push carries (contract §5.13), nil
// when it carries none, its picker id the push's when empty. Errors are
// *FieldError naming the field under "load.": a picker id other than the
// push's, or the report breaking a rule of its own (Report.Validate).
func FromPush(req *pb.SharePicksRequest) (*Report, error) {
	l := req.GetLoad()
	if l == nil {
		return nil, nil
	}
	r := FromPB(l)
	if r.PickerID == "" {
		r.PickerID = req.GetPickerId()
	}
	if r.PickerID != req.GetPickerId() {
		return nil, &FieldError{Field: "load.picker_id", Msg: fmt.Sprintf("%q, not the push's picker_id %q", r.PickerID, req.GetPickerId())}
	}
	if err := r.Validate(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			return nil, &FieldError{Field: "load." + fe.Field, Msg: fe.Msg}
		}
		return nil, err
	}
	return &r, nil
}
