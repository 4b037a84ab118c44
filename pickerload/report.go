package pickerload

import (
	"errors"
	"fmt"
	"time"

	"github.com/inference-cache/inference-cache/ident"
)

// Limits and defaults of a report (contract §5.11, §9).
const (
	// MaxPickerIDBytes bounds Report.PickerID.
	MaxPickerIDBytes = 128
	// MaxReplicaIDBytes bounds ReplicaLoad.ReplicaID: the index's bound on
	// every id (api.MaxIDBytes).
	MaxReplicaIDBytes = 256
	// DefaultInterval is the report interval assumed when a report gives
	// none (interval_ms 0): the SDK's default, short enough that another
	// picker sees a load change within about 100 ms.
	DefaultInterval = 50 * time.Millisecond
	// MinInterval and MaxInterval bound Report.Interval. Below 10 ms the
	// reports cost more than the freshness they buy; past a minute a dead
	// gateway's load would linger for two minutes.
	MinInterval = 10 * time.Millisecond
	MaxInterval = time.Minute
	// ExpiryIntervals is how many of its intervals a report is held after
	// it arrived: one lost report does not drop a live picker's load, and a
	// stopped picker's load is gone within two intervals.
	ExpiryIntervals = 2
)

// ErrInvalid is wrapped by every *FieldError: the report breaks a rule of
// its own (a missing or oversize id, an interval out of bounds). Sending
// it again is refused again.
var ErrInvalid = errors.New("invalid picker load report")

// FieldError names the field of a report at fault, as the wire names it
// (e.g. "loads[3].replica_id"), and the rule it breaks. It wraps
// ErrInvalid.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// ReplicaLoad is one picker's in-flight load on one replica
// (inferencecache.v1.PickerReplicaLoad).
type ReplicaLoad struct {
	// ReplicaID names the replica as the picker names its backends (the
	// subscriber's replica_id).
	ReplicaID string
	// PrefillingRequests are the requests the picker routed there that
	// have not produced their first token; PrefillTokens their uncached
	// prompt tokens; RunningRequests the requests routed there that have
	// not finished (prefilling ones included).
	PrefillingRequests uint32
	PrefillTokens      uint64
	RunningRequests    uint32
}

// Report is one picker's whole in-flight load
// (inferencecache.v1.ReportPickerLoadRequest). It replaces everything
// held for PickerID: a replica left out has no load from this picker.
type Report struct {
	// PickerID names the picker: required, at most MaxPickerIDBytes,
	// unique among the pickers of the cluster; like every id (contract
	// §9.2) without control or invisible format characters, not blank.
	PickerID string
	// Sequence increases with every report of the picker (at least 1); a
	// report whose sequence is not above the one held is ignored, unless
	// the one held has expired (a picker restarted under the same id).
	Sequence uint64
	// Interval is the picker's report interval; 0 = DefaultInterval, else
	// MinInterval to MaxInterval. The report expires ExpiryIntervals of
	// them after it arrives.
	Interval time.Duration
	// Loads are the replicas the picker has load on, each at most once.
	Loads []ReplicaLoad
	// Age is how long ago the report first reached a node of the cluster
	// (0 for a report from the picker itself; a peer's queue delay for one
	// passed on): its expiry is dated from then, so a dead picker's load
	// is gone from every node within ExpiryIntervals intervals of its last
	// report reaching the cluster, however late a slow peer got it.
	Age time.Duration
}

// interval is r's interval with the default applied.
func (r *Report) interval() time.Duration {
	if r.Interval == 0 {
		return DefaultInterval
	}
	return r.Interval
}

// Validate checks r against the rules of Report, returning a *FieldError
// naming the first field at fault (wire names) and the limit.
func (r *Report) Validate() error {
	switch {
	case r.PickerID == "":
		return &FieldError{"picker_id", "required (a name unique to the reporting picker)"}
	case len(r.PickerID) > MaxPickerIDBytes:
		return &FieldError{"picker_id", fmt.Sprintf("%d bytes, over the limit of %d", len(r.PickerID), MaxPickerIDBytes)}
	case ident.Problem(r.PickerID) != "":
		return &FieldError{"picker_id", ident.Problem(r.PickerID)}
	case r.Sequence == 0:
		return &FieldError{"sequence", "required: at least 1, increasing with every report of the picker"}
	case r.Interval < 0, r.Interval != 0 && (r.Interval < MinInterval || r.Interval > MaxInterval):
		return &FieldError{"interval_ms", fmt.Sprintf("%d: want 0 (the default, %d) or %d to %d",
			r.Interval.Milliseconds(), DefaultInterval.Milliseconds(), MinInterval.Milliseconds(), MaxInterval.Milliseconds())}
	}
	var seen map[string]int
	if len(r.Loads) > 8 {
		seen = make(map[string]int, len(r.Loads))
	}
	for i := range r.Loads {
		id := r.Loads[i].ReplicaID
		switch {
		case id == "":
			return &FieldError{fmt.Sprintf("loads[%d].replica_id", i), "required"}
		case len(id) > MaxReplicaIDBytes:
			return &FieldError{fmt.Sprintf("loads[%d].replica_id", i), fmt.Sprintf("%d bytes, over the limit of %d", len(id), MaxReplicaIDBytes)}
		case ident.Problem(id) != "":
			return &FieldError{fmt.Sprintf("loads[%d].replica_id", i), ident.Problem(id)}
		}
		first := -1
		if seen != nil {
			if j, ok := seen[id]; ok {
				first = j
			} else {
				seen[id] = i
			}
		} else {
			for j := 0; j < i; j++ {
				if r.Loads[j].ReplicaID == id {
					first = j
					break
				}
			}
		}
		if first >= 0 {
			return &FieldError{fmt.Sprintf("loads[%d].replica_id", i), fmt.Sprintf("%q repeats loads[%d]: give each replica once", id, first)}
		}
	}
	return nil
}
