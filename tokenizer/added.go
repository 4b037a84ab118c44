package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of "added_tokens" in tokenizer.json: a string
// that is cut out of the text before normalization (or, with normalized
// set, out of the normalized text) and mapped straight to its id.
type addedToken struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedMatcher finds added tokens leftmost-longest, as the reference's
// Aho-Corasick automaton (MatchKind::LeftmostLongest) does.
type addedMatcher struct {
	// byFirst lists, for each first byte, the tokens starting with it,
	// longest first.
	byFirst [256][]*addedToken
	any     bool
	// only is the first byte of every token when they all share one (as
	// "<" for "<|im_start|>" and its kin), else -1: split then finds
	// candidates with strings.IndexByte instead of a byte at a time.
	only int
}

// newAddedMatcher indexes toks.
func newAddedMatcher(toks []*addedToken) *addedMatcher {
	m := &addedMatcher{only: -1}
	for _, t := range toks {
		if t.Content == "" {
			continue
		}
		c := int(t.Content[0])
		switch {
		case !m.any:
			m.only = c
		case m.only != c:
			m.only = -2 // two first bytes
		}
		m.byFirst[c] = append(m.byFirst[c], t)
		m.any = true
	}
	m.only = max(m.only, -1)
	for i := range m.byFirst {
		sort.SliceStable(m.byFirst[i], func(a, b int) bool {
			return len(m.byFirst[i][a].Content) > len(m.byFirst[i][b].Content)
		})
	}
	return m
}

// segment is a run of text between added tokens, or one added token (tok
// non-nil). start is its byte offset in the text that was split.
type segment struct {
	text  string
	tok   *addedToken
	start int
}

// split cuts s into text segments and added-token segments, applying each
// token's lstrip, rstrip and single_word options. Empty text segments are
// dropped. It spends lim (which may be nil) per checkEvery bytes scanned,
// counts each added token against lim's token cap (each is one id), and
// returns early, with dst incomplete, once lim says stop.
func (m *addedMatcher) split(dst []segment, s string, base int, lim *limits) []segment {
	if m == nil || !m.any {
		if s != "" {
			dst = append(dst, segment{text: s, start: base})
		}
		return dst
	}
	prevEnd, spent, hits := 0, 0, 0
	for i := 0; i < len(s); {
		if i-spent >= checkEvery {
			if lim.spend(i - spent) {
				return dst
			}
			spent = i
		}
		if m.only >= 0 && s[i] != byte(m.only) {
			k := strings.IndexByte(s[i:], byte(m.only))
			if k < 0 {
				if lim.spend(len(s) - spent) {
					return dst
				}
				break
			}
			i += k
			continue // to spend for the bytes skipped
		}
		var hit *addedToken
		for _, t := range m.byFirst[s[i]] {
			if strings.HasPrefix(s[i:], t.Content) {
				hit = t
				break
			}
		}
		if hit == nil {
			i++
			continue
		}
		start, stop := i, i+len(hit.Content)
		if hit.SingleWord && !isWordBoundary(s, start, stop) {
			i = stop
			continue
		}
		if hit.LStrip {
			start = prevEnd + len(strings.TrimRightFunc(s[prevEnd:start], unicode.IsSpace))
		}
		if hit.RStrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
		}
		if start > prevEnd {
			dst = append(dst, segment{text: s[prevEnd:start], start: base + prevEnd})
		}
		dst = append(dst, segment{text: s[start:stop], tok: hit, start: base + start})
		prevEnd, i = stop, stop
		if hits++; lim.over(hits) {
			return dst
		}
	}
	if prevEnd < len(s) {
		dst = append(dst, segment{text: s[prevEnd:], start: base + prevEnd})
	}
	return dst
}

// isWordBoundary reports whether s[start:stop] is not glued to a word
// character on either side (single_word).
func isWordBoundary(s string, start, stop int) bool {
	isWord := func(r rune) bool {
		return unicode.IsLetter(r) || unicode.IsNumber(r) || r == '_' || unicode.Is(unicode.Mn, r)
	}
	if start > 0 {
		if r, _ := utf8.DecodeLastRuneInString(s[:start]); isWord(r) {
			return false
		}
	}
	if stop < len(s) {
		if r, _ := utf8.DecodeRuneInString(s[stop:]); isWord(r) {
			return false
		}
	}
	return true
}
