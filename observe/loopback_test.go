package observe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/syncbuf"
	ot "github.com/inference-cache/inference-cache/observe/observetest"
)

// fakeSink records what reaches the cluster; failN makes the first N
// Ingest calls fail (cluster unavailable).
type fakeSink struct {
	mu     sync.Mutex
	events []*pb.BlockEvent
	reqIDs []string
	stats  []*pb.ReplicaStats
	failN  int
	calls  int
}

func (f *fakeSink) Ingest(ctx context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.reqIDs = append(f.reqIDs, req.GetRequestId())
	if f.failN > 0 {
		f.failN--
		return nil, errors.New("cluster unavailable")
	}
	f.events = append(f.events, req.GetEvents()...)
	return &pb.IngestResponse{Accepted: uint32(len(req.GetEvents()))}, nil
}

func (f *fakeSink) ReportStats(ctx context.Context, req *pb.ReportReplicaStatsRequest) (*pb.ReportReplicaStatsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats = append(f.stats, req.GetStats()...)
	return &pb.ReportReplicaStatsResponse{Accepted: uint32(len(req.GetStats()))}, nil
}

func (f *fakeSink) snapshot() []*pb.BlockEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pb.BlockEvent(nil), f.events...)
}

// waitEvents waits until the sink holds n events and returns them.
func (f *fakeSink) waitEvents(t *testing.T, n int) []*pb.BlockEvent {
	t.Helper()
	var ev []*pb.BlockEvent
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		ev = f.snapshot()
		return len(ev) >= n, fmt.Sprintf("sink holds %d events, want %d: %v", len(ev), n, ev)
	})
	return ev
}

func kinds(evs []*pb.BlockEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.GetKind().String() + ":" + e.GetReplicaId()
	}
	return out
}

