package chattemplate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/openai"
)

// benchBody is a chat request of about 16 KB of text (roughly 4,000
// tokens): a long system prompt and eight turns.
func benchBody(b *testing.B) []byte {
	b.Helper()
	sentence := "The prefix cache keeps the attention keys and values of a prompt's leading blocks, so a request that shares them skips their prefill. "
	msgs := []map[string]any{{"role": "system", "content": strings.Repeat(sentence, 64)}}
	for i := range 8 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": fmt.Sprintf("Turn %d. %s", i, strings.Repeat(sentence, 6))})
	}
	body, err := json.Marshal(map[string]any{"model": "qwen3", "messages": msgs})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

func BenchmarkRender_Chat4kTokens(b *testing.B) {
	tmpl := qwen3(b)
	req, err := openai.DecodeChat(benchBody(b))
	if err != nil {
		b.Fatal(err)
	}
	out, err := tmpl.Render(req, testNow)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := tmpl.Render(req, testNow); err != nil {
			b.Fatal(err)
		}
	}
}
