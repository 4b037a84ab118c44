package observe

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/internal/poll"
)

// ScrapeNow scrapes outside the interval (an hour here) and returns only
// once the report is answered: the sink holds the new queue on return,
// with no waiting on the test's side. An unknown replica id is skipped.
func TestSubscriber_ScrapeNowReportsBeforeReturning(t *testing.T) {
	var waiting atomic.Int64
	waiting.Store(3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} %d\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 2\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n", waiting.Load())
	}))
	defer srv.Close()
	p := publisher(t, false)
	ec := engineCfg(p, "e0")
	ec.MetricsURL = srv.URL + "/metrics"
	sink := &fakeSink{}
	s, _ := startSubscriber(t, &Config{Engines: []EngineConfig{ec}, ScrapeInterval: Duration(time.Hour)}, sink)
	last := func() (int, uint32) {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if len(sink.stats) == 0 {
			return 0, 0
		}
		return len(sink.stats), sink.stats[len(sink.stats)-1].GetWaitingRequests()
	}
	// The scraper reports once when it starts.
	poll.Eventually(t, 10*time.Second, 5*time.Millisecond, func() (bool, string) {
		n, _ := last()
		return n > 0, "no stats reported at start"
	})
	if n, w := last(); n != 1 || w != 3 {
		t.Fatalf("at start: %d reports, waiting %d; want 1, 3", n, w)
	}
	waiting.Store(9)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.ScrapeNow(ctx, "e0", "no-such-engine"); err != nil {
		t.Fatal(err)
	}
	if n, w := last(); n != 2 || w != 9 {
		t.Fatalf("after ScrapeNow: %d reports, waiting %d; want 2, 9", n, w)
	}
	if err := s.ScrapeNow(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := last(); n != 3 {
		t.Fatalf("ScrapeNow of every engine: %d reports, want 3", n)
	}
}

// rejectingSink refuses every stats entry, as the cluster does an invalid
// one.
type rejectingSink struct{ fakeSink }

func (r *rejectingSink) ReportStats(context.Context, *pb.ReportReplicaStatsRequest) (*pb.ReportReplicaStatsResponse, error) {
	return &pb.ReportReplicaStatsResponse{Rejected: []*pb.Rejection{{Reason: "pressure is 2, over the limit of 1"}}}, nil
}

// A report the cluster answers with a rejection is counted as rejected,
// not ok.
func TestStats_RejectedReportCountedAsRejected(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n")
	}))
	defer srv.Close()
	cfg := EngineConfig{ReplicaID: "e0", ModelID: "m", TenantID: "t", HashScheme: "vllm", BlockSize: 4, MetricsURL: srv.URL + "/metrics"}
	m := NewMetrics(prometheus.NewRegistry())
	sc := &scraper{cfg: &cfg, client: srv.Client(), sink: &rejectingSink{}, interval: time.Second, m: m.forEngine("e0"),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now}
	sc.scrape(context.Background())
	if ok, rej := testutil.ToFloat64(m.StatsReports.WithLabelValues("e0", "ok")), testutil.ToFloat64(m.StatsReports.WithLabelValues("e0", "rejected")); ok != 0 || rej != 1 {
		t.Fatalf("reports ok %v rejected %v, want 0 and 1", ok, rej)
	}
}
