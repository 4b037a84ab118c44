package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/gateway"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/openai"
)

// A request goes to the replica the hint names, its body byte for byte,
// and the answer comes back with the backend's headers and the routing
// headers.
func TestProxy_ForwardsToTheWarmReplicaWithRoutingHeaders(t *testing.T) {
	a, b := newEngine(t, "qwen3"), newEngine(t, "qwen3")
	tp := newTestProxy(t, prefixMatch("b", 160), Options{}, a, b)
	body := tp.chat("What is a KV cache?", false)
	resp, got := tp.post(t, "/v1/chat/completions", body)
	if resp.StatusCode != 200 || string(got) != body || resp.Header.Get("X-Engine") != "echo" {
		t.Fatalf("%d %q (engine header %q): want the echo of the body", resp.StatusCode, got, resp.Header.Get("X-Engine"))
	}
	if r := resp.Header.Get(HeaderReplica); r != "b" || resp.Header.Get(HeaderReason) != "PREFIX_MATCH" || resp.Header.Get(HeaderMatchedTokens) != "160" {
		t.Fatalf("headers %v: want replica b, PREFIX_MATCH, 160", resp.Header)
	}
	if a.posts.Load() != 0 || b.posts.Load() != 1 {
		t.Fatalf("posts a=%d b=%d, want only b", a.posts.Load(), b.posts.Load())
	}
}

// Bad input gets an OpenAI-style error with 400, 404 or 413, and nothing
// reaches a backend.
func TestProxy_BadInputNeverReachesABackend(t *testing.T) {
	e := newEngine(t, "qwen3")
	tp := newTestProxy(t, prefixMatch("a", 160), Options{MaxBodyBytes: 4096}, e)
	cases := []struct {
		name, path, body string
		chunked          bool
		status           int
		typ, param, msg  string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"model": "qwen3", "messages": [`, false, 400, "BadRequestError", "", "malformed JSON"},
		{"not an object", "/v1/completions", `["qwen3"]`, false, 400, "BadRequestError", "", "not a JSON object"},
		{"no model", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}]}`, false, 400, "BadRequestError", "model", "required"},
		{"bad field", "/v1/chat/completions", `{"model": "qwen3", "messages": [{"content": "x"}]}`, false, 400, "BadRequestError", "messages[0].role", "required"},
		{"unknown model", "/v1/completions", `{"model": "gpt-9", "prompt": "x"}`, false, 404, "NotFoundError", "model", "The model `gpt-9` does not exist."},
		{"over the limit", "/v1/completions", `{"model": "qwen3", "prompt": "` + strings.Repeat("x", 5000) + `"}`, false, 413, "RequestEntityTooLargeError", "", "over the limit of 4096 bytes"},
		{"over the limit, chunked", "/v1/completions", `{"model": "qwen3", "prompt": "` + strings.Repeat("x", 5000) + `"}`, true, 413, "RequestEntityTooLargeError", "", "over the limit of 4096 bytes"},
	}
	for _, c := range cases {
		var rd io.Reader = strings.NewReader(c.body)
		if c.chunked {
			rd = io.MultiReader(rd) // no length known: sent chunked
		}
		resp, err := http.Post(tp.srv.URL+c.path, "application/json", rd)
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
		if resp.StatusCode != c.status || derr != nil || eb.Error.Type != c.typ || eb.Error.Code != c.status || param != c.param || !strings.Contains(eb.Error.Message, c.msg) {
			t.Errorf("%s: %d %+v (%v), want %d %s param %q message with %q", c.name, resp.StatusCode, eb, derr, c.status, c.typ, c.param, c.msg)
		}
		if resp.Header.Get(HeaderReason) != ReasonNone {
			t.Errorf("%s: reason header %q, want NONE", c.name, resp.Header.Get(HeaderReason))
		}
	}
	if n := e.posts.Load(); n != 0 {
		t.Fatalf("the backend received %d requests, want none", n)
	}
}

