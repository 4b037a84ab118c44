package observe

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
