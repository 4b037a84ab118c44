package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/bench/localcluster"
	"github.com/inference-cache/inference-cache/policy"
)

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// --json is the object of contract §12.7: its keys, plus the run's settings at
// the top level (JSONReport), and per strategy exactly contract §12.7's keys.
func TestReport_JSONShapeIsContract12(t *testing.T) {
	r := &Report{Trace: "t.jsonl", Requests: 3, IdealTokenHitRate: 0.5, Strategies: []Result{
		{Name: StrategyRoundRobin, TokenHitRate: 0.1, FractionOfIdeal: 0.2},
		{Name: StrategyLookupRouteV2, TokenHitRate: 0.4, FractionOfIdeal: 0.8, ReasonCodes: map[string]int64{"PREFIX_MATCH": 2, "NO_HINT": 1}},
	}}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(buf.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	spec := []string{"ideal_token_hit_rate", "requests", "strategies", "trace"}
	settings := []string{"cache_blocks", "dynamo_sync_delay_ms", "engines", "event_delay_ms", "gateways", "prefill_tps",
		"runs", "share_delay", "share_delay_ms", "visibility"}
	if got, want := keys(top), slices.Sorted(slices.Values(append(spec, settings...))); !slices.Equal(got, want) {
		t.Fatalf("top-level keys %v, want contract §12's %v and the settings %v", got, spec, settings)
	}
	ss := top["strategies"].([]any)
	if len(ss) != 2 {
		t.Fatalf("%d strategies", len(ss))
	}
	want := []string{"fraction_of_ideal", "gateways_shared", "lookup_p50_us", "lookup_p99_us", "max_over_mean_requests", "name",
		"reason_codes", "token_hit_rate", "ttft_model_mean_ms", "ttft_model_p50_ms", "ttft_model_p90_ms", "ttft_model_p99_ms"}
	for _, s := range ss {
		m := s.(map[string]any)
		if got := keys(m); !slices.Equal(got, want) {
			t.Fatalf("strategy keys %v, want %v", got, want)
		}
		if _, ok := m["reason_codes"].(map[string]any); !ok {
			t.Fatalf("reason_codes is %T, want an object (empty for strategies that do not ask)", m["reason_codes"])
		}
	}
	if rc := ss[1].(map[string]any)["reason_codes"].(map[string]any); rc["PREFIX_MATCH"] != 2.0 || rc["NO_HINT"] != 1.0 {
		t.Fatalf("reason codes %v", rc)
	}
}

// embeddedCluster starts a 3-node cluster with policy pol for the test,
// and a context that bounds the test's runs against a hang (not a speed
// target: under -race, with the other packages' tests on the same two
// cores, a run of every strategy takes well over a minute).
func embeddedCluster(t *testing.T, pol policy.Policy) (context.Context, *localcluster.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	lc, err := localcluster.Start(ctx, localcluster.Options{Policy: &pol})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	return ctx, lc
}

// End to end: a few hundred generated requests through every strategy
// with two gateways, the hint strategies against an embedded 3-node
// cluster fed only by the engines' ZMQ KV events and /metrics through the
// observe subscriber.
func TestRun_SmokeEmbeddedCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ctx, lc := embeddedCluster(t, policy.Default())
	tr := Generate(GeneratorConfig{Seed: 5, Requests: 300, RatePerSec: 8})
	start := time.Now()
	rep, err := Run(ctx, Config{Trace: tr, Fleet: FleetConfig{Engines: 4, CacheBlocks: 64}, Addrs: lc.Addrs(), Seed: 1,
		Encoding: EncodingMap, Gateways: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("300 requests × %d strategies in %v", len(rep.Strategies), time.Since(start))
	var buf strings.Builder
	_ = rep.WriteTable(&buf)
	t.Log("\n" + buf.String())
	if len(rep.Strategies) != len(AllStrategies) || rep.Requests != 300 {
		t.Fatalf("%d strategies, %d requests", len(rep.Strategies), rep.Requests)
	}
	by := map[string]*Result{}
	for i := range rep.Strategies {
		s := &rep.Strategies[i]
		by[s.Name] = s
		if s.TokenHitRate > rep.IdealTokenHitRate+1e-12 {
			t.Errorf("%s: hit rate %.4f above the ideal bound %.4f", s.Name, s.TokenHitRate, rep.IdealTokenHitRate)
		}
		var n int64
		for _, c := range s.PerEngine {
			n += c
		}
		if n != 300 {
			t.Errorf("%s: engines served %d requests, want 300", s.Name, n)
		}
	}
	if rep.Gateways != 2 {
		t.Errorf("report says %d gateways, want 2", rep.Gateways)
	}
	if s := by[StrategyLookupRouteSDK]; s.StatsSyncs == 0 {
		t.Errorf("lookuproute-sdk with 2 gateways: no stats synced at the scrape ticks")
	}
	for _, name := range []string{StrategyLookupRouteV1, StrategyLookupRouteV2, StrategyLookupRouteSDK} {
		s := by[name]
		var n int64
		for _, c := range s.ReasonCodes {
			n += c
		}
		if n != 300 || s.ReasonCodes["PREFIX_MATCH"] == 0 {
			t.Errorf("%s: reason codes %v: want 300 lookups with some PREFIX_MATCH (events reached the cluster)", name, s.ReasonCodes)
		}
		if s.Published == 0 || s.BarrierTimeouts != 0 {
			t.Errorf("%s: %d hashes published, %d barrier timeouts", name, s.Published, s.BarrierTimeouts)
		}
		if s.LookupP50Us <= 0 {
			t.Errorf("%s: no lookup latency", name)
		}
	}
	// The cluster's policy is restored after the run.
	if hr := by[StrategyLookupRouteV2].TokenHitRate; hr <= by[StrategyRoundRobin].TokenHitRate {
		t.Errorf("lookuproute-v2 %.3f not above round-robin %.3f on a session-heavy trace", hr, by[StrategyRoundRobin].TokenHitRate)
	}
}

// A hint strategy's run starts from a cluster that holds nothing of its
// fleet, however many runs came before on the same cluster: the same
// strategy and seed replayed twice gives the same lookups' reason codes
// and the same hit rate, the first lookups included (which would otherwise
// match the previous run's blocks until each engine's first event).
func TestRun_EachRunStartsFromAClearedFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	// The budgets are not what this test is about: a lookup cut off under
	// a loaded -race run answers NO_HINT, which follows the wall clock.
	pol := policy.Default()
	pol.LookupTimeout = 10 * time.Second
	ctx, lc := embeddedCluster(t, pol)
	tr := Generate(GeneratorConfig{Seed: 3, Requests: 200, RatePerSec: 8})
	rep, err := Run(ctx, Config{Trace: tr, Fleet: FleetConfig{Engines: 4, CacheBlocks: 64}, Addrs: lc.Addrs(), Seed: 1,
		Strategies: []string{StrategyLookupRouteV2, StrategyLookupRouteV2}, LookupTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a, b := rep.Strategies[0], rep.Strategies[1]
	if a.ReasonCodes["PREFIX_MATCH"] == 0 {
		t.Fatalf("first run's reason codes %v: no PREFIX_MATCH, so a second run has nothing stale to see", a.ReasonCodes)
	}
	if a.FailOpen+b.FailOpen != 0 || a.BarrierTimeouts+b.BarrierTimeouts != 0 {
		t.Fatalf("lookups failed open (%d, %d) or barriers timed out (%d, %d): the runs followed the wall clock",
			a.FailOpen, b.FailOpen, a.BarrierTimeouts, b.BarrierTimeouts)
	}
	if !maps.Equal(a.ReasonCodes, b.ReasonCodes) || a.TokenHitRate != b.TokenHitRate {
		t.Fatalf("second run on the same cluster: reason codes %v, hit rate %.4f; first run: %v, %.4f",
			b.ReasonCodes, b.TokenHitRate, a.ReasonCodes, a.TokenHitRate)
	}
}

// Bad settings are refused before anything runs, each naming the setting
// and its limit.
func TestRun_RefusesBadSettings(t *testing.T) {
	tr := Generate(GeneratorConfig{Seed: 1, Requests: 10})
	fleet := FleetConfig{Engines: 2, CacheBlocks: 8}
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"negative gateways", Config{Gateways: -1}, "-1 gateways: want 1 to 1024"},
		{"too many gateways", Config{Gateways: 1025}, "1025 gateways: want 1 to 1024"},
		{"negative event delay", Config{EventDelay: -time.Millisecond}, "event delay -1ms: must not be negative"},
		{"unknown time model", Config{Visibility: "later"}, `visibility "later": want delay, timestamp or request`},
		{"negative runs", Config{Runs: -1}, "-1 runs: want 1 to 16"},
		{"too many runs", Config{Runs: 17}, "17 runs: want 1 to 16"},
		{"report interval below the SDK's", Config{ReportInterval: time.Millisecond}, "report interval 1ms: want 10ms to 1m0s"},
		{"report interval above the SDK's", Config{ReportInterval: 2 * time.Minute}, "report interval 2m0s: want 10ms to 1m0s"},
	} {
		c.cfg.Trace, c.cfg.Fleet, c.cfg.Strategies = tr, fleet, []string{StrategyRoundRobin}
		if _, err := Run(context.Background(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}

// --runs N replays each strategy N times, seeded --seed, --seed+1, …, on
// the same trace: each run is the one-run replay of its seed, and the
// report's figures are the runs' medians, every run listed under per_run.
func TestRun_SeveralRunsReportTheMedianOfEachSeed(t *testing.T) {
	tr := Generate(GeneratorConfig{Seed: 1, Requests: 300})
	fleet := FleetConfig{Engines: 4, CacheBlocks: 64}
	one := func(seed uint64) Result {
		rep, err := Run(context.Background(), Config{Trace: tr, Fleet: fleet, Strategies: []string{StrategyRandom}, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Strategies[0]
	}
	singles := []Result{one(5), one(6), one(7)}
	if singles[0].TTFTModelP50Ms == singles[1].TTFTModelP50Ms && singles[1].TTFTModelP50Ms == singles[2].TTFTModelP50Ms {
		t.Fatal("the random strategy gave one p50 for three seeds: the seed does not reach it, so this test shows nothing")
	}
	rep, err := Run(context.Background(), Config{Trace: tr, Fleet: fleet, Strategies: []string{StrategyRandom}, Seed: 5, Runs: 3})
	if err != nil {
		t.Fatal(err)
	}
	got := rep.Strategies[0]
	if len(got.Runs) != 3 {
		t.Fatalf("%d runs listed, want 3", len(got.Runs))
	}
	var p50s, hits []float64
	for i, r := range got.Runs {
		s := singles[i]
		if r.Seed != uint64(5+i) || r.TTFTModelP50Ms != s.TTFTModelP50Ms || r.TokenHitRate != s.TokenHitRate || r.TTFTModelP99Ms != s.TTFTModelP99Ms {
			t.Fatalf("run %d = %+v, want seed %d's own replay (p50 %v, p99 %v, hit rate %v)", i, r, 5+i, s.TTFTModelP50Ms, s.TTFTModelP99Ms, s.TokenHitRate)
		}
		p50s, hits = append(p50s, s.TTFTModelP50Ms), append(hits, s.TokenHitRate)
	}
	slices.Sort(p50s)
	slices.Sort(hits)
	if got.TTFTModelP50Ms != p50s[1] || got.TokenHitRate != hits[1] {
		t.Fatalf("reported p50 %v and hit rate %v, want the middle of %v and %v", got.TTFTModelP50Ms, got.TokenHitRate, p50s, hits)
	}
	j := rep.JSON()
	if j.Runs != 3 || len(j.Strategies[0].PerRun) != 3 || j.Strategies[0].PerRun[2].Seed != 7 {
		t.Fatalf("JSON runs %d, per_run %+v", j.Runs, j.Strategies[0].PerRun)
	}
}
