package digestwait

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// fakeCL answers Digest from a function of the call count.
type fakeCL struct {
	pb.ClusterClient
	calls atomic.Int32
	ans   func(n int32) (*pb.DigestResponse, error)
}

func (f *fakeCL) Digest(context.Context, *pb.DigestRequest, ...grpc.CallOption) (*pb.DigestResponse, error) {
	return f.ans(f.calls.Add(1))
}

func TestWait(t *testing.T) {
	at := func(i, d uint64) *pb.DigestResponse { return &pb.DigestResponse{AppliedIndex: i, Digest: d} }
	fixed := func(r *pb.DigestResponse) *fakeCL {
		return &fakeCL{ans: func(int32) (*pb.DigestResponse, error) { return r, nil }}
	}
	// b lags two polls, then catches up.
	lagging := &fakeCL{ans: func(n int32) (*pb.DigestResponse, error) {
		if n < 3 {
			return at(4, 9), nil
		}
		return at(5, 7), nil
	}}
	down := &fakeCL{ans: func(int32) (*pb.DigestResponse, error) { return nil, errors.New("connection refused") }}

	got, err := Wait(context.Background(), []Member{{"a", fixed(at(5, 7))}, {"b", lagging}}, 5*time.Second, time.Millisecond)
	if err != nil || got.AppliedIndex != 5 || got.Digest != 7 || lagging.calls.Load() != 3 {
		t.Fatalf("converging: %v %v after %d calls", got, err, lagging.calls.Load())
	}
	for name, ms := range map[string][]Member{
		"digests differ": {{"a", fixed(at(5, 7))}, {"b", fixed(at(5, 8))}},
		"a node is down": {{"a", fixed(at(5, 7))}, {"b", down}},
		"no members":     nil,
	} {
		_, err := Wait(context.Background(), ms, 30*time.Millisecond, time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "did not converge") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	_, err = Wait(context.Background(), []Member{{"a", fixed(at(5, 7))}, {"b", down}}, 30*time.Millisecond, time.Millisecond)
	if !strings.Contains(err.Error(), "b: connection refused") || !strings.Contains(err.Error(), "a: 5/0000000000000007") {
		t.Errorf("error does not list what each node answered: %v", err)
	}
}
