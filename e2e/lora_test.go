package e2e

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/openai"
)

// LoRA adapters end to end: sim engines serving two adapters of qwen3,
// the subscriber indexing the adapters' blocks under their lora_name, the
// proxy learning the adapters from /v1/models. The same prompt on the
// base model and on an adapter never matches the other's blocks, in the
// index nor in the engine; an adapter's repeated prefix gets PREFIX_MATCH
// on the engine that cached it, with the base model's tokenizer and
// template; an unknown adapter is a 404.
func TestProxyLoRAAdapters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster, sim engines, the subscriber and the proxy")
	}
	f := startFleet(t, fleetOptions{sims: 2, proxyFlags: []string{"--health-interval", "200ms"},
		simFlags: []string{"--enable-lora", "--lora-modules", "sql=/adapters/sql", "--lora-modules", "chat=/adapters/chat", "--max-loras", "2"}})
	sys := longSystem("adapters")
	base := chatBody(sys, "What is a KV cache?", 1, false)
	r1, c1 := postChat(t, f.proxy, base)
	warm := r1.Header.Get("X-Inference-Cache-Replica")
	if c1.Usage.CachedTokens() != 0 {
		t.Fatalf("cold base request found %d cached tokens", c1.Usage.CachedTokens())
	}
	f.waitIndexed(base, warm, 20*time.Second)

	// The adapter, same prompt: no hint from the base model's blocks, and
	// the engine (wherever it went) finds none of them.
	sql := adapterBody(t, base, "sql")
	r2, c2 := postChat(t, f.proxy, sql)
	if r2.Header.Get("X-Inference-Cache-Reason") == "PREFIX_MATCH" || c2.Usage.CachedTokens() != 0 || c2.Model != "sql" {
		t.Fatalf("adapter request on the base model's prompt: %s, %d cached, model %q; want no match and none cached",
			r2.Header.Get("X-Inference-Cache-Reason"), c2.Usage.CachedTokens(), c2.Model)
	}
	sqlReplica := r2.Header.Get("X-Inference-Cache-Replica")
	f.waitIndexedAdapter(base, "sql", sqlReplica, 20*time.Second)

	// The adapter's repeated prefix goes where it is cached.
	r3, c3 := postChat(t, f.proxy, adapterBody(t, chatBody(sys, "And a prefix cache?", 1, false), "sql"))
	matched, _ := strconv.Atoi(r3.Header.Get("X-Inference-Cache-Matched-Tokens"))
	if got := r3.Header.Get("X-Inference-Cache-Replica"); got != sqlReplica || r3.Header.Get("X-Inference-Cache-Reason") != "PREFIX_MATCH" ||
		matched < 160 || c3.Usage.CachedTokens() != matched {
		t.Fatalf("second adapter request: %s (%s, %d matched, %d cached), want %s by PREFIX_MATCH, the engine finding what was matched",
			got, r3.Header.Get("X-Inference-Cache-Reason"), matched, c3.Usage.CachedTokens(), sqlReplica)
	}
	// The other adapter sees neither.
	r4, c4 := postChat(t, f.proxy, adapterBody(t, base, "chat"))
	if r4.Header.Get("X-Inference-Cache-Reason") == "PREFIX_MATCH" || c4.Usage.CachedTokens() != 0 {
		t.Fatalf("chat adapter on sql's and the base's prompt: %s, %d cached", r4.Header.Get("X-Inference-Cache-Reason"), c4.Usage.CachedTokens())
	}
	// And the base model's repeated prefix still goes to its own blocks.
	r5, _ := postChat(t, f.proxy, chatBody(sys, "Once more.", 1, false))
	if r5.Header.Get("X-Inference-Cache-Replica") != warm || r5.Header.Get("X-Inference-Cache-Reason") != "PREFIX_MATCH" {
		t.Fatalf("base request: %s (%s), want %s by PREFIX_MATCH", r5.Header.Get("X-Inference-Cache-Replica"), r5.Header.Get("X-Inference-Cache-Reason"), warm)
	}
	checkUnknownAdapter(t, f)
}

// adapterBody is body with its model set to adapter.
func adapterBody(t *testing.T, body, adapter string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	m["model"] = adapter
	b, _ := json.Marshal(m)
	return string(b)
}

// checkUnknownAdapter: a model no backend lists is vLLM's 404.
func checkUnknownAdapter(t *testing.T, f *fleet) {
	t.Helper()
	resp, err := postRaw(f.proxy.url+"/v1/chat/completions", adapterBody(t, chatBody("s", "u", 1, false), "no-such-adapter"))
	if err != nil {
		t.Fatal(err)
	}
	var eb openai.ErrorResponse
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != 404 || eb.Error.Param == nil || *eb.Error.Param != "model" {
		t.Fatalf("unknown adapter: %d %+v, want 404 naming model", resp.StatusCode, eb)
	}
}

// postRaw posts a JSON body to url.
func postRaw(url, body string) (*http.Response, error) {
	return http.Post(url, "application/json", strings.NewReader(body))
}
