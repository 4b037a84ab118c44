package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// piece is one unit of text on its way from the normalizer to the model.
// atStart is set for the piece that begins at offset 0 of the caller's
// text, which Metaspace's "first" prepend scheme needs to know.
type piece struct {
	text    string
	atStart bool
}

// preTokenizer splits (and may rewrite) pieces, as the "pre_tokenizer" of
// tokenizer.json does. It appends its output to dst and returns it. It
// spends lim (which may be nil) as it goes, and returns early, with dst
// incomplete, once lim says stop: splitting a megabyte into a million
// one-digit pieces takes tens of milliseconds.
type preTokenizer interface {
	preTokenize(dst []piece, p piece, lim *limits) []piece
}

// preTokenizerSeq applies its members in order, each to every piece the
// previous one produced.
type preTokenizerSeq []preTokenizer

func (q preTokenizerSeq) preTokenize(dst []piece, p piece, lim *limits) []piece {
	cur := []piece{p}
	var next []piece
	for _, pt := range q {
		next = next[:0]
		for _, c := range cur {
			if next = pt.preTokenize(next, c, lim); lim.stopped() {
				return dst
			}
		}
		cur, next = next, cur
	}
	return append(dst, cur...)
}

// span is a byte range of a piece with whether it matched the pattern.
type span struct {
	start, end int
	match      bool
}

// splitBehavior is SplitDelimiterBehavior of the reference.
type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

// parseBehavior maps the JSON names of SplitDelimiterBehavior.
func parseBehavior(s string) (splitBehavior, bool) {
	switch s {
	case "Removed":
		return behaviorRemoved, true
	case "Isolated":
		return behaviorIsolated, true
	case "MergedWithPrevious":
		return behaviorMergedWithPrevious, true
	case "MergedWithNext":
		return behaviorMergedWithNext, true
	case "Contiguous":
		return behaviorContiguous, true
	}
	return 0, false
}

// matcher finds the matches of a pattern in s and returns the spans that
// cover s: matches and the gaps between them. It spends lim (which may be
// nil) per match and returns early once lim says stop.
type matcher func(s string, dst []span, lim *limits) []span

// scannerMatcher covers s with the matches of a partitioning scanner.
func scannerMatcher(sc scanner) matcher {
	return func(s string, dst []span, lim *limits) []span {
		for i := 0; i < len(s); {
			e := sc(s, i)
			dst = append(dst, span{i, e, true})
			if lim.spend(e - i) {
				return dst
			}
			i = e
		}
		return dst
	}
}

// literalMatcher matches every occurrence of lit.
func literalMatcher(lit string) matcher {
	return func(s string, dst []span, lim *limits) []span {
		prev := 0
		for i := 0; ; {
			k := strings.Index(s[i:], lit)
			if k < 0 {
				break
			}
			if lim.spend(k + len(lit)) {
				return dst
			}
			k += i
			if k > prev {
				dst = append(dst, span{prev, k, false})
			}
			dst = append(dst, span{k, k + len(lit), true})
			prev, i = k+len(lit), k+len(lit)
		}
		if prev < len(s) {
			dst = append(dst, span{prev, len(s), false})
		}
		return dst
	}
}

// runeMatcher makes every rune satisfying f a one-rune match.
func runeMatcher(f func(rune) bool) matcher {
	return func(s string, dst []span, lim *limits) []span {
		prev := 0
		for i, r := range s {
			if f(r) {
				if lim.spend(i + 1 - prev) {
					return dst
				}
				if i > prev {
					dst = append(dst, span{prev, i, false})
				}
				w := utf8.RuneLen(r)
				dst = append(dst, span{i, i + w, true})
				prev = i + w
			}
		}
		if prev < len(s) {
			dst = append(dst, span{prev, len(s), false})
		}
		return dst
	}
}

// splitter is the Split pre-tokenizer (and the splitting step of
// ByteLevel, Metaspace and Digits).
type splitter struct {
	match    matcher
	behavior splitBehavior
	invert   bool
	// scan is the scanner behind match when there is one (scannerMatcher).
	scan scanner
}

// streamer is a preTokenizer whose pieces can be produced one at a time,
// without materializing them: scan(s, i) is the end of the piece starting
// at byte i of a piece s, and the pieces of s are exactly those. Encode
// then tokenizes each piece as it is found, so a megabyte of one-digit
// pieces costs no megabytes of piece lists, and a stop is noticed between
// any two pieces.
type streamer interface {
	streamScanner() (scanner, bool)
}

// streamScanner: an isolated, non-inverted scanner split has the scanner's
// matches as its pieces (a scanner never matches empty text).
func (sp splitter) streamScanner() (scanner, bool) {
	return sp.scan, sp.scan != nil && sp.behavior == behaviorIsolated && !sp.invert
}