// A backend that refuses the connection is replaced by the next-best
// once, and leaves the candidates at once.
func TestProxy_RetriesOnARefusedConnection(t *testing.T) {
	a, b := newEngine(t, "qwen3"), newEngine(t, "qwen3")
	tp := newTestProxy(t, prefixMatch("a", 160), Options{}, a, b)
	a.Close() // its port now refuses connections; the pool still thinks it healthy
	resp, got := tp.post(t, "/v1/chat/completions", tp.chat("hi", false))
	if resp.StatusCode != 200 || resp.Header.Get(HeaderReplica) != "b" || resp.Header.Get(HeaderRetriedFrom) != "a" || resp.Header.Get(HeaderReason) != gateway.ReasonLoad {
		t.Fatalf("%d %s %v: want 200 from b after a refused, reason LOAD", resp.StatusCode, got, resp.Header)
	}
	if c := tp.pool.Candidates("qwen3", nil); !slices.Equal(c, []string{"b"}) {
		t.Fatalf("candidates after the refusal %v, want [b]", c)
	}
	if tp.gw.InFlight("a") != 0 || tp.gw.InFlight("b") != 0 {
		t.Fatal("flights left open")
	}
}

// A 503 before the body is retried on the next-best; a second 503 is
// passed through.
func TestProxy_RetriesOnceOn503(t *testing.T) {
	a, b := newEngine(t, "qwen3"), newEngine(t, "qwen3")
	busy := func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error": {"message": "busy"}}`))
	}
	a.setHandler(busy)
	tp := newTestProxy(t, prefixMatch("a", 160), Options{}, a, b)
	resp, _ := tp.post(t, "/v1/chat/completions", tp.chat("hi", false))
	if resp.StatusCode != 200 || resp.Header.Get(HeaderReplica) != "b" || resp.Header.Get(HeaderRetriedFrom) != "a" {
		t.Fatalf("%d %v: want 200 from b after a's 503", resp.StatusCode, resp.Header)
	}
	b.setHandler(busy)
	resp, got := tp.post(t, "/v1/chat/completions", tp.chat("hi", false))
	if resp.StatusCode != 503 || !strings.Contains(string(got), "busy") || a.posts.Load() != 2 || b.posts.Load() != 2 {
		t.Fatalf("%d %s, posts a=%d b=%d: want the second 503 passed through after one retry", resp.StatusCode, got, a.posts.Load(), b.posts.Load())
	}
}

// sseEngine streams a chat response: the role chunk, then, each time the
// test sends on next, one content chunk (three), then [DONE] at the
// fourth.
func sseEngine(next <-chan struct{}, done chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(200)
		rc := http.NewResponseController(w)
		send := func(s string) {
			_, _ = fmt.Fprintf(w, "data: %s\n\n", s)
			_ = rc.Flush()
		}
		send(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`)
		for i := 0; i < 3; i++ {
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
			send(fmt.Sprintf(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" tok%d"},"logprobs":null,"finish_reason":null}]}`, i))
		}
		select {
		case <-next:
		case <-r.Context().Done():
			return
		}
		send("[DONE]")
	}
}

