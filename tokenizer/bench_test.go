package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/fixtures"
)

// benchTexts returns about 64 KB of English prose (the long Apache-2.0
// texts of the golden file, repeated) and of Go code (this package's
// sources).
func benchTexts(b *testing.B) map[string]string {
	b.Helper()
	g := loadGolden(b)
	var prose strings.Builder
	for _, c := range g.Tokenizers[0].Cases {
		if len(c.Text) >= 3000 {
			prose.WriteString(c.Text)
		}
	}
	var code strings.Builder
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		code.Write(data)
	}
	grow := func(s string) string {
		if s == "" {
			b.Fatal("no benchmark text")
		}
		return strings.Repeat(s, 64<<10/len(s)+1)[:64<<10]
	}
	return map[string]string{"english": grow(prose.String()), "code": grow(code.String())}
}

// cpuTime returns the user+system CPU time of the process, so that
// throughput per core can be reported on a busy machine where wall-clock
// ns/op is inflated by other processes.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEncode measures throughput per tokenizer and text (MB/s via
// SetBytes, tokens/s, and cpu-MB/s: bytes per CPU-second of the process,
// the per-core figure that stays meaningful on a loaded machine) in three
// modes:
//   - nocache: word cache disabled, every word goes through the merge loop;
//   - first:   an empty cache at the start of every pass, as for a prompt
//     never seen before (words repeated within it still hit);
//   - warm:    the same text again, as for a repeated system prompt.
func BenchmarkEncode(b *testing.B) {
	texts := benchTexts(b)
	for _, name := range []string{"qwen3", "mistral-like"} {
		tok, err := LoadDir(fixtures.TokenizerDir(b, name), LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range []string{"nocache", "first", "warm"} {
			for _, kind := range []string{"english", "code"} {
				text := texts[kind]
				b.Run(name+"/"+kind+"/"+mode, func(b *testing.B) {
					reset := func() {
						switch mode {
						case "nocache":
							tok.model.cache = nil
						case "first":
							tok.model.cache = newWordCache(DefaultWordCacheSize)
						}
					}
					reset()
					ids, _ := tok.Encode(text, true)
					b.SetBytes(int64(len(text)))
					b.ReportAllocs()
					b.ResetTimer()
					cpu0 := cpuTime()
					for b.Loop() {
						if mode == "first" {
							b.StopTimer()
							reset()
							b.StartTimer()
						}
						if _, err := tok.Encode(text, true); err != nil {
							b.Fatal(err)
						}
					}
					cpu := cpuTime() - cpu0
					b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
					if cpu > 0 {
						b.ReportMetric(float64(len(text))*float64(b.N)/cpu.Seconds()/1e6, "cpu-MB/s")
					}
				})
			}
		}
		tok.model.cache = newWordCache(DefaultWordCacheSize)
	}
}

// BenchmarkEncode_LongRuns measures prompts that are one long pre-token
// (32 KiB of spaces, of one letter, of newlines, of a repeated word), where
// the merge loop works on a 32k-symbol word instead of on short cached
// words. A 32 KiB run of spaces took about 11 ms with the merge heap alone
// (27 ms through the server in a fault trial); the rankQueue brings it to
// about 2 ms (2-core VM).
func BenchmarkEncode_LongRuns(b *testing.B) {
	runs := map[string]string{
		"spaces":   strings.Repeat(" ", 32<<10),
		"letter":   strings.Repeat("a", 32<<10),
		"newlines": strings.Repeat("\n", 32<<10),
		"word":     strings.Repeat("internationalization", 32<<10/20),
	}
	for _, name := range []string{"qwen3", "mistral-like"} {
		tok := sharedTokenizer(b, name)
		for _, kind := range []string{"spaces", "letter", "newlines", "word"} {
			text := runs[kind]
			b.Run(name+"/"+kind, func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					if _, err := tok.Encode(text, true); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
