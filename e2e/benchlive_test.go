package e2e

import (
	"encoding/json"
	"github.com/inference-cache/inference-cache/internal/fixtures"
	"os/exec"
	"path/filepath"
	"testing"
)

// bench --live end to end on a short slice: for each strategy a fresh
// cluster, sim engines, subscriber and proxy come up, the records go
// through the proxy, and the report has one row per strategy with every
// request answered, the proxy's headers read (the picker's routed by
// hints, round-robin's by turn) and the targets evaluated.
func TestBenchLive_Smoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two live stacks of real processes")
	}
	dir := t.TempDir()
	cmd := exec.Command(binPath, "bench", "--live", "--json", "--no-progress", "--requests", "40", "--warmup", "5", "--speedup", "20",
		"--engines", "2", "--kv-blocks", "20000", "--strategies", "picker,round-robin", "--dir", filepath.Join(dir, "runs"),
		"--trace", fixtures.TracePath(t, "conversation_trace"))
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("bench --live: %v\n%s\n%s", err, out, stderr)
	}
	var rep struct {
		Records    int `json:"records"`
		Strategies []struct {
			Strategy string         `json:"strategy"`
			Requests int            `json:"requests"`
			Failed   int            `json:"failed"`
			Reasons  map[string]int `json:"reasons"`
			Replicas map[string]int `json:"replicas"`
			TTFT     struct {
				P50 float64 `json:"p50_ms"`
			} `json:"ttft"`
		} `json:"strategies"`
		Targets []struct {
			Name string `json:"name"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Records != 40 || len(rep.Strategies) != 2 || len(rep.Targets) != 3 {
		t.Fatalf("report: %s", out)
	}
	for _, s := range rep.Strategies {
		if s.Requests != 35 || s.Failed != 0 || s.TTFT.P50 <= 0 || len(s.Replicas) != 2 {
			t.Errorf("%s: %d measured, %d failed, TTFT p50 %v, replicas %v; want 35 answered over both engines", s.Strategy, s.Requests, s.Failed, s.TTFT.P50, s.Replicas)
		}
	}
	if rr := rep.Strategies[1]; rr.Reasons["ROUND_ROBIN"] != 35 {
		t.Errorf("round-robin's reasons %v", rr.Reasons)
	}
	if p := rep.Strategies[0]; p.Reasons["ROUND_ROBIN"] != 0 || len(p.Reasons) == 0 {
		t.Errorf("picker's reasons %v", p.Reasons)
	}
}

// bench --live with the peers' strategies behind 2 proxies: every run's
// requests are answered through both proxies (round robin by arrival),
// the peers' picks carry their own reasons, the picker also runs behind
// one proxy, and the report has the targets against the best peer and
// against the 1-proxy run.
func TestBenchLive_PeersBehindTwoProxies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four live stacks of real processes")
	}
	dir := t.TempDir()
	cmd := exec.Command(binPath, "bench", "--live", "--json", "--no-progress", "--requests", "24", "--warmup", "4", "--speedup", "20",
		"--engines", "2", "--kv-blocks", "20000", "--strategies", "picker,round-robin,sglang", "--gateways", "2",
		"--dir", filepath.Join(dir, "runs"), "--trace", "../testdata/mooncake/conversation_trace.jsonl.gz")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("bench --live: %v\n%s\n%s", err, out, stderr)
	}
	var rep struct {
		Gateways   int `json:"gateways"`
		Strategies []struct {
			Strategy string         `json:"strategy"`
			Gateways int            `json:"gateways"`
			Requests int            `json:"requests"`
			Failed   int            `json:"failed"`
			Reasons  map[string]int `json:"reasons"`
		} `json:"strategies"`
		Targets []struct {
			Name string `json:"name"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Gateways != 2 || len(rep.Strategies) != 4 {
		t.Fatalf("report: %s", out)
	}
	wantGW := []int{2, 2, 2, 1}
	for i, s := range rep.Strategies {
		if s.Gateways != wantGW[i] || s.Requests != 20 || s.Failed != 0 {
			t.Errorf("%s: %d proxies, %d measured, %d failed; want %d, 20, 0", s.Strategy, s.Gateways, s.Requests, s.Failed, wantGW[i])
		}
	}
	if sg := rep.Strategies[2]; sg.Strategy != "sglang" || sg.Reasons["SGLANG"] != 20 {
		t.Errorf("sglang's reasons %v", sg.Reasons)
	}
	names := map[string]bool{}
	for _, tg := range rep.Targets {
		names[tg.Name] = true
	}
	if !names["TTFT p50 ≤ 0.8× the best peer's"] || !names["TTFT p50 with 2 proxies ≤ 1.1× with 1"] {
		t.Errorf("targets %v, want the best peer's and the 1-proxy one", rep.Targets)
	}
}
