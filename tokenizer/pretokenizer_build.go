package tokenizer

import (
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// buildPreTokenizer turns the "pre_tokenizer" object of tokenizer.json into
// a preTokenizer; nil (JSON null) means the whole segment is one piece.
// byteLevelSeen is set when a ByteLevel pre-tokenizer is part of it.
func buildPreTokenizer(raw json.RawMessage, where string, byteLevelSeen *bool) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%w: %s: pre_tokenizer: %v", ErrMalformed, where, err)
	}
	switch head.Type {
	case "Sequence":
		return buildPreSequence(raw, where, byteLevelSeen)
	case "Split":
		return buildSplit(raw, where)
	case "ByteLevel":
		return buildByteLevelPre(raw, where, byteLevelSeen)
	case "Metaspace":
		return buildMetaspace(raw, where)
	case "Digits":
		return buildDigits(raw, where)
	default:
		return nil, fmt.Errorf("%w: %s: pre-tokenizer type %q", ErrUnsupported, where, head.Type)
	}
}

// malformedPre is the error for a pre-tokenizer object of type typ whose
// fields do not decode.
func malformedPre(where, typ string, err error) error {
	return fmt.Errorf("%w: %s: %s pre-tokenizer: %v", ErrMalformed, where, typ, err)
}

// buildPreSequence builds a Sequence pre-tokenizer: its members in order,
// JSON nulls left out.
func buildPreSequence(raw json.RawMessage, where string, byteLevelSeen *bool) (preTokenizer, error) {
	var c struct {
		PreTokenizers []json.RawMessage `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, malformedPre(where, "Sequence", err)
	}
	var seq preTokenizerSeq
	for _, m := range c.PreTokenizers {
		pt, err := buildPreTokenizer(m, where, byteLevelSeen)
		if err != nil {
			return nil, err
		}
		if pt != nil {
			seq = append(seq, pt)
		}
	}
	return seq, nil
}

// buildSplit builds a Split pre-tokenizer: a regex (a hand-written scanner
// when one matches the pattern exactly) or a literal string, with its
// behavior and invert flag.
func buildSplit(raw json.RawMessage, where string) (preTokenizer, error) {
	var c struct {
		Pattern  pattern `json:"pattern"`
		Behavior string  `json:"behavior"`
		Invert   bool    `json:"invert"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, malformedPre(where, "Split", err)
	}
	b, ok := parseBehavior(c.Behavior)
	if !ok {
		return nil, fmt.Errorf("%w: %s: Split pre-tokenizer behavior %q", ErrUnsupported, where, c.Behavior)
	}
	sp := splitter{behavior: b, invert: c.Invert}
	switch {
	case c.Pattern.Regex != nil:
		if sc, ok := scannerFor(*c.Pattern.Regex); ok {
			sp.match, sp.scan = scannerMatcher(sc), sc
			break
		}
		m, err := regexMatcher(*c.Pattern.Regex)
		if err != nil {
			return nil, unsupportedRegex(where, "Split pre-tokenizer", *c.Pattern.Regex, err)
		}
		sp.match = m
	case c.Pattern.String != nil && *c.Pattern.String != "":
		sp.match = literalMatcher(*c.Pattern.String)
	default:
		return nil, fmt.Errorf("%w: %s: Split pre-tokenizer without a pattern", ErrMalformed, where)
	}
	return sp, nil
}

// buildByteLevelPre builds a ByteLevel pre-tokenizer (GPT-2's split unless
// use_regex is false) and sets byteLevelSeen.
func buildByteLevelPre(raw json.RawMessage, where string, byteLevelSeen *bool) (preTokenizer, error) {
	c := struct {
		AddPrefixSpace bool `json:"add_prefix_space"`
		UseRegex       bool `json:"use_regex"`
	}{UseRegex: true}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, malformedPre(where, "ByteLevel", err)
	}
	*byteLevelSeen = true
	bl := byteLevel{addPrefixSpace: c.AddPrefixSpace}
	if c.UseRegex {
		bl.split = &splitter{match: scannerMatcher(scanGPT2), behavior: behaviorIsolated, scan: scanGPT2}
	}
	return bl, nil
}

// buildMetaspace builds a Metaspace pre-tokenizer: a one-character
// replacement, its prepend scheme (older files say add_prefix_space) and
// whether it splits.
func buildMetaspace(raw json.RawMessage, where string) (preTokenizer, error) {
	var c struct {
		Replacement    string  `json:"replacement"`
		AddPrefixSpace *bool   `json:"add_prefix_space"`
		PrependScheme  *string `json:"prepend_scheme"`
		Split          *bool   `json:"split"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, malformedPre(where, "Metaspace", err)
	}
	if utf8.RuneCountInString(c.Replacement) != 1 {
		return nil, fmt.Errorf("%w: %s: Metaspace replacement %q is not one character", ErrMalformed, where, c.Replacement)
	}
	m := metaspace{replacement: c.Replacement, prepend: "always", split: true}
	if c.PrependScheme != nil {
		switch *c.PrependScheme {
		case "always", "first", "never":
			m.prepend = *c.PrependScheme
		default:
			return nil, fmt.Errorf("%w: %s: Metaspace prepend_scheme %q", ErrUnsupported, where, *c.PrependScheme)
		}
	} else if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
		m.prepend = "never"
	}
	if c.Split != nil {
		m.split = *c.Split
	}
	return m, nil
}

// buildDigits builds a Digits pre-tokenizer: runs of digits, or each digit
// alone.
func buildDigits(raw json.RawMessage, where string) (preTokenizer, error) {
	var c struct {
		Individual bool `json:"individual_digits"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, malformedPre(where, "Digits", err)
	}
	sp := splitter{match: runeMatcher(unicode.IsNumber), behavior: behaviorContiguous}
	if c.Individual {
		sp.behavior = behaviorIsolated
	}
	return sp, nil
}
