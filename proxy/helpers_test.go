package proxy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/prompt"
)

// fakeEngine is a backend: /health, /v1/models listing model, and the
// completion endpoints answered by handle (an echo of the body by
// default). It counts the completion requests it received.
type fakeEngine struct {
	*httptest.Server
	model   string
	posts   atomic.Int64
	healthy atomic.Bool
	mu      sync.Mutex
	handle  http.HandlerFunc
	bodies  [][]byte
}

func newEngine(t *testing.T, model string) *fakeEngine {
	t.Helper()
	e := &fakeEngine{model: model}
	e.healthy.Store(true)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		if !e.healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(openai.ModelList{Object: "list", Data: []openai.ModelCard{{ID: e.model, Object: "model", OwnedBy: "vllm", MaxModelLen: 4096}}})
	})
	post := func(w http.ResponseWriter, r *http.Request) {
		e.posts.Add(1)
		b, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.bodies = append(e.bodies, b)
		h := e.handle
		e.mu.Unlock()
		if h != nil {
			r.Body = io.NopCloser(strings.NewReader(string(b)))
			h(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Engine", "echo")
		_, _ = w.Write(b)
	}
	mux.HandleFunc("POST /v1/completions", post)
	mux.HandleFunc("POST /v1/chat/completions", post)
	e.Server = httptest.NewServer(mux)
	t.Cleanup(e.Close)
	return e
}

func (e *fakeEngine) setHandler(h http.HandlerFunc) {
	e.mu.Lock()
	e.handle = h
	e.mu.Unlock()
}

// quiet discards the logs of the proxy under test.
var quiet = slog.New(slog.DiscardHandler)

// fixedLookup answers every lookup with resp.
type fixedLookup struct{ resp *pb.LookupRouteResponse }

func (f fixedLookup) LookupRoute(context.Context, *pb.LookupRouteRequest) *pb.LookupRouteResponse {
	return f.resp
}

func prefixMatch(replica string, tokens uint32) *pb.LookupRouteResponse {
	return &pb.LookupRouteResponse{ReasonCode: pb.ReasonCode_PREFIX_MATCH, ServedBy: "n1",
		Replicas: []*pb.ReplicaHint{{ReplicaId: replica, MatchedTokens: tokens}}}
}

// testProxy is a Proxy over engines (replica ids a, b, … in order) with
// the gateway's lookup answering resp, served over HTTP.
type testProxy struct {
	*Proxy
	srv  *httptest.Server
	gw   *gateway.Gateway
	pool *Pool
	mdl  string
}

// testPrompts is one prompt registry for every test proxy: loading the
// model's tokenizer and template is most of a test's time, and the
// registry only caches what it loaded (the tests all use default options).
var testPrompts struct {
	once sync.Once
	reg  *prompt.Registry
}

func sharedPrompts(t *testing.T) *prompt.Registry {
	dir := fixtures.ModelsDir(t, "qwen3")
	testPrompts.once.Do(func() { testPrompts.reg = prompt.New(dir, prompt.Options{}) })
	return testPrompts.reg
}

func newTestProxy(t *testing.T, resp *pb.LookupRouteResponse, opts Options, engines ...*fakeEngine) *testProxy {
	t.Helper()
	reg := sharedPrompts(t)
	model := "qwen3"
	gw, err := gateway.New(gateway.Config{Prompts: reg, Lookup: fixedLookup{resp}})
	if err != nil {
		t.Fatal(err)
	}
	pool := NewPool(PoolOptions{HealthInterval: time.Hour, Logger: quiet})
	t.Cleanup(pool.Close)
	var bs []Backend
	for i, e := range engines {
		bs = append(bs, Backend{ReplicaID: string(rune('a' + i)), URL: e.URL, Model: e.model})
	}
	if err := pool.Set(bs); err != nil {
		t.Fatal(err)
	}
	opts.Gateway, opts.Pool = gw, pool
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	tp := &testProxy{Proxy: p, gw: gw, pool: pool, mdl: model}
	tp.srv = httptest.NewServer(p)
	t.Cleanup(tp.srv.Close)
	return tp
}

// chat is a chat request body for the test model with a long shared
// system prompt (several blocks) and the user message.
func (tp *testProxy) chat(user string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": tp.mdl, "stream": stream, "max_tokens": 4, "messages": []map[string]any{
		{"role": "system", "content": strings.Repeat("You route requests to warm replicas. ", 20)},
		{"role": "user", "content": user},
	}})
	return string(b)
}

func (tp *testProxy) post(t *testing.T, path, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(tp.srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}
