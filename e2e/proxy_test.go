package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/openai"
)

// The proxy end to end over real processes: a 3-node cluster, three sim
// engines publishing KV events, the subscriber and the proxy. The
// subtests run in order; the last two kill an engine and then the
// cluster.
func TestProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster, sim engines, the subscriber and the proxy")
	}
	// Health checks far apart: a backend leaves the candidates here only
	// by refusing a connection.
	f := startFleet(t, fleetOptions{sims: 3, proxyFlags: []string{"--health-interval", "1h"}})
	t.Run("RepeatedPrefixGoesToTheWarmEngine", func(t *testing.T) { checkWarmEngine(t, f) })
	t.Run("StreamArrivesChunkByChunkBeforeTheEngineFinishes", func(t *testing.T) { checkStreaming(t, f) })
	t.Run("CancellationReachesTheEngine", func(t *testing.T) { checkCancellation(t, f) })
	t.Run("BadInputNeverReachesABackend", func(t *testing.T) { checkBadInput(t, f) })
	t.Run("BackendsFileReloadsOnSIGHUP", func(t *testing.T) { checkReload(t, f) })
	t.Run("RetryOnARefusedConnection", func(t *testing.T) { checkRetry(t, f) })
	t.Run("FailOpenWithTheClusterDown", func(t *testing.T) { checkFailOpen(t, f) })
}

// A second request sharing the first's long system prompt goes to the
// engine that served the first, with the reason PREFIX_MATCH, and the
// engine finds as many cached tokens as the hint promised: the key the
// proxy computed is the engine's prefill.
func checkWarmEngine(t *testing.T, f *fleet) {
	sys := longSystem("warm-engine")
	first := chatBody(sys, "What is a KV cache?", 1, false)
	r1, c1 := postChat(t, f.proxy, first)
	warm := r1.Header.Get("X-Inference-Cache-Replica")
	if warm == "" || r1.Header.Get("X-Inference-Cache-Reason") == "" || r1.Header.Get("X-Inference-Cache-Matched-Tokens") == "" {
		t.Fatalf("first response headers %v: want replica, reason and matched tokens", r1.Header)
	}
	if c1.Usage.CachedTokens() != 0 {
		t.Fatalf("first request found %d cached tokens on a cold fleet", c1.Usage.CachedTokens())
	}
	f.waitIndexed(first, warm, 20*time.Second)

	r2, c2 := postChat(t, f.proxy, chatBody(sys, "And what is a prefix cache?", 1, false))
	matched, _ := strconv.Atoi(r2.Header.Get("X-Inference-Cache-Matched-Tokens"))
	if got := r2.Header.Get("X-Inference-Cache-Replica"); got != warm || r2.Header.Get("X-Inference-Cache-Reason") != "PREFIX_MATCH" {
		t.Fatalf("second request went to %s (%s), want %s by PREFIX_MATCH", got, r2.Header.Get("X-Inference-Cache-Reason"), warm)
	}
	if matched < 160 || c2.Usage.CachedTokens() != matched {
		t.Fatalf("hint matched %d tokens, the engine found %d cached: want the same, and at least the system prompt's blocks", matched, c2.Usage.CachedTokens())
	}
}

// openStream sends a streamed chat request through the proxy and returns
// the response, its SSE reader and the engine that serves it.
func openStream(t *testing.T, f *fleet, ctx context.Context, body string) (*http.Response, *openai.SSEReader, *simProc) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.proxy.url+"/v1/chat/completions", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	return resp, openai.NewSSEReader(resp.Body), f.sim(resp.Header.Get("X-Inference-Cache-Replica"))
}

