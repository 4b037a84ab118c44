package openai

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func marshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func str(s string) *string { return &s }

// The chunks of a chat stream carry exactly the keys vLLM's
// exclude_unset dump gives them (serving_chat.py): the role chunk, a
// content chunk, the finishing chunk with stop_reason null, and the usage
// chunk without choices and, without cached tokens, without details.
func TestChatChunks_KeysAsVLLMDumpsThem(t *testing.T) {
	base := ChatCompletionChunk{ID: "chatcmpl-1", Object: ObjectChatChunk, Created: 1700000000, Model: "m"}
	role := base
	role.Choices = []ChatChunkChoice{{Delta: ChatDelta{Role: str("assistant"), Content: str("")}}}
	want := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`
	if got := marshal(t, role); got != want {
		t.Errorf("role chunk\n got  %s\n want %s", got, want)
	}
	last := base
	last.Choices = []ChatChunkChoice{{Delta: ChatDelta{Content: str(" tok")}, FinishReason: str(FinishLength), StopReason: NullStopReason}}
	want = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":"length","stop_reason":null}]}`
	if got := marshal(t, last); got != want {
		t.Errorf("finishing chunk\n got  %s\n want %s", got, want)
	}
	usage := base
	usage.Choices = []ChatChunkChoice{}
	usage.Usage = &StreamUsage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12}
	want = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2}}`
	if got := marshal(t, usage); got != want {
		t.Errorf("usage chunk\n got  %s\n want %s", got, want)
	}
	usage.Usage.PromptTokensDetails = &PromptTokensDetails{CachedTokens: 8}
	if got := marshal(t, usage); !strings.Contains(got, `"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}`) {
		t.Errorf("usage chunk with cached tokens: %s", got)
	}
}

// A completion chunk is dumped with every field (serving_completion.py
// exclude_unset=False): logprobs, finish_reason, stop_reason and usage
// are null.
func TestCompletionChunk_EveryFieldAsVLLMDumpsIt(t *testing.T) {
	c := CompletionChunk{ID: "cmpl-1", Object: ObjectTextCompletion, Created: 1, Model: "m", Choices: []CompletionChunkChoice{{Text: " tok"}}}
	want := `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`
	if got := marshal(t, c); got != want {
		t.Errorf("chunk\n got  %s\n want %s", got, want)
	}
}

// A non-streamed chat response in the shape protocol.py's model_dump
// gives it (every field, in declaration order) decodes into the types,
// yields the cached tokens, and encodes back byte for byte.
func TestChatCompletionResponse_DecodesAVLLMReply(t *testing.T) {
	reply := `{"id":"chatcmpl-8d3f","object":"chat.completion","created":1754000000,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":null},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":20,"total_tokens":23,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":16}},"prompt_logprobs":null,"kv_transfer_params":null}`
	var r ChatCompletionResponse
	if err := json.Unmarshal([]byte(reply), &r); err != nil {
		t.Fatal(err)
	}
	if r.Choices[0].Message.Content != "Hello!" || r.Usage.CachedTokens() != 16 || r.Usage.PromptTokens != 20 {
		t.Fatalf("decoded %+v", r)
	}
	if got := marshal(t, r); got != reply {
		t.Fatalf("re-encoded differs\n got  %s\n want %s", got, reply)
	}
}

// The error body is vLLM's ErrorResponse: code the HTTP status, param
// the field, null without one; an error that is not an *Error is a 500.
func TestWriteError_VLLMErrorBody(t *testing.T) {
	rec := httptest.NewRecorder()
	if st := WriteError(rec, Errorf("messages[2].content", "expected a string")); st != 400 {
		t.Fatalf("status %d", st)
	}
	want := `{"error":{"message":"messages[2].content: expected a string","type":"BadRequestError","param":"messages[2].content","code":400}}` + "\n"
	if rec.Code != 400 || rec.Body.String() != want || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
	}
	rec = httptest.NewRecorder()
	WriteError(rec, &Error{Status: http.StatusNotFound, Message: "The model `x` does not exist."})
	want = `{"error":{"message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}}` + "\n"
	if rec.Code != 404 || rec.Body.String() != want {
		t.Fatalf("got %d %q", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	WriteError(rec, errors.New("boom"))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"type":"InternalServerError"`) {
		t.Fatalf("got %d %q", rec.Code, rec.Body.String())
	}
}

// The SSE writer flushes each event as it is written (a client sees it
// before the next), and the reader returns each event's data and [DONE].
func TestSSE_EachEventReachesTheClientBeforeTheNext(t *testing.T) {
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := NewSSEWriter(w)
		if err != nil {
			t.Error(err)
			return
		}
		for i := range 3 {
			if err := s.WriteJSON(map[string]int{"n": i}); err != nil {
				return
			}
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
		_ = s.WriteDone()
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Fatalf("content type %q", ct)
	}
	rd := NewSSEReader(resp.Body)
	for i := range 3 {
		// The server is blocked until we ask for the next event: this one
		// arrived on its own flush.
		data, err := rd.Next()
		if err != nil || string(data) != `{"n":`+string(rune('0'+i))+`}` {
			t.Fatalf("event %d: %q, %v", i, data, err)
		}
		next <- struct{}{}
	}
	if data, err := rd.Next(); err != nil || string(data) != Done {
		t.Fatalf("last event %q, %v; want [DONE]", data, err)
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("after [DONE]: %v, want io.EOF", err)
	}
}

// The reader joins multi-line data and skips comments and other fields.
func TestSSEReader_SkipsNonDataLines(t *testing.T) {
	rd := NewSSEReader(strings.NewReader(": keep-alive\n\nevent: x\ndata: a\ndata: b\nid: 3\n\ndata:c\n"))
	for _, want := range []string{"a\nb", "c"} {
		if got, err := rd.Next(); err != nil || string(got) != want {
			t.Fatalf("got %q, %v; want %q", got, err, want)
		}
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}
