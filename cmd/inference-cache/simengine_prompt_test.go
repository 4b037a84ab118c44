package main

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/internal/poll"
	"github.com/inference-cache/inference-cache/internal/syncbuf"
	"github.com/inference-cache/inference-cache/openai"
)

// startSimEngine runs `sim-engine` with args in process until the test
// ends and returns its base URL.
func startSimEngine(t *testing.T, args ...string) string {
	t.Helper()
	cmd := newRootCmd()
	var logs syncbuf.Buffer
	cmd.SetOut(&logs)
	cmd.SetErr(&logs)
	cmd.SetArgs(append([]string{"sim-engine", "--listen", "127.0.0.1:0"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sim-engine: %v", err)
		}
	})
	addr := regexp.MustCompile(`http=(http://127\.0\.0\.1:\d+)`)
	var url string
	poll.Eventually(t, 20*time.Second, 5*time.Millisecond, func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("sim-engine exited: %v\n%s", err, logs.String())
		default:
		}
		if m := addr.FindStringSubmatch(logs.String()); m != nil {
			url = m[1]
			return true, ""
		}
		return false, "no serving line logged: " + logs.String()
	})
	return url
}

// The sim engine prefills a chat request as vLLM does: the model's chat
// template rendered, then tokenized without added special tokens. The
// reference tokenizer gives 15 ids for this render (tokenizer_vectors).
func TestSimEngineCmd_ChatPrefillIsTheRenderedTemplate(t *testing.T) {
	base := startSimEngine(t, "--replica-id", "sim-0", "--model", "qwen3", "--models-dir", fixtures.ModelsDir(t, "qwen3"),
		"--prefill-tps", "1000000", "--decode-tps", "100000")
	post := func(body string) (int, openai.ChatCompletionResponse, string) {
		t.Helper()
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var raw json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&raw)
		var r openai.ChatCompletionResponse
		_ = json.Unmarshal(raw, &r)
		return resp.StatusCode, r, string(raw)
	}
	code, r, raw := post(`{"model": "qwen3", "max_tokens": 1, "messages": [{"role": "user", "content": "What is 2+2?"}]}`)
	if code != 200 || r.Usage.PromptTokens != 15 {
		t.Fatalf("%d %s: want 200 and 15 prompt tokens (<|im_start|>user\\nWhat is 2+2?<|im_end|>\\n<|im_start|>assistant\\n)", code, raw)
	}
	if code, _, raw := post(`{"model": "qwen3", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}`); code != 400 || !strings.Contains(raw, "not supported by this engine") {
		t.Fatalf("multimodal: %d %s, want a 400", code, raw)
	}
}