// A stream is relayed event by event while the backend is still
// generating, and its first content chunk (not the role chunk) tells the
// gateway the prefill is over.
func TestProxy_StreamsChunkByChunkAndSpotsTheFirstToken(t *testing.T) {
	e := newEngine(t, "qwen3")
	next, done := make(chan struct{}), make(chan struct{})
	e.setHandler(sseEngine(next, done))
	tp := newTestProxy(t, &pb.LookupRouteResponse{ServedBy: "n1"}, Options{}, e)
	resp, err := http.Post(tp.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(tp.chat("hi", true)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := openai.NewSSEReader(bufio.NewReader(resp.Body))
	queued := func() float64 {
		d, err := tp.gw.Decide(context.Background(), gateway.Request{OpenAI: mustChat(t, tp.chat("probe", false)), Candidates: []string{"a"}})
		if err != nil {
			t.Fatal(err)
		}
		return d.Costs[0].QueuedTokens
	}
	ev, err := rd.Next()
	if err != nil || !strings.Contains(string(ev), `"role":"assistant"`) {
		t.Fatalf("first event %q %v", ev, err)
	}
	if q := queued(); q == 0 {
		t.Fatal("the role chunk was taken for the first token: no queued prefill left")
	}
	for i := 0; i < 3; i++ {
		next <- struct{}{}
		ev, err := rd.Next()
		if err != nil || !strings.Contains(string(ev), fmt.Sprintf(`" tok%d"`, i)) {
			t.Fatalf("event %d: %q %v", i, ev, err)
		}
		select {
		case <-done:
			t.Fatalf("event %d arrived only after the backend finished", i)
		default:
		}
		if i == 0 && queued() != 0 {
			t.Fatal("after the first content chunk the prefill still counts as queued")
		}
	}
	next <- struct{}{}
	if ev, err := rd.Next(); err != nil || string(ev) != openai.Done {
		t.Fatalf("last event %q %v", ev, err)
	}
}

func mustChat(t *testing.T, body string) *openai.Request {
	t.Helper()
	r, err := openai.DecodeChat([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The client going away ends the backend's request.
func TestProxy_ClientCancellationReachesTheBackend(t *testing.T) {
	e := newEngine(t, "qwen3")
	next, done := make(chan struct{}), make(chan struct{})
	e.setHandler(sseEngine(next, done))
	tp := newTestProxy(t, &pb.LookupRouteResponse{ServedBy: "n1"}, Options{}, e)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tp.srv.URL+"/v1/chat/completions", strings.NewReader(tp.chat("hi", true)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openai.NewSSEReader(resp.Body).Next(); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-done: // the handler returned on its request's context, without a content chunk sent
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's request did not end after the client went away")
	}
	// The proxy's handler returns just after the backend's.
	poll.Eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
		n := tp.gw.InFlight("a")
		return n == 0, fmt.Sprintf("%d requests still in flight on a", n)
	})
}

func TestProxy_RequestTimeoutGives504(t *testing.T) {
	e := newEngine(t, "qwen3")
	e.setHandler(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	tp := newTestProxy(t, &pb.LookupRouteResponse{ServedBy: "n1"}, Options{RequestTimeout: 50 * time.Millisecond}, e)
	resp, got := tp.post(t, "/v1/completions", `{"model": "qwen3", "prompt": "hi"}`)
	if resp.StatusCode != 504 || !strings.Contains(string(got), "request timeout") {
		t.Fatalf("%d %s, want a 504 naming the timeout", resp.StatusCode, got)
	}
}

// An unhealthy backend is not a candidate: with no healthy backend for
// the model the answer is 503, and /health says so.
func TestProxy_UnhealthyBackendsAreNotCandidates(t *testing.T) {
	e := newEngine(t, "qwen3")
	e.healthy.Store(false)
	tp := newTestProxy(t, prefixMatch("a", 160), Options{}, e)
	resp, got := tp.post(t, "/v1/completions", `{"model": "qwen3", "prompt": "hi"}`)
	if resp.StatusCode != 503 || !strings.Contains(string(got), "no healthy backend") || e.posts.Load() != 0 {
		t.Fatalf("%d %s: want 503 and nothing sent", resp.StatusCode, got)
	}
	hr, err := http.Get(tp.srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != 503 {
		t.Fatalf("/health %d with no healthy backend, want 503", hr.StatusCode)
	}
}

// /v1/models is the union of the backends' lists, one card per id.
func TestProxy_ModelsAreTheUnionOfTheBackends(t *testing.T) {
	a, b, c := newEngine(t, "qwen3"), newEngine(t, "llama"), newEngine(t, "qwen3")
	tp := newTestProxy(t, nil, Options{}, a, b, c)
	resp, err := http.Get(tp.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ml openai.ModelList
	if err := json.NewDecoder(resp.Body).Decode(&ml); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ml.Data {
		ids = append(ids, m.ID)
	}
	if ml.Object != "list" || !slices.Equal(ids, []string{"llama", "qwen3"}) || ml.Data[1].MaxModelLen != 4096 {
		t.Fatalf("models %+v, want llama and qwen3 with the backends' cards", ml)
	}
}
