package observe

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

func scrape(t *testing.T, text string, cfg *EngineConfig, st *statsState) map[string][2]float64 {
	t.Helper()
	fams, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	out := map[string][2]float64{}
	for _, s := range statsFromFamilies(fams, cfg, st, 1000) {
		rate := -1.0
		if r, ok := s.GetTenantHitRate()[cfg.TenantID]; ok {
			rate = r
		}
		out[s.GetReplicaId()] = [2]float64{s.GetPressure(), rate}
	}
	return out
}

var statsEngine = &EngineConfig{ReplicaID: "vllm-0", ModelID: "m", TenantID: "t", HashScheme: "vllm"}

// Pressure is the KV usage gauge; the hit rate is Δhits/Δqueries since the
// previous scrape (cumulative on the first); each data-parallel rank
// (the engine label) is its own replica. Values worked out by hand.
func TestStats_PressureAndIntervalHitRatePerRank(t *testing.T) {
	var st statsState
	first := `# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0"} 0.25
vllm:kv_cache_usage_perc{engine="1"} 0.75
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0"} 30
vllm:prefix_cache_hits_total{engine="1"} 0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0"} 100
vllm:prefix_cache_queries_total{engine="1"} 0
`
	got := scrape(t, first, statsEngine, &st)
	want := map[string][2]float64{"vllm-0": {0.25, 0.3}, "vllm-0-dp1": {0.75, -1}} // rank 1: no query yet, no rate
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("first scrape (-want +got):\n%s", d)
	}
	second := strings.NewReplacer(`hits_total{engine="0"} 30`, `hits_total{engine="0"} 120`,
		`queries_total{engine="0"} 100`, `queries_total{engine="0"} 200`,
		`hits_total{engine="1"} 0`, `hits_total{engine="1"} 5`,
		`queries_total{engine="1"} 0`, `queries_total{engine="1"} 20`).Replace(first)
	got = scrape(t, second, statsEngine, &st)
	// rank 0: (120−30)/(200−100) = 0.9; rank 1: 5/20 = 0.25
	want = map[string][2]float64{"vllm-0": {0.25, 0.9}, "vllm-0-dp1": {0.75, 0.25}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("second scrape (-want +got):\n%s", d)
	}
	// An engine restart resets the counters: the rate is cumulative again.
	restarted := strings.NewReplacer(`hits_total{engine="0"} 30`, `hits_total{engine="0"} 1`,
		`queries_total{engine="0"} 100`, `queries_total{engine="0"} 4`).Replace(first)
	got = scrape(t, restarted, statsEngine, &st)
	if got["vllm-0"][1] != 0.25 {
		t.Fatalf("after a counter reset rate = %v, want 1/4", got["vllm-0"][1])
	}
}

// Older vLLM names (gpu_cache_usage_perc, counters without _total) are
// read too; without the usage gauge nothing is reported rather than a
// pressure of zero.
func TestStats_OldNamesAndAbsentGauge(t *testing.T) {
	var st statsState
	old := `# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc 0.5
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits 1
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries 2
`
	if d := cmp.Diff(map[string][2]float64{"vllm-0": {0.5, 0.5}}, scrape(t, old, statsEngine, &st)); d != "" {
		t.Fatalf("old names (-want +got):\n%s", d)
	}
	none := `# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total 1
`
	if got := scrape(t, none, statsEngine, &statsState{}); len(got) != 0 {
		t.Fatalf("without the usage gauge: %v, want nothing reported", got)
	}
	// Pressure is clamped to 0..1 whatever the engine reports.
	over := "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 1.7\n"
	if got := scrape(t, over, statsEngine, &statsState{}); got["vllm-0"][0] != 1 {
		t.Fatalf("pressure %v, want clamped to 1", got["vllm-0"][0])
	}
}

// scrapeFixture serves testdata/name as an engine's /metrics, runs one
// scrape of cfg against it and returns the ReportReplicaStats entries
// that reached the sink.
func scrapeFixture(t *testing.T, name string, cfg EngineConfig) []*pb.ReplicaStats {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	cfg.MetricsURL = srv.URL + "/metrics"
	sink := &fakeSink{}
	sc := &scraper{cfg: &cfg, client: srv.Client(), sink: sink, interval: time.Second,
		m: NewMetrics(prometheus.NewRegistry()).forEngine(cfg.ReplicaID), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		now: func() time.Time { return time.UnixMilli(1_700_000_000_000) }}
	sc.scrape(context.Background())
	return sink.stats
}