// nextContent reads events until one with content and returns it.
func nextContent(t *testing.T, rd *openai.SSEReader) string {
	t.Helper()
	for {
		ev, err := rd.Next()
		if err != nil || string(ev) == openai.Done {
			t.Fatalf("stream ended (%v) before a content chunk", err)
		}
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal(ev, &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil && *c.Choices[0].Delta.Content != "" {
			return *c.Choices[0].Delta.Content
		}
	}
}

// The first content chunk reaches the client while the engine is still
// decoding (it counts the request as running), and every token comes as
// its own event.
func checkStreaming(t *testing.T, f *fleet) {
	const tokens = 20 // 0.4 s at 50 tokens/s
	resp, rd, s := openStream(t, f, context.Background(), chatBody(longSystem("streaming"), "Stream to me.", tokens, true))
	defer resp.Body.Close()
	first := nextContent(t, rd)
	if running := metricSum(t, s.url+"/metrics", "vllm:num_requests_running"); running < 1 {
		t.Fatalf("the first chunk arrived after the engine finished (running = %v)", running)
	}
	// The engine sends the tokens made since its last chunk in one chunk,
	// as vLLM does, so a loaded machine may join a few: every token
	// arrives, in more than one chunk.
	toks, chunks := strings.Count(first, " tok"), 1
	for {
		ev, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if string(ev) == openai.Done {
			break
		}
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal(ev, &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil && *c.Choices[0].Delta.Content != "" {
			toks += strings.Count(*c.Choices[0].Delta.Content, " tok")
			chunks++
		}
	}
	if toks != tokens || chunks < 2 {
		t.Fatalf("%d tokens in %d content chunks, want all %d in more than one", toks, chunks, tokens)
	}
}

// A client that goes away mid-stream stops the engine's request: the
// engine counts a cancellation.
func checkCancellation(t *testing.T, f *fleet) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, rd, s := openStream(t, f, ctx, chatBody(longSystem("cancel"), "A long answer, please.", 1000, true))
	before := metricSum(t, s.url+"/metrics", "simengine_requests_cancelled_total")
	nextContent(t, rd)
	cancel()
	resp.Body.Close()
	// The engine counts the cancellation and frees the request: wait for
	// both (one scrape may fall between the two updates).
	poll.Eventually(t, 10*time.Second, 50*time.Millisecond, func() (bool, string) {
		cancelled := metricSum(t, s.url+"/metrics", "simengine_requests_cancelled_total")
		running := metricSum(t, s.url+"/metrics", "vllm:num_requests_running")
		return cancelled > before && running == 0, fmt.Sprintf("the engine has not counted the cancellation and freed the request (cancelled %v, was %v; running %v)", cancelled, before, running)
	})
}

// Each bad input gets OpenAI error JSON with its status from the proxy,
// and the backend sees nothing of it.
func checkBadInput(t *testing.T, f *fleet) {
	backend, posts := countingBackend(t)
	p := f.startProxy("proxy-bad-input", nil, "--models-dir", f.modelsDir, "--backend", "counter="+backend.URL, "--max-body-bytes", "65536")
	cases := []struct {
		name, path, body string
		status           int
		typ, param       string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"model": "qwen3", "messages": [{"role": "user"`, 400, "BadRequestError", ""},
		{"no model", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}]}`, 400, "BadRequestError", "model"},
		{"unknown model", "/v1/completions", `{"model": "no-such-model", "prompt": "hi"}`, 404, "NotFoundError", "model"},
		{"body over the limit", "/v1/completions", `{"model": "qwen3", "prompt": "` + strings.Repeat("a", 70000) + `"}`, 413, "RequestEntityTooLargeError", ""},
	}
	for _, c := range cases {
		resp, err := http.Post(p.url+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var eb openai.ErrorResponse
		derr := json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		param := ""
		if eb.Error.Param != nil {
			param = *eb.Error.Param
		}
		if resp.StatusCode != c.status || derr != nil || eb.Error.Code != c.status || eb.Error.Type != c.typ || param != c.param || eb.Error.Message == "" {
			t.Errorf("%s: %d %+v (%v), want %d %s with param %q", c.name, resp.StatusCode, eb, derr, c.status, c.typ, c.param)
		}
	}
	if n := posts.Load(); n != 0 {
		t.Fatalf("the backend received %d requests of bad input, want none", n)
	}
	// The same proxy does forward a good request: the zero above is the
	// proxy's refusal, not an unreachable backend.
	resp, err := http.Post(p.url+"/v1/completions", "application/json", strings.NewReader(`{"model": "qwen3", "prompt": "hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || posts.Load() != 1 {
		t.Fatalf("good request: %d, backend posts %d: want it forwarded", resp.StatusCode, posts.Load())
	}
}

// The engine holding a prefix is killed: the next request for that
// prefix is picked for it, refused, and retried once on another engine,
// which serves it; later requests avoid the dead engine without a retry.
func checkRetry(t *testing.T, f *fleet) {
	sys := longSystem("retry")
	first := chatBody(sys, "Remember this.", 1, false)
	r1, _ := postChat(t, f.proxy, first)
	warm := r1.Header.Get("X-Inference-Cache-Replica")
	f.waitIndexed(first, warm, 20*time.Second)
	dead := f.sim(warm)
	dead.Kill()
	poll.Eventually(t, 20*time.Second, 10*time.Millisecond, func() (bool, string) {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(dead.url, "http://"), time.Second)
		if err != nil {
			return true, "" // refused: the port is closed
		}
		c.Close()
		return false, "the killed engine's port still accepts"
	})
	r2, c2 := postChat(t, f.proxy, chatBody(sys, "What did I say?", 1, false))
	if got := r2.Header.Get("X-Inference-Cache-Replica"); got == warm || got == "" || r2.Header.Get("X-Inference-Cache-Retried-From") != warm {
		t.Fatalf("after killing %s: served by %q, retried from %q; want another engine after a retry from %s",
			warm, got, r2.Header.Get("X-Inference-Cache-Retried-From"), warm)
	}
	if len(c2.Choices) != 1 {
		t.Fatalf("retried response %+v", c2)
	}
	r3, _ := postChat(t, f.proxy, chatBody(sys, "Once more.", 1, false))
	if got := r3.Header.Get("X-Inference-Cache-Replica"); got == warm || r3.Header.Get("X-Inference-Cache-Retried-From") != "" {
		t.Fatalf("the next request went to %s (retried from %q): the dead engine must have left the candidates", got, r3.Header.Get("X-Inference-Cache-Retried-From"))
	}
	if n := metricSum(t, f.proxy.url+"/metrics", "inference_cache_proxy_retries_total", `cause="refused"`); n != 1 {
		t.Fatalf("retries_total{cause=refused} = %v, want 1", n)
	}
}

// With every cluster node down the proxy still serves every request,
// picked by load, and counts the fail-open picks.
func checkFailOpen(t *testing.T, f *fleet) {
	for _, p := range f.c.procs {
		p.Kill()
	}
	before := metricSum(t, f.proxy.url+"/metrics", "inference_cache_proxy_fail_open_picks_total")
	sys := longSystem("fail-open")
	first := ""
	for i := 0; i < 4; i++ {
		r, c := postChat(t, f.proxy, chatBody(sys, "Question "+strconv.Itoa(i), 1, false))
		reason, replica := r.Header.Get("X-Inference-Cache-Reason"), r.Header.Get("X-Inference-Cache-Replica")
		if i == 0 {
			first = replica
		}
		// The first is picked by load; later ones may follow the proxy's
		// own provisional pick of the first (contract §5.12), which needs
		// no cluster.
		own := i > 0 && reason == "PREFIX_MATCH" && replica == first
		if (reason != "LOAD" && !own) || len(c.Choices) != 1 {
			t.Fatalf("request %d with the cluster down: reason %q on %s (first on %s), %+v; want served, picked by LOAD or by its own earlier pick",
				i, reason, replica, first, c)
		}
	}
	if n := metricSum(t, f.proxy.url+"/metrics", "inference_cache_proxy_fail_open_picks_total"); n-before != 4 {
		t.Fatalf("fail_open_picks_total grew by %v, want 4", n-before)
	}
}

// countingBackend is an engine stand-in serving the fleet's model that
// counts the completion requests it receives.
func countingBackend(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/health":
		case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
			_ = json.NewEncoder(w).Encode(openai.ModelList{Object: "list", Data: []openai.ModelCard{{ID: fleetModel, Object: "model"}}})
		default:
			posts.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok": true}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &posts
}

// SIGHUP rereads the backends file: the backend removed from it takes no
// more requests, the one added takes them.
func checkReload(t *testing.T, f *fleet) {
	a, aPosts := countingBackend(t)
	b, bPosts := countingBackend(t)
	file := filepath.Join(t.TempDir(), "backends.yaml")
	write := func(id, url string) {
		if err := os.WriteFile(file, []byte("backends:\n  - replica_id: "+id+"\n    url: "+url+"\n    model: "+fleetModel+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("old", a.URL)
	p := f.startProxy("proxy-reload", nil, "--backends", file)
	post := func() string {
		resp, err := http.Post(p.url+"/v1/completions", "application/json", strings.NewReader(`{"model": "qwen3", "prompt": "hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-Inference-Cache-Replica")
	}
	if got := post(); got != "old" || aPosts.Load() != 1 {
		t.Fatalf("before the reload: served by %q, backend posts %d", got, aPosts.Load())
	}
	write("new", b.URL)
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		resp, err := http.Get(p.url + "/health")
		if err != nil {
			t.Fatal(err)
		}
		var h struct {
			Backends []struct {
				ReplicaID string `json:"replica_id"`
				Healthy   bool   `json:"healthy"`
			} `json:"backends"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		// A new backend takes traffic once its first health check passed.
		ok := len(h.Backends) == 1 && h.Backends[0].ReplicaID == "new" && h.Backends[0].Healthy
		return ok, fmt.Sprintf("backends after SIGHUP: %+v, want only \"new\", healthy", h.Backends)
	})
	if got := post(); got != "new" || bPosts.Load() != 1 || aPosts.Load() != 1 {
		t.Fatalf("after the reload: served by %q, posts old=%d new=%d", got, aPosts.Load(), bPosts.Load())
	}
}
