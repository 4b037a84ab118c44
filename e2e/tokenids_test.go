package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/openai"
)

// A completion whose prompt is token ids is keyed by a proxy started with
// no --models-dir: the second request sharing the first's ids goes to the
// engine that cached them, by PREFIX_MATCH, and the engine finds the
// matched tokens cached.
func TestProxyTokenIDPromptWithoutModels(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster, sim engines, the subscriber and two proxies")
	}
	f := startFleet(t, fleetOptions{sims: 2, proxyFlags: []string{"--health-interval", "1h"}})
	args := []string{"--health-interval", "1h"}
	for _, p := range f.c.procs {
		args = append(args, "--addr", p.grpc)
	}
	for _, s := range f.sims {
		args = append(args, "--backend", s.id+"="+s.url)
	}
	bare := f.startProxy("proxy-no-models", nil, args...)

	ids := make([]uint32, 200) // 12 full blocks of 16
	for i := range ids {
		ids[i] = uint32(1000 + 7*i)
	}
	first := postTokenIDs(t, bare, ids, 1)
	warm := first.Header.Get("X-Inference-Cache-Replica")
	if warm == "" {
		t.Fatalf("first response names no replica: %v", first.Header)
	}
	lr := &pb.LookupRouteRequest{HashScheme: "vllm", ModelId: fleetModel}
	if err := client.Fingerprint(lr, ids, 16); err != nil {
		t.Fatal(err)
	}
	f.waitMatch(lr, warm, false, 20*time.Second)

	second := postTokenIDs(t, bare, append(ids[:len(ids):len(ids)], 5, 6, 7), 1)
	matched, _ := strconv.Atoi(second.Header.Get("X-Inference-Cache-Matched-Tokens"))
	if got := second.Header.Get("X-Inference-Cache-Replica"); got != warm || second.Header.Get("X-Inference-Cache-Reason") != "PREFIX_MATCH" || matched != 192 {
		t.Fatalf("second request went to %s (%s, %d matched), want %s by PREFIX_MATCH with 192 tokens (12 blocks)",
			got, second.Header.Get("X-Inference-Cache-Reason"), matched, warm)
	}
	if noKey := metricSum(t, bare.url+"/metrics", "inference_cache_proxy_no_key_picks_total"); noKey != 0 {
		t.Fatalf("no_key_picks_total %v: token-id prompts need no models", noKey)
	}
}

// tokenIDResponse is a completion answer with its headers.
type tokenIDResponse struct {
	Header http.Header
	Body   openai.CompletionResponse
}

// postTokenIDs sends a non-streamed completion of token ids through p.
func postTokenIDs(t *testing.T, p *httpProc, ids []uint32, maxTokens int) tokenIDResponse {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"model": fleetModel, "prompt": ids, "max_tokens": maxTokens})
	resp, err := http.Post(p.url+"/v1/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r tokenIDResponse
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &r.Body) != nil {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	r.Header = resp.Header
	return r
}
