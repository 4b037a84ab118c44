package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites one segment of text (the text between added tokens)
// before pre-tokenization, as the "normalizer" of tokenizer.json does.
type normalizer interface {
	normalize(s string) string
}

// normalizerFunc adapts a function to normalizer.
type normalizerFunc func(string) string

func (f normalizerFunc) normalize(s string) string { return f(s) }

// normalizerSeq applies its members in order.
type normalizerSeq []normalizer

func (q normalizerSeq) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
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
		return normalizerFunc(norm.NFC.String), nil
	case "NFD":
		return normalizerFunc(norm.NFD.String), nil
	case "NFKC":
		return normalizerFunc(norm.NFKC.String), nil
	case "NFKD":
		return normalizerFunc(norm.NFKD.String), nil
	case "Lowercase":
		// Full Unicode lowercasing with final sigma, like Rust's
		// str::to_lowercase (strings.ToLower maps rune by rune). A Caser
		// is stateful, hence one per call.
		return normalizerFunc(func(s string) string { return cases.Lower(language.Und).String(s) }), nil
	case "Strip":
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
	case "Prepend":
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
	case "Replace":
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
	case "Sequence":
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
	default:
		return nil, fmt.Errorf("%w: %s: normalizer type %q", ErrUnsupported, where, head.Type)
	}
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