type scraped struct {
	Replica          string
	Pressure         float64
	Waiting, Running uint32
	HitRate          float64 // -1: none reported
}

func summarize(sts []*pb.ReplicaStats, tenant string) []scraped {
	out := make([]scraped, 0, len(sts))
	for _, s := range sts {
		rate := -1.0
		if r, ok := s.GetTenantHitRate()[tenant]; ok {
			rate = r
		}
		out = append(out, scraped{s.GetReplicaId(), s.GetPressure(), s.GetWaitingRequests(), s.GetRunningRequests(), rate})
	}
	return out
}

// A real vLLM scrape (two data-parallel engines) reaches ReportReplicaStats
// with each engine's queue beside its pressure and hit rate.
func TestStats_VLLMQueueReachesReportReplicaStats(t *testing.T) {
	sts := scrapeFixture(t, "vllm-metrics.txt", EngineConfig{ReplicaID: "vllm-0", ModelID: "qwen3-8b", TenantID: "team-a", HashScheme: "vllm"})
	// Hit rates: 129024/184320 = 0.7 and 22528/90112 = 0.25.
	want := []scraped{
		{"vllm-0", 0.6230158730158731, 5, 24, 0.7},
		{"vllm-0-dp1", 0.8125, 0, 31, 0.25},
	}
	if d := cmp.Diff(want, summarize(sts, "team-a")); d != "" {
		t.Fatalf("reported stats (-want +got):\n%s", d)
	}
	for _, s := range sts {
		if s.GetModelId() != "qwen3-8b" || s.GetObservedAtMs() != 1_700_000_000_000 || len(s.GetHashSchemes()) != 1 || s.GetHashSchemes()[0] != "vllm" {
			t.Errorf("entry %v", s)
		}
	}
}

// A real SGLang scrape (dp_rank 0 and 1, two tensor-parallel schedulers
// each reporting the same queue) reaches ReportReplicaStats: one replica
// per data-parallel rank, the queue counted once, token_usage as pressure,
// the rank's cache_hit_rate gauge as the tenant's hit rate (SGLang has no
// per-rank hit/query counters).
func TestStats_SGLangQueueReachesReportReplicaStats(t *testing.T) {
	sts := scrapeFixture(t, "sglang-metrics.txt", EngineConfig{ReplicaID: "sglang-0", ModelID: "qwen3-8b", TenantID: "team-a", HashScheme: "sglang"})
	want := []scraped{
		{"sglang-0", 0.74, 42, 18, 0.61},
		{"sglang-0-dp1", 0.28, 3, 9, 0.47},
	}
	if d := cmp.Diff(want, summarize(sts, "team-a")); d != "" {
		t.Fatalf("reported stats (-want +got):\n%s", d)
	}
}

// Queue gauges are rounded and clamped to what the server accepts
// (api.MaxEngineRequests, 1,000,000; observe does not import the server
// packages), so a broken exporter cannot get the whole entry, pressure
// included, rejected; absent gauges report 0.
func TestStats_QueueRoundedAndClamped(t *testing.T) {
	if maxQueue != 1_000_000 {
		t.Fatalf("maxQueue %d, the server's MaxEngineRequests is 1,000,000", maxQueue)
	}
	text := `# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0"} 0.5
vllm:kv_cache_usage_perc{engine="1"} 0.5
vllm:kv_cache_usage_perc{engine="2"} 0.5
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0"} 2.6
vllm:num_requests_waiting{engine="1"} 5e9
vllm:num_requests_waiting{engine="2"} NaN
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0"} -1
vllm:num_requests_running{engine="1"} 1e6
`
	fams, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	got := summarize(statsFromFamilies(fams, statsEngine, &statsState{}, 1000), "t")
	want := []scraped{{"vllm-0", 0.5, 3, 0, -1}, {"vllm-0-dp1", 0.5, maxQueue, maxQueue, -1}, {"vllm-0-dp2", 0.5, 0, 0, -1}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}
