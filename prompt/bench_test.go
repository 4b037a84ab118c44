package prompt

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/openai"
)

// chatBody4k is a chat request of about 20 KB of text (about 4,000 Qwen3
// tokens): a long system prompt and eight turns. salt varies the words
// (0: the same text every time).
func chatBody4k(salt int) []byte {
	sentence := "The prefix cache keeps the attention keys and values of a prompt's leading blocks, so a request that shares them skips their prefill. "
	if salt > 0 {
		r := rand.New(rand.NewPCG(uint64(salt), 7))
		words := strings.Fields(sentence)
		for i := range words {
			words[i] += fmt.Sprintf("%c%c", 'a'+rune(r.IntN(26)), 'a'+rune(r.IntN(26)))
		}
		sentence = strings.Join(words, " ") + " "
	}
	msgs := []map[string]any{{"role": "system", "content": strings.Repeat(sentence, 96)}}
	for i := range 8 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": fmt.Sprintf("Turn %d. %s", i, strings.Repeat(sentence, 6))})
	}
	body, _ := json.Marshal(map[string]any{"model": "qwen3", "messages": msgs})
	return body
}

// BenchmarkTokens_Chat4kTokens is render + tokenize of a 4,000-token chat
// request already decoded (the gateway's cost on top of decoding): the
// same prompt every time, so the tokenizer's word cache is warm, as for a
// fleet's repeated system prompts.
func BenchmarkTokens_Chat4kTokens(b *testing.B) {
	benchTokens(b, 1)
}

// BenchmarkTokens_Chat4kTokensDistinct is the same on 64 prompts whose
// words differ, cycled: most words miss the tokenizer's word cache.
func BenchmarkTokens_Chat4kTokensDistinct(b *testing.B) {
	benchTokens(b, 64)
}

func benchTokens(b *testing.B, variants int) {
	reg := New(fixtures.ModelsDir(b, "qwen3"), Options{})
	reqs := make([]*openai.Request, variants)
	for i := range reqs {
		salt := i
		if variants == 1 {
			salt = 0
		}
		req, err := openai.DecodeChat(chatBody4k(salt))
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = req
	}
	ctx := context.Background()
	p, err := reg.Tokens(ctx, reqs[0])
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := reg.Tokens(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(len(p.TokenIDs)), "tokens")
}

// BenchmarkDecodeChat4kTokens is openai.DecodeChat of the same body, the
// step before: together they are the gateway's prompt work per request.
func BenchmarkDecodeChat4kTokens(b *testing.B) {
	body := chatBody4k(0)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := openai.DecodeChat(body); err != nil {
			b.Fatal(err)
		}
	}
}
