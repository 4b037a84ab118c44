package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites one segment of text (the text between added tokens)
// before pre-tokenization, as the "normalizer" of tokenizer.json does. A
// normalizer whose cost can reach milliseconds on a long segment (the
// Unicode forms) spends lim as it goes and returns early, with s
// incomplete, once lim says stop; lim may be nil.
type normalizer interface {
	normalize(s string, lim *limits) string
}

// normalizerFunc adapts a function that runs at memory speed to normalizer.
type normalizerFunc func(string) string

func (f normalizerFunc) normalize(s string, _ *limits) string { return f(s) }

// normalizerSeq applies its members in order.
type normalizerSeq []normalizer

func (q normalizerSeq) normalize(s string, lim *limits) string {
	for _, n := range q {
		s = n.normalize(s, lim)
	}
	return s
}

// normChunk is how much text a Unicode form normalizes between two looks
// at the limits: composing 16 KiB of decomposed text takes about 1 ms.
const normChunk = 16 << 10

// unicodeForm is the NFC, NFD, NFKC or NFKD normalizer.
type unicodeForm struct{ f norm.Form }

// normalize returns f(s). A long s that is not already normalized is
// normalized chunk by chunk with AppendString, which the norm package
// defines as f(append(out, chunk)) for an out that is already normalized:
// the same result as one call, with a look at lim between chunks.
func (u unicodeForm) normalize(s string, lim *limits) string {
	if len(s) <= normChunk || lim == nil || lim.ctx == nil {
		return u.f.String(s)
	}
	n := u.f.QuickSpanString(s)
	if n == len(s) {
		return s
	}
	out := make([]byte, n, len(s)+len(s)/8)
	copy(out, s[:n])
	for i := n; i < len(s); {
		j := min(i+normChunk, len(s))
		for j < len(s) && !utf8.RuneStart(s[j]) {
			j++
		}
		out = u.f.AppendString(out, s[i:j])
		if lim.spend(j - i) {
			return ""
		}
		i = j
	}
	return string(out)
}

// buildNormalizer turns the "normalizer" object of tokenizer.json into a
// normalizer; nil (JSON null) means none. where names the file for errors.
func buildNormalizer(raw json.RawMessage, where string) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%w: %s: normalizer: %v", ErrMalformed, where, err)
	}
	switch head.Type {
	case "NFC":
		return unicodeForm{norm.NFC}, nil
	case "NFD":
		return unicodeForm{norm.NFD}, nil
	case "NFKC":
		return unicodeForm{norm.NFKC}, nil
	case "NFKD":
		return unicodeForm{norm.NFKD}, nil
	case "Lowercase":
		// Full Unicode lowercasing with final sigma, like Rust's
		// str::to_lowercase (strings.ToLower maps rune by rune). A Caser
		// is stateful, hence one per call.
		return normalizerFunc(func(s string) string { return cases.Lower(language.Und).String(s) }), nil
	case "Strip":
		return buildStrip(raw, where)
	case "Prepend":
		return buildPrepend(raw, where)
	case "Replace":
		return buildReplace(raw, where)
	case "Sequence":
		return buildNormalizerSeq(raw, where)
	default:
		return nil, fmt.Errorf("%w: %s: normalizer type %q", ErrUnsupported, where, head.Type)
	}
}

// buildStrip builds a Strip normalizer: Unicode white space trimmed on the
// left, the right or both.
func buildStrip(raw json.RawMessage, where string) (normalizer, error) {
	var c struct {
		Left  bool `json:"strip_left"`
		Right bool `json:"strip_right"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: %s: Strip normalizer: %v", ErrMalformed, where, err)
	}
	return normalizerFunc(func(s string) string {
		if c.Left {
			s = strings.TrimLeftFunc(s, unicode.IsSpace)
		}
		if c.Right {
			s = strings.TrimRightFunc(s, unicode.IsSpace)
		}
		return s
	}), nil
}

// buildPrepend builds a Prepend normalizer.
func buildPrepend(raw json.RawMessage, where string) (normalizer, error) {
	var c struct {
		Prepend string `json:"prepend"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: %s: Prepend normalizer: %v", ErrMalformed, where, err)
	}
	// The reference prepends only to a non-empty string.
	return normalizerFunc(func(s string) string {
		if s == "" {
			return s
		}
		return c.Prepend + s
	}), nil
}

// buildReplace builds a Replace normalizer: every match of a regex, or
// every occurrence of a string, replaced by the content.
func buildReplace(raw json.RawMessage, where string) (normalizer, error) {
	var c struct {
		Pattern pattern `json:"pattern"`
		Content string  `json:"content"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: %s: Replace normalizer: %v", ErrMalformed, where, err)
	}
	if c.Pattern.Regex != nil {
		n, err := regexReplacer(*c.Pattern.Regex, c.Content)
		if err != nil {
			return nil, unsupportedRegex(where, "Replace normalizer", *c.Pattern.Regex, err)
		}
		return n, nil
	}
	if c.Pattern.String == nil || *c.Pattern.String == "" {
		return nil, fmt.Errorf("%w: %s: Replace normalizer without a String pattern", ErrMalformed, where)
	}
	from := *c.Pattern.String
	return normalizerFunc(func(s string) string { return strings.ReplaceAll(s, from, c.Content) }), nil
}

// buildNormalizerSeq builds a Sequence normalizer: its members in order,
// JSON nulls left out.
func buildNormalizerSeq(raw json.RawMessage, where string) (normalizer, error) {
	var c struct {
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: %s: Sequence normalizer: %v", ErrMalformed, where, err)
	}
	var seq normalizerSeq
	for _, m := range c.Normalizers {
		n, err := buildNormalizer(m, where)
		if err != nil {
			return nil, err
		}
		if n != nil {
			seq = append(seq, n)
		}
	}
	return seq, nil
}

// pattern is the {"String": …} or {"Regex": …} object used by Split and
// Replace.
type pattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}