func startSubscriber(t *testing.T, cfg *Config, sink Sink) (*Subscriber, *Metrics) {
	t.Helper()
	return startSubscriberLog(t, cfg, sink, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// startSubscriberLog is startSubscriber logging to log.
func startSubscriberLog(t *testing.T, cfg *Config, sink Sink, log *slog.Logger) (*Subscriber, *Metrics) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	s := New(cfg, sink, Options{Metrics: m, Logger: log})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, m
}

func publisher(t *testing.T, replay bool) *ot.Publisher {
	t.Helper()
	p, err := ot.NewPublisher(replay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func mustPublish(t *testing.T, p *ot.Publisher, payload []byte) {
	t.Helper()
	if _, err := p.Publish(payload); err != nil {
		t.Fatal(err)
	}
}

func engineCfg(p *ot.Publisher, id string) EngineConfig {
	return EngineConfig{Endpoint: p.Endpoint(), ReplayEndpoint: p.ReplayEndpoint(), ReplicaID: id, ModelID: "m", TenantID: "t", HashScheme: "vllm", BlockSize: 4}
}

func TestLoopback_LiveRestartAndConfigRemoval(t *testing.T) {
	p := publisher(t, false)
	sink := &fakeSink{}
	cfg := &Config{Engines: []EngineConfig{engineCfg(p, "e0")}}
	s, m := startSubscriber(t, cfg, sink)
	if err := p.WaitSubscribed(t.Context(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	a := ot.Tokens(0, 8)
	mustPublish(t, p, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1, 2), nil, a, 4, nil, nil, nil)))
	mustPublish(t, p, ot.Batch(tTS, -1, ot.Removed(ot.Hashes(2), nil)))
	evs := sink.waitEvents(t, 3)
	if got, want := kinds(evs), []string{"CLEARED:e0", "STORED:e0", "REMOVED:e0"}; !equalStrings(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if got := evs[1].GetBlockHashes(); got[0] != fps(t, a, 0)[0] || got[1] != fps(t, a, 0)[1] {
		t.Fatalf("stored fingerprints %x, want %x", got, fps(t, a, 0))
	}
	// Engine restart: seq back to 0.
	p.Restart()
	mustPublish(t, p, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(9), nil, a[:4], 4, nil, nil, nil)))
	evs = sink.waitEvents(t, 5)
	if got, want := kinds(evs[3:]), []string{"CLEARED:e0", "STORED:e0"}; !equalStrings(got, want) {
		t.Fatalf("after restart %v, want %v", got, want)
	}
	if got := testutil.ToFloat64(m.Restarts.WithLabelValues("e0")); got != 1 {
		t.Fatalf("restarts = %v", got)
	}
	// The engine leaves the config: its replica is cleared.
	s.Reload(&Config{})
	evs = sink.waitEvents(t, 6)
	if got := kinds(evs[5:]); !equalStrings(got, []string{"CLEARED:e0"}) {
		t.Fatalf("after removal %v", got)
	}
	if got := testutil.ToFloat64(m.Clears.WithLabelValues("e0", "config_removed")); got != 1 {
		t.Fatalf("config_removed clears = %v", got)
	}
}

func TestLoopback_GapIsReplayed(t *testing.T) {
	for _, style := range []ot.ReplyStyle{ot.ReplyTwoFrames, ot.ReplyThreeFrames} {
		t.Run([]string{"two-frame replies", "three-frame replies"}[style], func(t *testing.T) {
			p := publisher(t, true)
			p.SetReplyStyle(style)
			p.SetReplayDelay(20 * time.Millisecond) // live batches arrive during the replay
			sink := &fakeSink{}
			_, m := startSubscriber(t, &Config{Engines: []EngineConfig{engineCfg(p, "e0")}}, sink)
			if err := p.WaitSubscribed(t.Context(), 10*time.Second); err != nil {
				t.Fatal(err)
			}
			a, x := ot.Tokens(0, 4), ot.Tokens(10, 4)
			mustPublish(t, p, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, a, 4, nil, nil, nil)))
			sink.waitEvents(t, 2)                                                              // CLEARED (start), STORED
			p.Skip(ot.Batch(tTS, -1, ot.Stored(ot.Hashes(2), uint64(1), x, 4, nil, nil, nil))) // seq 1: lost live
			p.Skip(ot.Batch(tTS, -1, ot.Removed(ot.Hashes(2), nil)))                           // seq 2: lost live
			mustPublish(t, p, ot.Batch(tTS, -1, ot.Removed(ot.Hashes(1), nil)))                // seq 3
			evs := sink.waitEvents(t, 5)
			if got, want := kinds(evs[2:]), []string{"STORED:e0", "REMOVED:e0", "REMOVED:e0"}; !equalStrings(got, want) {
				t.Fatalf("after the gap %v, want %v", got, want)
			}
			// The replay is counted when it finishes, which may be just after
			// its events reach the sink: wait for the count, briefly.
			poll.Eventually(t, 5*time.Second, 10*time.Millisecond, func() (bool, string) {
				c := testutil.ToFloat64(m.Replays.WithLabelValues("e0", "complete"))
				return c == 1, fmt.Sprintf("complete replays = %v, want 1", c)
			})
			if g := testutil.ToFloat64(m.Clears.WithLabelValues("e0", "gap")); g != 0 {
				t.Fatalf("gap clears = %v, want 0 (the gap was replayed)", g)
			}
		})
	}
}

