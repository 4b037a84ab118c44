package prompt

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/openai"
)

// chatSizes are chatBody4k's sentences in the system prompt and in each
// turn, by suffix letters.
var chatSizes = map[int]struct{ system, turn int }{0: {96, 6}, 2: {52, 3}, 4: {35, 2}}

// chatBody4k is a chat request of about 4,000 Qwen3 tokens: a long system
// prompt and eight turns of one sentence of 23 words, repeated. With
// letters 0 the text is the same every time (about 20 KB); otherwise each
// word of each sentence gets a suffix of letters random letters seeded by
// salt, and there are fewer sentences, the suffixed words taking more
// tokens: with 2 letters the words of all salts are about 15,500, which
// the tokenizer's word cache holds; with 4 they repeat too seldom to stay
// in it.
func chatBody4k(salt, letters int) []byte {
	r := rand.New(rand.NewPCG(uint64(salt), 7))
	words := strings.Fields("The prefix cache keeps the attention keys and values of a prompt's leading blocks, so a request that shares them skips their prefill.")
	sentences := func(n int) string {
		var sb strings.Builder
		for range n {
			for _, w := range words {
				sb.WriteString(w)
				for range letters {
					sb.WriteByte(byte('a' + r.IntN(26)))
				}
				sb.WriteByte(' ')
			}
		}
		return sb.String()
	}
	size := chatSizes[letters]
	msgs := []map[string]any{{"role": "system", "content": sentences(size.system)}}
	for i := range 8 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": fmt.Sprintf("Turn %d. %s", i, sentences(size.turn))})
	}
	body, _ := json.Marshal(map[string]any{"model": "qwen3", "messages": msgs})
	return body
}

// BenchmarkTokens_Chat4kTokens is render + tokenize of a 4,000-token chat
// request already decoded (the gateway's cost on top of decoding): the
// same prompt every time, so the tokenizer's word cache is warm, as for a
// fleet's repeated system prompts.
func BenchmarkTokens_Chat4kTokens(b *testing.B) {
	benchTokens(b, 1, 0)
}

// BenchmarkTokens_Chat4kTokensDistinct is the same on 64 prompts whose
// words differ, cycled; after the first cycle every word hits the
// tokenizer's word cache (text in the words of earlier traffic).
func BenchmarkTokens_Chat4kTokensDistinct(b *testing.B) {
	benchTokens(b, 64, 2)
}

// BenchmarkTokens_Chat4kTokensNewWords is the same on 64 prompts of
// about 75,000 words in all, so that nearly every word misses the word
// cache and goes through the BPE merges (the worst case).
func BenchmarkTokens_Chat4kTokensNewWords(b *testing.B) {
	benchTokens(b, 64, 4)
}

func benchTokens(b *testing.B, variants, letters int) {
	reg := New(fixtures.ModelsDir(b, "qwen3"), Options{})
	reqs := make([]*openai.Request, variants)
	for i := range reqs {
		req, err := openai.DecodeChat(chatBody4k(i+1, letters))
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
	cpu0 := processCPU(b)
	for b.Loop() {
		if _, err := reg.Tokens(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(i), "cpu-ns/op")
	b.ReportMetric(float64(len(p.TokenIDs)), "tokens")
}

// processCPU is the process's user + system CPU time so far, which the
// machine's other load does not inflate as it does wall-clock time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecodeChat4kTokens is openai.DecodeChat of the same body, the
// step before: together they are the gateway's prompt work per request.
func BenchmarkDecodeChat4kTokens(b *testing.B) {
	body := chatBody4k(0, 0)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	n := 0
	cpu0 := processCPU(b)
	for b.Loop() {
		if _, err := openai.DecodeChat(body); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(n), "cpu-ns/op")
}

// BenchmarkTokens_OneCharacter31MB is decode + render + tokenize of a 31 MB
// chat whose message is one character repeated (one pre-token of the
// whole length): its bytes allocated per op are what keying it costs in
// memory (B/op), for BENCHMARKS.md.
func BenchmarkTokens_OneCharacter31MB(b *testing.B) {
	reg := New(fixtures.ModelsDir(b, "qwen3"), Options{})
	if err := reg.Preload(context.Background(), "qwen3"); err != nil {
		b.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"model": "qwen3", "messages": []map[string]any{{"role": "user", "content": strings.Repeat("a", 31<<20)}}})
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		req, err := openai.DecodeOwned(openai.KindChat, body)
		if err != nil {
			b.Fatal(err)
		}
		p, err := reg.Tokens(context.Background(), req)
		if err != nil || !p.Partial {
			b.Fatalf("err %v, partial %v: want the prompt keyed on the ids before the word", err, p.Partial)
		}
	}
}
