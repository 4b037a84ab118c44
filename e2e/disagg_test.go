package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/openai"
)

// Disaggregated prefill/decode end to end: sim engines with vLLM's
// NixlConnector config, two as prefill backends and one as decode. A
// request is prefilled on a prefill engine and decoded on the decode
// engine, which pulls the prompt's blocks; a repeated prefix goes to the
// prefill engine that cached it by PREFIX_MATCH; with that engine
// SIGKILLed, requests are still served (by the other prefill engine, or
// aggregated).
func TestProxyDisaggregated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster, sim engines, the subscriber and two proxies")
	}
	f := startFleet(t, fleetOptions{sims: 3, simFlags: []string{"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_both"}`}})
	// A generous lookup budget: a loaded machine must not turn the hint
	// this test checks into a fail-open pick.
	args := []string{"--models-dir", f.modelsDir, "--health-interval", "1h", "--lookup-budget", "500ms"}
	for _, p := range f.c.procs {
		args = append(args, "--addr", p.grpc)
	}
	roles := []string{"prefill", "prefill", "decode"}
	for i, s := range f.sims {
		args = append(args, "--backend", s.id+"="+s.url+","+roles[i])
	}
	pd := f.startProxy("proxy-pd", nil, args...)

	sys := longSystem("disaggregated")
	first := chatBody(sys, "What is a KV cache?", 2, false)
	h1, c1 := postPD(t, pd, first)
	prefill := h1.Get("X-Inference-Cache-Prefill-Replica")
	if h1.Get("X-Inference-Cache-Path") != "disaggregated" || !slices.Contains([]string{"sim-0", "sim-1"}, prefill) || h1.Get("X-Inference-Cache-Replica") != "sim-2" {
		t.Fatalf("first request: %v, want disaggregated, prefilled on sim-0 or sim-1, decoded on sim-2", h1)
	}
	if c1.Usage.CompletionTokens != 2 {
		t.Fatalf("first answer %+v: want the decode's 2 tokens", c1.Usage)
	}
	f.waitIndexedOn(first, prefill, 20*time.Second)

	h2, _ := postPD(t, pd, chatBody(sys, "And a prefix cache?", 2, true))
	matched, _ := strconv.Atoi(h2.Get("X-Inference-Cache-Prefill-Matched-Tokens"))
	if h2.Get("X-Inference-Cache-Prefill-Replica") != prefill || h2.Get("X-Inference-Cache-Prefill-Reason") != "PREFIX_MATCH" || matched < 160 {
		t.Fatalf("second request: %v, want prefilled on %s by PREFIX_MATCH (fail-open picks: %v)", h2, prefill,
			metricSum(t, pd.url+"/metrics", "inference_cache_proxy_fail_open_picks_total"))
	}
	if pulled := metricSum(t, f.sim("sim-2").url+"/metrics", "vllm:prompt_tokens_total"); pulled == 0 {
		t.Fatal("the decode engine counted no prompt tokens")
	}

	f.sim(prefill).Kill()
	for i := range 4 {
		h, _ := postPD(t, pd, chatBody(sys, "After the kill "+strconv.Itoa(i), 2, false))
		if p := h.Get("X-Inference-Cache-Prefill-Replica"); p == prefill {
			t.Fatalf("request %d after the kill prefilled on the killed %s: %v", i, prefill, h)
		}
	}
}

// postPD posts a chat body through p and returns the headers and the
// answer (the usage of a stream's last chunk is not read: zero).
func postPD(t *testing.T, p *httpProc, body string) (http.Header, openai.ChatCompletionResponse) {
	t.Helper()
	resp, err := http.Post(p.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r openai.ChatCompletionResponse
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
	}
	return resp.Header, r
}
