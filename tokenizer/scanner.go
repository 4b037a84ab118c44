package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The byte-level BPE families split text with a regular expression that
// uses a negative lookahead (\s+(?!\S)), which Go's regexp cannot compile.
// Rather than pull in a backtracking engine, this file implements the three
// patterns used in practice as hand-written scanners that reproduce the
// leftmost-first backtracking semantics of the reference (Oniguruma in the
// Rust library, ECMAScript in the JavaScript one) alternative by
// alternative. A Split pre-tokenizer with any other regex is refused at
// load time.

// Patterns recognised verbatim in tokenizer.json.
const (
	// patternGPT2 is GPT-2's pattern, also used implicitly by a ByteLevel
	// pre-tokenizer with use_regex true.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// patternCL100K is cl100k's pattern as used by Llama 3 (numbers in runs
	// of up to three digits).
	patternCL100K = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternQwen2 is the Qwen2/Qwen3 variant: one digit per piece.
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// scanner returns the end (exclusive, in bytes) of the match that starts at
// byte i of s. Every scanner here matches at least one character at every
// position, so the matches partition s.
type scanner func(s string, i int) int

// scannerFor returns the scanner for a recognised pattern.
func scannerFor(p string) (scanner, bool) {
	switch p {
	case patternGPT2:
		return scanGPT2, true
	case patternCL100K:
		return func(s string, i int) int { return scanCL100K(s, i, 3) }, true
	case patternQwen2:
		return func(s string, i int) int { return scanCL100K(s, i, 1) }, true
	}
	return nil, false
}

// Character classes. \s is Unicode White_Space (unicode.IsSpace), \p{L}
// and \p{N} the general categories L and N.
func isL(r rune) bool {
	return r < utf8.RuneSelf && ('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') || r >= utf8.RuneSelf && unicode.IsLetter(r)
}

func isN(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

func isS(r rune) bool { return unicode.IsSpace(r) }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }

// at decodes the rune at byte i of s; it returns (utf8.RuneError, 0) at
// the end of s.
func at(s string, i int) (rune, int) {
	if i >= len(s) {
		return utf8.RuneError, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// class is one of the character classes a scanner runs over. Its ASCII
// members are looked up in asciiClasses, so that the runs that make up
// most text (letters, spaces, punctuation) cost a table load per byte
// instead of a call through a function value.
type class uint8

const (
	classL class = 1 << iota
	classN
	classS
	classOther
	classCRLF
)

// asciiClasses holds the classes of each ASCII character, computed with
// the predicates themselves.
var asciiClasses = func() (t [utf8.RuneSelf]class) {
	for r := range rune(utf8.RuneSelf) {
		for c, in := range map[class]func(rune) bool{classL: isL, classN: isN, classS: isS, classOther: isOther, classCRLF: isCRLF} {
			if in(r) {
				t[r] |= c
			}
		}
	}
	return t
}()

// has reports whether r is in c.
func (c class) has(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 0 && asciiClasses[r]&c != 0
	}
	switch c {
	case classL:
		return isL(r)
	case classN:
		return isN(r)
	case classS:
		return isS(r)
	case classOther:
		return isOther(r)
	}
	return false // classCRLF
}

// run advances from byte i over runes in c and returns the new position
// and how many runes it passed, stopping after max runes when max is
// positive.
func run(s string, i int, c class, max int) (int, int) {
	n := 0
	for i < len(s) && (max <= 0 || n < max) {
		if b := s[i]; b < utf8.RuneSelf {
			if asciiClasses[b]&c == 0 {
				break
			}
			i++
			n++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if !c.has(r) {
			break
		}
		i += w
		n++
	}
	return i, n
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at byte i (s[i] == '\”),
// ASCII case-insensitively when fold is set; it returns the end or -1.
func contraction(s string, i int, fold bool) int {
	lower := func(c byte) byte {
		if fold && 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	if i+1 >= len(s) {
		return -1
	}
	switch lower(s[i+1]) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && lower(s[i+2]) == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && lower(s[i+2]) == 'l' {
			return i + 3
		}
	}
	return -1
}

// spaceTail handles the two trailing alternatives shared by both families,
// \s+(?!\S)|\s+, at a whitespace rune starting at byte i.
func spaceTail(s string, i int) int {
	j, _ := run(s, i, classS, 0)
	if j == len(s) {
		return j
	}
	// \s+(?!\S): back off one whitespace rune so that the next one (still
	// whitespace) is not \S; possible only if the run has two or more runes.
	_, w := utf8.DecodeLastRuneInString(s[:j])
	if j-w > i {
		return j - w
	}
	return j
}

// scanGPT2 implements patternGPT2.
func scanGPT2(s string, i int) int {
	r, w := at(s, i)
	if r == '\'' {
		if e := contraction(s, i, false); e > 0 {
			return e
		}
	}
	start := i
	if r == ' ' {
		// " ?" followed by a letter, number or other run.
		r2, w2 := at(s, i+w)
		switch {
		case w2 > 0 && isL(r2):
			e, _ := run(s, i+w, classL, 0)
			return e
		case w2 > 0 && isN(r2):
			e, _ := run(s, i+w, classN, 0)
			return e
		case w2 > 0 && isOther(r2):
			e, _ := run(s, i+w, classOther, 0)
			return e
		}
	}
	switch {
	case isL(r):
		e, _ := run(s, start, classL, 0)
		return e
	case isN(r):
		e, _ := run(s, start, classN, 0)
		return e
	case isOther(r):
		e, _ := run(s, start, classOther, 0)
		return e
	}
	return spaceTail(s, i)
}

// isCRLF is [\r\n].
func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

// scanCL100K implements patternCL100K (maxDigits 3) and patternQwen2
// (maxDigits 1).
func scanCL100K(s string, i int, maxDigits int) int {
	r, w := at(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if e := contraction(s, i, true); e > 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isL(r) {
		e, _ := run(s, i, classL, 0)
		return e
	}
	if !isCRLF(r) && !isN(r) {
		if r2, w2 := at(s, i+w); w2 > 0 && isL(r2) {
			e, _ := run(s, i+w, classL, 0)
			return e
		}
	}
	// \p{N}{1,maxDigits}
	if isN(r) {
		e, _ := run(s, i, classN, maxDigits)
		return e
	}
	// " ?[^\s\p{L}\p{N}]+[\r\n]*"
	j := i
	if r == ' ' {
		if r2, w2 := at(s, i+w); w2 > 0 && isOther(r2) {
			j = i + w
		}
	}
	if r2, w2 := at(s, j); w2 > 0 && isOther(r2) {
		e, _ := run(s, j, classOther, 0)
		e, _ = run(s, e, classCRLF, 0)
		return e
	}
	// Only whitespace is left here. \s*[\r\n]+: the whitespace run up to
	// and including its last \r or \n.
	end, _ := run(s, i, classS, 0)
	last := -1
	for k := i; k < end; {
		r, w := at(s, k)
		if isCRLF(r) {
			last = k + w
		}
		k += w
	}
	if last > 0 {
		return last
	}
	return spaceTail(s, i)
}
