package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func scanAll(sc scanner, s string) []string {
	var out []string
	for i := 0; i < len(s); {
		e := sc(s, i)
		out = append(out, s[i:e])
		i = e
	}
	return out
}

// TestScanner_FollowsLeftmostFirstRegexSemantics pins the splits of the
// recognised patterns on the cases where alternation order and the
// \s+(?!\S) lookahead matter.
func TestScanner_FollowsLeftmostFirstRegexSemantics(t *testing.T) {
	qwen, _ := scannerFor(patternQwen2)
	cl100k, _ := scannerFor(patternCL100K)
	gpt2, _ := scannerFor(patternGPT2)
	for _, c := range []struct {
		name string
		sc   scanner
		in   string
		want []string
	}{
		{"qwen", qwen, "Hello world", []string{"Hello", " world"}},
		{"qwen", qwen, "  Hello", []string{" ", " Hello"}},
		{"qwen", qwen, "a  \n\n b", []string{"a", "  \n\n", " b"}},
		{"qwen", qwen, "x   ", []string{"x", "   "}},
		{"qwen", qwen, "x   y", []string{"x", "  ", " y"}},
		{"qwen", qwen, "1234", []string{"1", "2", "3", "4"}},
		{"qwen", qwen, "'s'T'Re'LL", []string{"'s", "'T", "'Re", "'LL"}},
		{"qwen", qwen, "don't", []string{"don", "'t"}},
		{"qwen", qwen, "'sam", []string{"'s", "am"}},
		{"qwen", qwen, "?!\n\nx", []string{"?!\n\n", "x"}},
		{"qwen", qwen, " ?!x", []string{" ?!", "x"}},
		{"qwen", qwen, "\t\tfoo", []string{"\t", "\tfoo"}},
		{"qwen", qwen, "\u00a0x \u2003", []string{"\u00a0x", " \u2003"}},
		{"qwen", qwen, "\r\n\r\n", []string{"\r\n\r\n"}},
		{"qwen", qwen, "(x)", []string{"(x", ")"}},
		{"cl100k", cl100k, "1234567", []string{"123", "456", "7"}},
		{"cl100k", cl100k, "x12", []string{"x", "12"}},
		{"gpt2", gpt2, "Hello  world", []string{"Hello", " ", " world"}},
		{"gpt2", gpt2, "I'm I'M", []string{"I", "'m", " I", "'", "M"}},
		{"gpt2", gpt2, "abc123 456", []string{"abc", "123", " 456"}},
		{"gpt2", gpt2, "\n\nfoo", []string{"\n", "\n", "foo"}},
		{"gpt2", gpt2, "a \t", []string{"a", " \t"}},
	} {
		if diff := cmp.Diff(c.want, scanAll(c.sc, c.in)); diff != "" {
			t.Errorf("%s %q (-want +got):\n%s", c.name, c.in, diff)
		}
	}
}

// TestScanner_PartitionsAnyText: on random text the pieces are non-empty
// and concatenate back to the input, for every pattern.
func TestScanner_PartitionsAnyText(t *testing.T) {
	alphabet := []rune("aZé中'sStTlLdDmMrReEvV0123４ \t\r\n\u00a0\u2003\u200b\u0301.,!?<>|🎉")
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range []string{patternGPT2, patternCL100K, patternQwen2} {
		sc, ok := scannerFor(p)
		if !ok {
			t.Fatalf("pattern %q not recognised", p)
		}
		for range 2000 {
			var b strings.Builder
			for range rng.IntN(24) {
				b.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			s := b.String()
			parts := scanAll(sc, s)
			for _, part := range parts {
				if part == "" {
					t.Fatalf("%q: empty piece", s)
				}
			}
			if strings.Join(parts, "") != s {
				t.Fatalf("%q: pieces %q do not rebuild the text", s, parts)
			}
		}
	}
}

// TestByteToRune_IsGPT2Table spot-checks the byte-to-unicode table.
func TestByteToRune_IsGPT2Table(t *testing.T) {
	for b, want := range map[byte]rune{' ': 'Ġ', '\n': 'Ċ', '\t': 'ĉ', 'A': 'A', 0: 'Ā', 0xAD: 'Ń', 0x7F: 'ġ', 0xFF: 'ÿ'} {
		if got := byteToRune[b]; got != want {
			t.Errorf("byteToRune[%#x] = %q, want %q", b, got, want)
		}
	}
	seen := map[rune]bool{}
	for _, r := range byteToRune {
		if seen[r] {
			t.Fatalf("rune %q mapped twice", r)
		}
		seen[r] = true
	}
}

// TestScanner_AgreesWithRegexp2 runs each recognised pattern through both
// the hand-written scanner and the general regexp2 engine on random text
// and on every golden text: the splits must be identical. This checks the
// scanners against an independent backtracking implementation of the
// pattern itself.
func TestScanner_AgreesWithRegexp2(t *testing.T) {
	var texts []string
	for _, gt := range loadGolden(t).Tokenizers {
		for _, c := range gt.Cases {
			texts = append(texts, c.Text)
		}
	}
	alphabet := []rune("aZé中'sStTlLdDmMrReEvV0123４ \t\r\n\u00a0\u2003\u200b\u0085\ufeff\u0301.,!?<>|🎉")
	rng := rand.New(rand.NewPCG(3, 4))
	n := 3000
	if raceEnabled {
		n = 300
	}
	for range n {
		var b strings.Builder
		for range rng.IntN(24) {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for _, p := range []string{patternGPT2, patternCL100K, patternQwen2} {
		sc, _ := scannerFor(p)
		re, err := regexMatcher(p)
		if err != nil {
			t.Fatalf("regexp2 cannot compile %q: %v", p, err)
		}
		fast := scannerMatcher(sc)
		bad := 0
		for _, s := range texts {
			want := re(s, nil, nil)
			got := fast(s, nil, nil)
			if !cmp.Equal(want, got, cmp.AllowUnexported(span{})) {
				bad++
				if bad <= 3 {
					t.Errorf("pattern %q on %q: regexp2 %v, scanner %v", p, s, want, got)
				}
			}
		}
	}
}

// The class table agrees with the predicates it stands for, on ASCII and
// beyond (where has defers to them).
func TestClass_HasIsThePredicate(t *testing.T) {
	preds := map[class]func(rune) bool{classL: isL, classN: isN, classS: isS, classOther: isOther, classCRLF: isCRLF}
	for c, in := range preds {
		for r := rune(0); r < 0x3000; r++ {
			if c.has(r) != in(r) {
				t.Fatalf("class %d: has(%U) = %v", c, r, c.has(r))
			}
		}
		if c.has(utf8.RuneError) != in(utf8.RuneError) {
			t.Fatalf("class %d: has(RuneError) = %v", c, c.has(utf8.RuneError))
		}
	}
}
