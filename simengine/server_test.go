package simengine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/openai"
)

// readEvent reads the next stream event and decodes it into v.
func readEvent(t *testing.T, rd *openai.SSEReader, v any) string {
	t.Helper()
	data, err := rd.Next()
	if err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	if v != nil {
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
	}
	return string(data)
}

// A chat stream arrives chunk by chunk while the request still runs: the
// role and first token come out of the prefill, each later token only
// when the engine's clock has moved one decode step (100 ms at 10
// tokens/s), the last with finish_reason "length", then the usage chunk
// and [DONE]. The test moves the clock itself, so nothing depends on how
// fast the machine is.
func TestStream_ChunksArriveBeforeTheRequestFinishes(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 100, PrefillTPS: 1000, DecodeTPS: 10})
	resp := te.post(t, context.Background(), "/v1/chat/completions", map[string]any{
		"model": "sim-model", "messages": []map[string]any{{"role": "user", "content": "Hello there, engine."}},
		"max_tokens": 3, "stream": true, "stream_options": map[string]any{"include_usage": true},
	})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	rd := openai.NewSSEReader(resp.Body)
	if te.pending() != 1 {
		t.Fatalf("%d timers pending, want the prefill's", te.pending())
	}
	te.clock.Step() // the prefill ends: the first token
	var c openai.ChatCompletionChunk
	readEvent(t, rd, &c)
	if d := c.Choices[0].Delta; d.Role == nil || *d.Role != "assistant" || d.Content == nil || *d.Content != "" || c.Object != openai.ObjectChatChunk || !strings.HasPrefix(c.ID, "chatcmpl-") {
		t.Fatalf("first chunk %+v, want the role chunk", c)
	}
	for i := 1; i <= 3; i++ {
		var tok openai.ChatCompletionChunk
		raw := readEvent(t, rd, &tok)
		ch := tok.Choices[0]
		if *ch.Delta.Content != " tok" || ch.Delta.Role != nil || tok.ID != c.ID {
			t.Fatalf("token %d chunk %s", i, raw)
		}
		if i < 3 {
			if ch.FinishReason != nil {
				t.Fatalf("token %d of 3 carries a finish reason: %s", i, raw)
			}
			// The client holds token i and the request is still running.
			fams := te.scrape(t)
			if r, g := metric(fams, "vllm:num_requests_running"), metric(fams, "vllm:generation_tokens_total"); r != 1 || g != float64(i) {
				t.Fatalf("after token %d: running %v, generated %v; want 1 and %d", i, r, g, i)
			}
			te.clock.Advance(100 * time.Millisecond)
			continue
		}
		if ch.FinishReason == nil || *ch.FinishReason != openai.FinishLength || !strings.Contains(raw, `"stop_reason":null`) {
			t.Fatalf("last chunk %s, want finish_reason length and stop_reason null", raw)
		}
	}
	var u openai.ChatCompletionChunk
	raw := readEvent(t, rd, &u)
	if len(u.Choices) != 0 || u.Usage == nil || u.Usage.CompletionTokens != 3 || u.Usage.PromptTokens != len("user:Hello there, engine.\n") {
		t.Fatalf("usage chunk %s", raw)
	}
	if d := readEvent(t, rd, nil); d != openai.Done {
		t.Fatalf("last event %q, want [DONE]", d)
	}
}

// A client that goes away mid-stream stops the request in the engine:
// the cancellation is counted at the decode stage, the decode timer is
// stopped, and the request's blocks are released.
func TestStream_ClientCancellationReachesTheEngine(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 100, PrefillTPS: 1000, DecodeTPS: 10})
	ctx, cancel := context.WithCancel(context.Background())
	resp := te.post(t, ctx, "/v1/completions", map[string]any{"model": "sim-model", "prompt": seq(1, 40), "max_tokens": 50, "stream": true})
	rd := openai.NewSSEReader(resp.Body)
	te.clock.Step()
	var c openai.CompletionChunk
	if raw := readEvent(t, rd, &c); c.Choices[0].Text != " tok" || c.Object != openai.ObjectTextCompletion || !strings.Contains(raw, `"usage":null`) {
		t.Fatalf("first completion chunk %s", raw)
	}
	cancel()
	poll.Eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
		n := metric(te.scrape(t), CancelledMetric, "stage", StageDecode)
		return n == 1, fmt.Sprintf("%v decode cancellations counted, want 1", n)
	})
	fams := te.scrape(t)
	if r, u := metric(fams, "vllm:num_requests_running"), metric(fams, "vllm:kv_cache_usage_perc"); r != 0 || u != 0 {
		t.Fatalf("after cancellation running %v, kv usage %v; want 0, 0", r, u)
	}
	if n := te.pending(); n != 0 {
		t.Fatalf("%d timers still pending, want the decode stopped", n)
	}
}

