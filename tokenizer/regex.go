package tokenizer

import (
	"fmt"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// regexMatcher compiles a Split pattern that is not one of the recognised
// ones with regexp2, a backtracking engine with the lookaround and \p{…}
// classes these patterns use and the same leftmost-first alternation as
// the reference's Oniguruma; its \s is unicode.IsSpace like the scanners'.
// It is the slow path: patterns in common use get a hand-written scanner
// (scanner.go), and the differential test checks regexp2 and the scanners
// agree on those. A pattern regexp2 cannot compile (possessive
// quantifiers, Oniguruma script classes) is refused by the caller.
func regexMatcher(pat string) (matcher, error) {
	re, err := regexp2.Compile(pat, regexp2.None)
	if err != nil {
		return nil, err
	}
	return func(s string, dst []span, lim *limits) []span {
		if s == "" {
			return dst
		}
		// regexp2 reports rune positions; map them to byte offsets.
		offsets := make([]int, 0, len(s)+1)
		for i := range s {
			offsets = append(offsets, i)
		}
		offsets = append(offsets, len(s))
		prev := 0
		m, err := re.FindStringMatch(s)
		for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
			start, end := offsets[m.Index], offsets[m.Index+m.Length]
			if lim.spend(end - prev) {
				return dst
			}
			if start > prev {
				dst = append(dst, span{prev, start, false})
			}
			if end > start {
				dst = append(dst, span{start, end, true})
			}
			prev = end
		}
		if prev < len(s) {
			dst = append(dst, span{prev, len(s), false})
		}
		return dst
	}, nil
}

// regexReplacer compiles the Regex pattern of a Replace normalizer; the
// content is inserted literally, as the reference does.
func regexReplacer(pat, content string) (normalizer, error) {
	re, err := regexp2.Compile(pat, regexp2.None)
	if err != nil {
		return nil, err
	}
	return normalizerFunc(func(s string) string {
		if !utf8.ValidString(s) {
			return s
		}
		out, err := re.ReplaceFunc(s, func(regexp2.Match) string { return content }, -1, -1)
		if err != nil {
			return s
		}
		return out
	}), nil
}

// unsupportedRegex is the error for a pattern regexp2 cannot compile.
func unsupportedRegex(where, what, pat string, err error) error {
	return fmt.Errorf("%w: %s: %s regex %q: %v", ErrUnsupported, where, what, pat, err)
}