func TestLoopback_GapWithoutReplayClears(t *testing.T) {
	p := publisher(t, false)
	sink := &fakeSink{}
	_, m := startSubscriber(t, &Config{Engines: []EngineConfig{engineCfg(p, "e0")}}, sink)
	if err := p.WaitSubscribed(t.Context(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	a := ot.Tokens(0, 4)
	mustPublish(t, p, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(1), nil, a, 4, nil, nil, nil)))
	p.Skip(ot.Batch(tTS, -1))
	mustPublish(t, p, ot.Batch(tTS, -1, ot.Stored(ot.Hashes(2), nil, a, 4, nil, nil, nil)))
	evs := sink.waitEvents(t, 4)
	if got, want := kinds(evs), []string{"CLEARED:e0", "STORED:e0", "CLEARED:e0", "STORED:e0"}; !equalStrings(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if got := testutil.ToFloat64(m.Gaps.WithLabelValues("e0")); got != 1 {
		t.Fatalf("gaps = %v", got)
	}
}

func TestForwarder_HoldsRetriesAndKeepsOrder(t *testing.T) {
	sink := &fakeSink{failN: 3}
	m := NewMetrics(nil)
	f := NewForwarder(sink, m, slog.New(slog.NewTextHandler(io.Discard, nil)), 16, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx)
	var in []*pb.BlockEvent
	for i := 0; i < 5; i++ {
		in = append(in, &pb.BlockEvent{Kind: pb.BlockEvent_CLEARED, ReplicaId: string(rune('a' + i))})
	}
	if err := f.Enqueue(ctx, in); err != nil {
		t.Fatal(err)
	}
	got := sink.waitEvents(t, 5)
	for i := range in {
		if got[i].GetReplicaId() != in[i].GetReplicaId() {
			t.Fatalf("order changed: %v", kinds(got))
		}
	}
	sink.mu.Lock()
	ids := append([]string(nil), sink.reqIDs...)
	sink.mu.Unlock()
	// The three failures retried the first batch with its request id.
	if len(ids) < 4 || ids[0] != ids[1] || ids[1] != ids[2] || ids[2] != ids[3] || ids[3] == ids[len(ids)-1] {
		t.Fatalf("request ids %v: the failed batch must be retried with the same id", ids)
	}
	if r := testutil.ToFloat64(m.IngestRetries); r != 3 {
		t.Fatalf("retries = %v, want 3", r)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// clockSink answers every Ingest as a cluster whose clock is 10 minutes
// behind the events: all rejected for observed_at_ms, none accepted.
type clockSink struct{ fakeSink }

func (c *clockSink) Ingest(ctx context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	resp := &pb.IngestResponse{RejectedAheadOfClock: uint32(len(req.GetEvents())), ServerTimeMs: req.GetEvents()[0].GetObservedAtMs() - 10*60*1000}
	for i := range req.GetEvents() {
		resp.Rejected = append(resp.Rejected, &pb.Rejection{EventIndex: uint32(i), Reason: "observed_at_ms ahead of the server clock"})
	}
	return resp, nil
}

// Events the cluster rejects for a clock ahead of its own are counted in
// ingest_rejected_ahead_of_clock_total (and ingest_rejected_total), the
// batch is acknowledged, not retried, and the forwarder warns once per
// clockWarnInterval, naming the skew.
func TestForwarder_CountsAndWarnsOnceAboutEventsAheadOfTheClusterClock(t *testing.T) {
	sink := &clockSink{}
	m := NewMetrics(nil)
	var logs syncbuf.Buffer
	f := NewForwarder(sink, m, slog.New(slog.NewTextHandler(&logs, nil)), 16, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx)
	at := time.Now().UnixMilli()
	var in []*pb.BlockEvent
	for i := 0; i < 4; i++ {
		in = append(in, &pb.BlockEvent{Kind: pb.BlockEvent_CLEARED, ReplicaId: "r", ObservedAtMs: at})
	}
	if err := f.Enqueue(ctx, in); err != nil { // batches of at most 2: at least two calls
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		n := testutil.ToFloat64(m.IngestClockRejects)
		return n >= 4, fmt.Sprintf("ingest_rejected_ahead_of_clock_total = %v, want 4", n)
	})
	if got := testutil.ToFloat64(m.IngestClockRejects); got != 4 {
		t.Fatalf("ingest_rejected_ahead_of_clock_total = %v, want 4", got)
	}
	if r, rej := testutil.ToFloat64(m.IngestRetries), testutil.ToFloat64(m.IngestRejected); r != 0 || rej != 4 {
		t.Fatalf("retries %v (want 0), rejected %v (want 4)", r, rej)
	}
	sink.mu.Lock()
	calls := sink.calls
	sink.mu.Unlock()
	out := logs.String()
	if calls < 2 || strings.Count(out, "stamped ahead of its clock") != 1 || !strings.Contains(out, "events_ahead_by=10m0s") {
		t.Fatalf("%d ingest calls; want one clock warning naming events_ahead_by=10m0s:\n%s", calls, out)
	}
}