// A completion without streaming: the text is max_tokens filler tokens,
// the finish reason "length", and a token-id prompt is counted as sent.
func TestServer_CompletionResponse(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 100, PrefillTPS: 1000, DecodeTPS: 1000})
	code, body := te.postDriven(t, "/v1/completions", map[string]any{"model": "sim-model", "prompt": "abc", "max_tokens": 3, "temperature": 0})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var r openai.CompletionResponse
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	if r.Object != "text_completion" || r.Model != "sim-model" || !strings.HasPrefix(r.ID, "cmpl-") || len(r.Choices) != 1 ||
		r.Choices[0].Text != " tok tok tok" || r.Choices[0].FinishReason != "length" || r.Usage != (openai.Usage{PromptTokens: 3, CompletionTokens: 3, TotalTokens: 6}) {
		t.Fatalf("response %s", body)
	}
	code, body = te.postDriven(t, "/v1/completions", map[string]any{"model": "sim-model", "prompt": "abc"})
	if err := json.Unmarshal(body, &r); code != 200 || err != nil || r.Usage.CompletionTokens != openai.DefaultCompletionMaxTokens {
		t.Fatalf("without max_tokens: %d %s, want %d tokens", code, body, openai.DefaultCompletionMaxTokens)
	}
}

// A completion stream without usage ends with the finishing chunk and
// [DONE]; the text of its chunks is the whole output.
func TestServer_CompletionStreamEndsWithDone(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 100, PrefillTPS: 1000, DecodeTPS: 1000})
	stop := make(chan struct{})
	defer close(stop)
	go drive(te.clock, stop)
	resp := te.post(t, context.Background(), "/v1/completions", map[string]any{"model": "sim-model", "prompt": "abc", "max_tokens": 5, "stream": true})
	rd := openai.NewSSEReader(resp.Body)
	var text strings.Builder
	var last openai.CompletionChunk
	for {
		data, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if string(data) == openai.Done {
			break
		}
		last = openai.CompletionChunk{}
		if err := json.Unmarshal(data, &last); err != nil || last.Usage != nil {
			t.Fatalf("chunk %s (%v): no usage chunk without include_usage", data, err)
		}
		text.WriteString(last.Choices[0].Text)
	}
	if text.String() != strings.Repeat(" tok", 5) || last.Choices[0].FinishReason == nil || *last.Choices[0].FinishReason != "length" {
		t.Fatalf("streamed %q, last chunk %+v", text.String(), last)
	}
}

// Bad requests get vLLM's error body naming the field and the limit, and
// reach no engine.
func TestServer_BadRequests(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 100, PrefillTPS: 1000, DecodeTPS: 1000})
	cases := []struct {
		path  string
		body  map[string]any
		code  int
		param string
		text  string
	}{
		{"/v1/chat/completions", map[string]any{"model": "other", "messages": []map[string]any{{"role": "user", "content": "a"}}}, 404, "model", "The model `other` does not exist."},
		{"/v1/completions", map[string]any{"model": "sim-model", "prompt": seq(1, 1590), "max_tokens": 20}, 400, "max_tokens", "maximum context length is 1600 tokens"},
		{"/v1/completions", map[string]any{"model": "sim-model", "prompt": seq(1, 1600), "max_tokens": 1}, 400, "prompt", "you requested 1601 tokens"},
		{"/v1/chat/completions", map[string]any{"model": "sim-model", "messages": []map[string]any{{"role": "user", "content": strings.Repeat("x", 1600)}}}, 400, "messages", "in the messages"},
		{"/v1/completions", map[string]any{"model": "sim-model", "prompt": []string{"a", "b"}}, 400, "prompt", "a batch of 2 prompts"},
		{"/v1/completions", map[string]any{"model": "sim-model", "prompt": "a", "n": 3}, 400, "n", "only n = 1"},
		{"/v1/chat/completions", map[string]any{"model": "sim-model", "messages": []any{"hi"}}, 400, "messages[0]", "message object"},
	}
	for _, tc := range cases {
		resp := te.post(t, context.Background(), tc.path, tc.body)
		var e openai.ErrorResponse
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tc.code || e.Error.Code != tc.code || e.Error.Param == nil || *e.Error.Param != tc.param || !strings.Contains(e.Error.Message, tc.text) {
			t.Errorf("%s %v:\n got %d %+v", tc.path, tc.body["model"], resp.StatusCode, e.Error)
		}
	}
	if n := metric(te.scrape(t), "vllm:prefix_cache_queries_total"); n != 0 {
		t.Fatalf("%v tokens queried: a bad request reached the engine", n)
	}
}

// A body over the limit gets a 413 before it is decoded.
func TestServer_BodyOverTheLimit(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 10})
	srv := httptest.NewServer(NewServer(te.Engine, testPrompter{}, ServerOptions{MaxBodyBytes: 100}))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model": "sim-model", "prompt": "`+strings.Repeat("x", 200)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || !strings.Contains(string(b), `"code":413`) || !strings.Contains(string(b), "limit of 100 bytes") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// /v1/models lists the served model as vLLM's ModelList; /health is 200.
func TestServer_ModelsAndHealth(t *testing.T) {
	te := newTestEngine(t, Config{KVBlocks: 10, BlockSize: 32})
	resp, err := http.Get(te.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l openai.ModelList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	if l.Object != "list" || len(l.Data) != 1 || l.Data[0].ID != "sim-model" || l.Data[0].OwnedBy != "vllm" || l.Data[0].MaxModelLen != 320 || len(l.Data[0].Permission) != 1 {
		t.Fatalf("models %+v", l)
	}
	h, err := http.Get(te.srv.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	h.Body.Close()
	if h.StatusCode != 200 {
		t.Fatalf("/health %d", h.StatusCode)
	}
}
