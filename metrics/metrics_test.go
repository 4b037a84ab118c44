package metrics

import (
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// LookupCounts reads back what LookupDone counted, by reason code name,
// without zeros; an out-of-range code counts as UNKNOWN.
func TestLookupCounts_ByReasonName(t *testing.T) {
	m := New()
	for _, r := range []int32{1, 1, 0, 99} {
		m.LookupDone(r, time.Microsecond)
	}
	got := m.LookupCounts()
	want := map[string]uint64{pb.ReasonCode(1).String(): 2, pb.ReasonCode(0).String(): 1, "UNKNOWN": 1}
	if len(got) != len(want) {
		t.Fatalf("LookupCounts = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("LookupCounts = %v, want %v", got, want)
		}
	}
	var nilM *Metrics
	if nilM.LookupCounts() != nil {
		t.Fatal("nil Metrics has counts")
	}
}
