package simengine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/vllmpub"
	"github.com/inference-cache/inference-cache/observe"
)

// sink is an observe.Sink keeping what reaches the cluster.
type sink struct {
	mu     sync.Mutex
	events []*pb.BlockEvent
	stats  []*pb.ReplicaStats
}

func (s *sink) Ingest(_ context.Context, req *pb.IngestRequest) (*pb.IngestResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, req.GetEvents()...)
	return &pb.IngestResponse{Accepted: uint32(len(req.GetEvents()))}, nil
}

func (s *sink) ReportStats(_ context.Context, req *pb.ReportReplicaStatsRequest) (*pb.ReportReplicaStatsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = append(s.stats, req.GetStats()...)
	return &pb.ReportReplicaStatsResponse{Accepted: uint32(len(req.GetStats()))}, nil
}

// kind returns the events of kind k received so far.
func (s *sink) kind(k pb.BlockEvent_Kind) []*pb.BlockEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.BlockEvent
	for _, e := range s.events {
		if e.GetKind() == k {
			out = append(out, e)
		}
	}
	return out
}

func fps(t *testing.T, tokens []uint32, salt string) []uint64 {
	t.Helper()
	h, err := fingerprint.AppendSaltedBlockHashes(nil, tokens, 16, salt)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The sim engine's KV events, over ZMQ, through the real subscriber
// (observe's decoder and translator), land as the fingerprints of the
// tokens it prefilled, exactly as a vLLM's would: a cold prompt's full
// blocks, a longer prompt's new blocks chained after the cached ones, a
// salted prompt in its salt's domain, and the blocks an admission evicts
// as REMOVED. The subscriber's stats scrape reads the engine's /metrics.
func TestKVEvents_DecodedByObserveAsVLLMs(t *testing.T) {
	pub, err := vllmpub.New(vllmpub.Options{Replay: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	// 8 blocks: each request reserves one block for its tail and output.
	te := newTestEngine(t, Config{KVBlocks: 8, PrefillTPS: 1e6, DecodeTPS: 1e5, Events: pub, Clock: wallClock{}})
	cfg, err := observe.ParseConfig([]byte(`
scrape_interval: 100ms
engines:
  - endpoint: ` + pub.Endpoint() + `
    replay_endpoint: ` + pub.ReplayEndpoint() + `
    replica_id: sim-0
    model_id: sim-model
    hash_scheme: vllm
    block_size: 16
    metrics_url: ` + te.srv.URL + `/metrics
`))
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	sub := observe.New(cfg, s, observe.Options{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sub.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := pub.WaitSubscribed(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	serve := func(prompt []uint32, salt string) {
		t.Helper()
		body := map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 1}
		if salt != "" {
			body["cache_salt"] = salt
		}
		resp := te.post(t, ctx, "/v1/completions", body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	waitStored := func(n int) *pb.BlockEvent {
		t.Helper()
		poll.Eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
			got := len(s.kind(pb.BlockEvent_STORED))
			return got >= n, fmt.Sprintf("%d STORED events, want %d", got, n)
		})
		return s.kind(pb.BlockEvent_STORED)[n-1]
	}
	long := seq(1, 72) // 4 full blocks
	serve(long[:40], "")
	ev := waitStored(1)
	if ev.GetReplicaId() != "sim-0" || ev.GetPrefixTokensBefore() != 0 || !slices.Equal(ev.GetBlockHashes(), fps(t, long[:32], "")) {
		t.Fatalf("cold prompt stored %v", ev)
	}
	serve(long, "")
	ev = waitStored(2)
	if ev.GetPrefixTokensBefore() != 32 || !slices.Equal(ev.GetBlockHashes(), fps(t, long[:64], "")[2:]) {
		t.Fatalf("longer prompt stored %v, want blocks 2-3 after 32 tokens", ev)
	}
	salted := seq(900, 32)
	serve(salted, "tenant-a")
	ev = waitStored(3)
	if !slices.Equal(ev.GetBlockHashes(), fps(t, salted, "tenant-a")) {
		t.Fatalf("salted prompt stored %v, want the salted fingerprints %x", ev, fps(t, salted, "tenant-a"))
	}
	// 5 new blocks beside the 6 cached, in 7 of room: the 4 blocks of the
	// long prompt (least recently used, the salted ones being newer) go,
	// from its end.
	serve(seq(5000, 80), "")
	poll.Eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
		n := 0
		for _, e := range s.kind(pb.BlockEvent_REMOVED) {
			n += len(e.GetBlockHashes())
		}
		return n >= 4, fmt.Sprintf("%d blocks in REMOVED events, want 4", n)
	})
	var removed []uint64
	for _, e := range s.kind(pb.BlockEvent_REMOVED) {
		removed = append(removed, e.GetBlockHashes()...)
	}
	want := fps(t, long[:64], "")
	slices.Reverse(want)
	if !slices.Equal(removed, want) {
		t.Fatalf("removed %x, want the long prompt's blocks tail first %x", removed, want)
	}
	poll.Eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.stats) > 0, "no replica stats from the /metrics scrape"
	})
	s.mu.Lock()
	st := s.stats[len(s.stats)-1]
	s.mu.Unlock()
	if st.GetReplicaId() != "sim-0" || st.GetPressure() < 0 || st.GetPressure() > 1 {
		t.Fatalf("stats %v", st)
	}
}
