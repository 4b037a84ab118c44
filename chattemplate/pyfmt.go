package chattemplate

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	jinja "github.com/ardanlabs/jinja"
)

// pyStr writes Python's str() of a template value, which is what Jinja2
// prints for {{ value }}: None, True and False by name, floats in repr form
// (1.0, 1e+16), lists and dicts as their repr, undefined as nothing.
func pyStr(b *strings.Builder, v jinja.Value) {
	switch {
	case v.IsUndefined():
	case v.IsString():
		b.WriteString(v.AsString())
	default:
		pyRepr(b, v)
	}
}

// pyRepr writes Python's repr() of a template value.
func pyRepr(b *strings.Builder, v jinja.Value) {
	switch {
	case v.IsUndefined():
		// Jinja2's Undefined has no repr a template can reach except in
		// a container, where it prints as nothing.
	case v.IsNone():
		b.WriteString("None")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloatRepr(v.AsFloat()))
	case v.IsString():
		pyStrRepr(b, v.AsString())
	case v.IsList():
		b.WriteByte('[')
		for i, e := range v.AsList().Items {
			if i > 0 {
				b.WriteString(", ")
			}
			pyRepr(b, e)
		}
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		b.WriteByte('{')
		for i, k := range d.Keys {
			if i > 0 {
				b.WriteString(", ")
			}
			pyStrRepr(b, k)
			b.WriteString(": ")
			pyRepr(b, d.Data[k])
		}
		b.WriteByte('}')
	case v.IsCallable():
		fmt.Fprintf(b, "<function %s>", v.AsCallable().Name)
	}
}

// pyFloatRepr formats f as Python's repr(float) does: the shortest digits
// that round-trip, in positional notation when the decimal exponent is in
// [-4, 16) (always with a fractional part, "1.0"), otherwise in scientific
// notation with a signed exponent of at least two digits ("1e+16",
// "1.5e-05"); inf, -inf and nan by name.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	// 'e' with precision -1 gives the shortest round-trip digits:
	// [-]d[.ddd]e±XX.
	s := strconv.FormatFloat(f, 'e', -1, 64)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	ePos := strings.IndexByte(s, 'e')
	mant, expStr := s[:ePos], s[ePos+1:]
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)

	var out strings.Builder
	if neg {
		out.WriteByte('-')
	}
	if exp < -4 || exp >= 16 {
		out.WriteString(mant)
		if exp < 0 {
			out.WriteString("e-")
			exp = -exp
		} else {
			out.WriteString("e+")
		}
		if exp < 10 {
			out.WriteByte('0')
		}
		out.WriteString(strconv.Itoa(exp))
		return out.String()
	}
	if exp < 0 {
		out.WriteString("0.")
		out.WriteString(strings.Repeat("0", -exp-1))
		out.WriteString(digits)
		return out.String()
	}
	if len(digits) <= exp+1 {
		out.WriteString(digits)
		out.WriteString(strings.Repeat("0", exp+1-len(digits)))
		out.WriteString(".0")
		return out.String()
	}
	out.WriteString(digits[:exp+1])
	out.WriteByte('.')
	out.WriteString(digits[exp+1:])
	return out.String()
}

// pyStrRepr writes Python's repr() of a string: single quotes unless the
// string holds a single quote and no double quote, backslash escapes for
// the quote, backslash, \n \r \t, \xhh, \uhhhh or \Uhhhhhhhh for other
// characters Python does not print (str.isprintable).
func pyStrRepr(b *strings.Builder, s string) {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	b.WriteByte(quote)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x80 || unicode.IsPrint(r):
			b.WriteRune(r)
		case r <= 0xff:
			fmt.Fprintf(b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(quote)
}

// pyIsSpace reports whether Python's str.isspace() holds for r, the set
// str.strip() and str.split() use: Go's unicode.IsSpace plus the ASCII
// information separators U+001C to U+001F.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// pyStrip is Python's str.strip() without arguments.
func pyStrip(s string) string {
	return strings.TrimFunc(s, pyIsSpace)
}
