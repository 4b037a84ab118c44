package observe

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
	ot "github.com/inference-cache/inference-cache/observe/observetest"
)

// posSink is a fakeSink that keeps stream positions, as the cluster does.
type posSink struct {
	fakeSink
	pmu sync.Mutex
	pos map[string]Position
}

func (s *posSink) StreamPositions(_ context.Context, ids []string) (map[string]Position, error) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	out := map[string]Position{}
	for _, id := range ids {
		if p, ok := s.pos[id]; ok {
			out[id] = p
		}
	}
	return out, nil
}

func (s *posSink) RecordStreamPositions(_ context.Context, req *pb.RecordStreamPositionsRequest) error {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if s.pos == nil {
		s.pos = map[string]Position{}
	}
	for _, p := range req.GetPositions() {
		s.pos[p.GetReplicaId()] = Position{Seq: p.GetSeq(), Hash: p.GetBatchHash()}
	}
	return nil
}

func (s *posSink) position(id string) (Position, bool) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	p, ok := s.pos[id]
	return p, ok
}

// A second subscriber on the same cluster resumes from the recorded
// position: it sends no CLEARED and does not resend what the cluster
// holds, and the engine's removal of a block stored before it started is
// translated (the replay rebuilt the map).
func TestLoopback_RestartedSubscriberResumesFromThePosition(t *testing.T) {
	p := publisher(t, true)
	sink := &posSink{}
	cfg := func() *Config {
		c := &Config{Engines: []EngineConfig{engineCfg(p, "e0")}}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, cancel := context.WithCancel(context.Background())
	s1 := New(cfg(), sink, Options{Metrics: NewMetrics(nil), Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	done := make(chan struct{})
	go func() { defer close(done); _ = s1.Run(ctx) }()
	if err := p.WaitSubscribed(t.Context(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	a := ot.Tokens(0, 8)
	mustPublish(t, p, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1, 2), nil, a, 4, nil, nil, nil)))
	sink.waitEvents(t, 2) // CLEARED (start), STORED
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		pos, ok := sink.position("e0")
		return ok && pos.Seq == 0, fmt.Sprintf("position %+v %v, want seq 0", pos, ok)
	})
	cancel()
	<-done
	mustPublish(t, p, ot.Batch(tTS, -1, ot.Removed(ot.Hashes(2), nil))) // while no subscriber runs

	_, m := startSubscriber(t, cfg(), sink)
	evs := sink.waitEvents(t, 3)
	if got, want := kinds(evs), []string{"CLEARED:e0", "STORED:e0", "REMOVED:e0"}; !equalStrings(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if got := evs[2].GetBlockHashes(); len(got) != 1 || got[0] != fps(t, a, 0)[1] {
		t.Fatalf("removed %x, want block 1's fingerprint %x", got, fps(t, a, 0)[1])
	}
	poll.Eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		return testutil.ToFloat64(m.Resumes.WithLabelValues("e0", "kept")) == 1, "no kept resume"
	})
	time.Sleep(100 * time.Millisecond)
	if evs := sink.snapshot(); len(evs) != 3 {
		t.Fatalf("events after the resume %v, want nothing more", kinds(evs))
	}
}

// A replica cleared after its position was queued (the engine removed
// from the configuration) leaves no position behind.
func TestForwarder_ClearAfterAPositionVoidsIt(t *testing.T) {
	sink := &posSink{}
	f := NewForwarder(sink, NewMetrics(nil), slog.New(slog.DiscardHandler), 0, 0)
	f.notePositions([]queued{
		{pos: &pb.StreamPosition{ReplicaId: "a", Seq: 5}},
		{pos: &pb.StreamPosition{ReplicaId: "b", Seq: 2}},
		{ev: &pb.BlockEvent{Kind: pb.BlockEvent_CLEARED, ReplicaId: "a"}},
	})
	f.flushPositions(context.Background(), true)
	if _, ok := sink.position("a"); ok {
		t.Fatal("a position queued before its replica's CLEARED was recorded")
	}
	if p, ok := sink.position("b"); !ok || p.Seq != 2 {
		t.Fatalf("b: %+v %v, want seq 2", p, ok)
	}
}