// streamScanner: a lazy ByteLevel without a prefix space passes its split's
// pieces through unchanged.
func (bl byteLevel) streamScanner() (scanner, bool) {
	if !bl.lazy || bl.addPrefixSpace || bl.split == nil {
		return nil, false
	}
	return bl.split.streamScanner()
}

func (sp splitter) preTokenize(dst []piece, p piece, lim *limits) []piece {
	var buf [32]span
	spans := sp.match(p.text, buf[:0], lim)
	if lim.stopped() {
		return dst
	}
	if sp.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	spans = applyBehavior(spans, sp.behavior)
	for _, s := range spans {
		if s.end > s.start {
			dst = append(dst, piece{text: p.text[s.start:s.end], atStart: p.atStart && s.start == 0})
		}
	}
	return dst
}

// applyBehavior combines match and gap spans as the reference's
// NormalizedString::split does for each SplitDelimiterBehavior. The result
// reuses spans' storage.
func applyBehavior(spans []span, b splitBehavior) []span {
	out := spans[:0]
	switch b {
	case behaviorIsolated:
		return spans
	case behaviorRemoved:
		for _, s := range spans {
			if !s.match {
				out = append(out, s)
			}
		}
	case behaviorMergedWithPrevious:
		prevMatch := false
		for _, s := range spans {
			if s.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, span{s.start, s.end, false})
			}
			prevMatch = s.match
		}
	case behaviorMergedWithNext:
		// Walk backwards, merging each match into the piece after it, then
		// restore the order.
		rev := make([]span, 0, len(spans))
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			s := spans[i]
			if s.match && !prevMatch && len(rev) > 0 {
				rev[len(rev)-1].start = s.start
			} else {
				rev = append(rev, span{s.start, s.end, false})
			}
			prevMatch = s.match
		}
		for i := len(rev) - 1; i >= 0; i-- {
			out = append(out, rev[i])
		}
	case behaviorContiguous:
		prevMatch := false
		for i, s := range spans {
			if i > 0 && s.match == prevMatch {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, span{s.start, s.end, false})
			}
			prevMatch = s.match
		}
	}
	return out
}

// byteLevel is the ByteLevel pre-tokenizer: optional prefix space, the
// GPT-2 split when use_regex is set, then the byte-to-unicode mapping.
type byteLevel struct {
	addPrefixSpace bool
	split          *splitter
	// lazy leaves the pieces as raw bytes: set when ByteLevel is the last
	// pre-tokenizer, so that the model maps bytes to ids directly instead
	// of building the mapped strings (see lazyByteLevel).
	lazy bool
}

func (bl byteLevel) preTokenize(dst []piece, p piece, lim *limits) []piece {
	if bl.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
		p.text = " " + p.text
	}
	start := len(dst)
	if bl.split != nil {
		dst = bl.split.preTokenize(dst, p, lim)
	} else if p.text != "" {
		dst = append(dst, p)
	}
	if !bl.lazy {
		for i := start; i < len(dst); i++ {
			dst[i].text = byteLevelEncode(dst[i].text)
		}
	}
	return dst
}

// lazyByteLevel makes a trailing ByteLevel pre-tokenizer lazy and reports
// whether it did: the pieces then reach the model as raw bytes. A trailing
// ByteLevel that neither splits nor adds a prefix space is dropped
// altogether, and a Sequence left with one member is unwrapped.
func lazyByteLevel(pt preTokenizer) (preTokenizer, bool) {
	switch v := pt.(type) {
	case byteLevel:
		if v.split == nil && !v.addPrefixSpace {
			return nil, true
		}
		v.lazy = true
		return v, true
	case preTokenizerSeq:
		if len(v) == 0 {
			return nil, false
		}
		last, ok := lazyByteLevel(v[len(v)-1])
		if !ok {
			return v, false
		}
		seq := append(preTokenizerSeq(nil), v[:len(v)-1]...)
		if last != nil {
			seq = append(seq, last)
		}
		switch len(seq) {
		case 0:
			return nil, true
		case 1:
			return seq[0], true
		}
		return seq, true
	}
	return pt, false
}

// metaspace is the Metaspace pre-tokenizer of SentencePiece-style models.
type metaspace struct {
	replacement string
	prepend     string // "always", "first" or "never"
	split       bool
}

func (m metaspace) preTokenize(dst []piece, p piece, lim *limits) []piece {
	t := strings.ReplaceAll(p.text, " ", m.replacement)
	switch m.prepend {
	case "always":
		if !strings.HasPrefix(t, m.replacement) {
			t = m.replacement + t
		}
	case "first":
		if p.atStart && !strings.HasPrefix(t, m.replacement) {
			t = m.replacement + t
		}
	}
	p.text = t
	if !m.split {
		if t != "" {
			dst = append(dst, p)
		}
		return dst
	}
	return splitter{match: literalMatcher(m.replacement), behavior: behaviorMergedWithNext}.preTokenize(dst, p, lim)
}
