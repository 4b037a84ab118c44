package pickerload

import (
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
