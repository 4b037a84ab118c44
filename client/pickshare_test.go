package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/provisional"
)

type recordingSender struct {
	mu     sync.Mutex
	pushes []*pb.SharePicksRequest
	fail   bool
}

func (r *recordingSender) SharePicks(_ context.Context, req *pb.SharePicksRequest) (*pb.SharePicksResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return nil, errors.New("node down")
	}
	r.pushes = append(r.pushes, req)
	return &pb.SharePicksResponse{}, nil
}

func (r *recordingSender) got() []*pb.SharePicksRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*pb.SharePicksRequest(nil), r.pushes...)
}

// Picks and removals go out as deltas with increasing sequences; full
// states go out every interval, the first with every pick's hashes
// (within 0), the later ones asking for the picks made since the full
// state before the last; a failed push is counted, never retried.
func TestPickShare_DeltasFullStatesAndTheHashWindow(t *testing.T) {
	snd := &recordingSender{}
	var wmu sync.Mutex
	var windows []time.Duration
	live := func(within time.Duration) []provisional.Pick {
		wmu.Lock()
		windows = append(windows, within)
		wmu.Unlock()
		return []provisional.Pick{{ID: 1}}
	}
	s, err := StartPickShare(snd, live, PickShareConfig{PickerID: "gw", FullStateInterval: MinFullStateInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	k := provisional.Pick{ID: 9, Replica: "r1", Partition: provisional.Partition{Scheme: "vllm", Model: "m"}, Hashes: []uint64{1, 2}}
	s.Add(k)
	s.Remove(9)
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		adds, removes := 0, 0
		for _, p := range snd.got() {
			if !p.FullState {
				adds += len(p.Picks)
				removes += len(p.Removed)
			}
		}
		wmu.Lock()
		defer wmu.Unlock()
		return adds == 1 && removes == 1 && len(windows) >= 3, "waiting for the delta and three full states"
	})
	ps := snd.got()
	for i := 1; i < len(ps); i++ {
		if ps[i].Sequence <= ps[i-1].Sequence || ps[i].PickerId != "gw" {
			t.Fatalf("push %d: sequence %d after %d, picker %q", i, ps[i].Sequence, ps[i-1].Sequence, ps[i].PickerId)
		}
	}
	wmu.Lock()
	if windows[0] != 0 || windows[1] != 0 || windows[2] <= 0 {
		t.Errorf("hash windows %v: want 0, 0 (no full state two back yet), then the time since the full state before the last", windows)
	}
	wmu.Unlock()
	snd.mu.Lock()
	snd.fail = true
	snd.mu.Unlock()
	s.Add(k)
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		return s.Stats().Failed > 0, "no failed push counted"
	})
	if _, err := StartPickShare(snd, live, PickShareConfig{}); err == nil {
		t.Fatal("no picker id accepted")
	}
	if _, err := StartPickShare(snd, live, PickShareConfig{PickerID: "gw", FullStateInterval: time.Millisecond}); err == nil {
		t.Fatal("a 1 ms full state interval accepted")
	}
}
