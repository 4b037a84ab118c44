package tokenizer

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzEncode_NeverPanics feeds arbitrary text to the tiny fixture and to
// all three scanners: Encode must either refuse invalid UTF-8 or return
// ids, and the scanners must partition the text.
func FuzzEncode_NeverPanics(f *testing.F) {
	for _, s := range []string{"", "hello", "<s>héllo</s> x", "\xff", "'s'T 12\r\n\t", "▁▁ hello▁", "\u2003\u00a0\u200b"} {
		f.Add(s)
	}
	tok, err := LoadDir(tinyDir, LoadOptions{})
	if err != nil {
		f.Fatal(err)
	}
	scanners := []scanner{scanGPT2}
	for _, p := range []string{patternCL100K, patternQwen2} {
		sc, _ := scannerFor(p)
		scanners = append(scanners, sc)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := tok.Encode(s, true)
		if !utf8.ValidString(s) {
			if err == nil {
				t.Fatal("invalid UTF-8 accepted")
			}
			return
		}
		if err != nil || len(ids) < 2 {
			t.Fatalf("Encode(%q) = %v, %v", s, ids, err)
		}
		for _, sc := range scanners {
			if got := strings.Join(scanAll(sc, s), ""); got != s {
				t.Fatalf("scanner lost text: %q → %q", s, got)
			}
		}
	})
}

// TestEncode_LongWordsStayFast: a pathological prompt that is one huge
// pre-token (256 KiB of one letter or of spaces) still encodes quickly:
// the merge loop is O(n log n), not quadratic (which would take minutes
// here). The bound is loose for -race and busy machines.
func TestEncode_LongWordsStayFast(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the reference tokenizers")
	}
	n := 1 << 18
	if raceEnabled {
		n = 1 << 14 // the race detector slows the merge loop ~10×
	}
	for _, c := range []struct{ model, text string }{
		{"qwen3", strings.Repeat("a", n)},
		{"qwen3", strings.Repeat(" ", n)},
		{"mistral-like", strings.Repeat("a", n)},
		{"mistral-like", strings.Repeat("ab ", n/4)},
	} {
		tok := sharedTokenizer(t, c.model)
		start := time.Now()
		ids, err := tok.Encode(c.text, false)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 20*time.Second || len(ids) == 0 {
			t.Errorf("%s: %d bytes took %v for %d ids", c.model, len(c.text), d, len(ids))
		} else {
			t.Logf("%s: %d bytes → %d ids in %v", c.model, len(c.text), len(ids), d)
		}
	}
}
