package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	jinja "github.com/ardanlabs/jinja"
)

// dumpOptions are the arguments of Python's json.dumps that transformers'
// tojson filter passes on.
type dumpOptions struct {
	ensureASCII bool
	indent      *string // nil: no newlines; else the string per level
	itemSep     string
	keySep      string
	sortKeys    bool
}

// filterToJSON is the tojson filter of transformers' chat-template
// environment:
//
//	def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
//	    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
//	                      separators=separators, sort_keys=sort_keys)
//
// It replaces Jinja2's own tojson, which escapes HTML characters.
// Positional arguments follow the same order.
func filterToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: missing value")
	}
	params := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	named := map[string]jinja.Value{}
	for i, a := range args[1:] {
		if i >= len(params) {
			return jinja.Undefined(), fmt.Errorf("tojson() takes at most %d arguments (%d given)", len(params)+1, len(args))
		}
		named[params[i]] = a
	}
	for k, v := range kwargs {
		if !contains(params, k) {
			return jinja.Undefined(), fmt.Errorf("tojson() got an unexpected keyword argument '%s'", k)
		}
		if _, dup := named[k]; dup {
			return jinja.Undefined(), fmt.Errorf("tojson() got multiple values for argument '%s'", k)
		}
		named[k] = v
	}

	opts := dumpOptions{}
	if v, ok := named["ensure_ascii"]; ok {
		opts.ensureASCII = v.IsTruthy()
	}
	if v, ok := named["sort_keys"]; ok {
		opts.sortKeys = v.IsTruthy()
	}
	if v, ok := named["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		var ind string
		switch {
		case v.IsInt():
			if n := v.AsInt(); n > 0 {
				ind = strings.Repeat(" ", int(min(n, 1<<10)))
			}
		case v.IsString():
			ind = v.AsString()
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an integer or a string, got %s", kindName(v))
		}
		opts.indent = &ind
	}
	if opts.indent == nil {
		opts.itemSep, opts.keySep = ", ", ": "
	} else {
		opts.itemSep, opts.keySep = ",", ": "
	}
	if v, ok := named["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Items[0].IsString() || !v.AsList().Items[1].IsString() {
			return jinja.Undefined(), errors.New("tojson: separators must be a pair of strings")
		}
		opts.itemSep = v.AsList().Items[0].AsString()
		opts.keySep = v.AsList().Items[1].AsString()
	}

	var b strings.Builder
	if err := dumpJSON(&b, args[0], opts, 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
}

// dumpJSON writes v as json.dumps would with opts, at nesting depth level.
func dumpJSON(b *strings.Builder, v jinja.Value, opts dumpOptions, level int) error {
	switch {
	case v.IsNone():
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		f := v.AsFloat()
		switch {
		case math.IsNaN(f):
			b.WriteString("NaN")
		case math.IsInf(f, 1):
			b.WriteString("Infinity")
		case math.IsInf(f, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloatRepr(f))
		}
	case v.IsString():
		dumpString(b, v.AsString(), opts.ensureASCII)
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, e := range items {
			if i > 0 {
				b.WriteString(opts.itemSep)
			}
			newline(b, opts, level+1)
			if err := dumpJSON(b, e, opts, level+1); err != nil {
				return err
			}
		}
		newline(b, opts, level)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := d.Keys
		if opts.sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(opts.itemSep)
			}
			newline(b, opts, level+1)
			dumpString(b, k, opts.ensureASCII)
			b.WriteString(opts.keySep)
			if err := dumpJSON(b, d.Data[k], opts, level+1); err != nil {
				return err
			}
		}
		newline(b, opts, level)
		b.WriteByte('}')
	default:
		//lint:ignore ST1005 Python json.dumps's TypeError text, as templates and their users see it
		return fmt.Errorf("Object of type %s is not JSON serializable", kindName(v))
	}
	return nil
}

// newline starts a new line indented to level when opts has an indent.
func newline(b *strings.Builder, opts dumpOptions, level int) {
	if opts.indent == nil {
		return
	}
	b.WriteByte('\n')
	for range level {
		b.WriteString(*opts.indent)
	}
}

// dumpString writes s as a JSON string the way Python's json module does:
// `"` and `\` escaped, \n \r \t \b \f by their short forms, other control
// characters as \u00XX, and, with ensureASCII, every non-ASCII character as
// \uXXXX (a UTF-16 surrogate pair above U+FFFF). Nothing else is escaped:
// not '/', not '<', '>' or '&', not U+2028.
func dumpString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if !ensureASCII {
				i += size
				continue
			}
			b.WriteString(s[start:i])
			if r > 0xffff {
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
			i += size
			start = i
			continue
		}
		b.WriteString(s[start:i])
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			fmt.Fprintf(b, `\u%04x`, c)
		}
		i++
		start = i
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

// kindName names a template value's type as Python would.
func kindName(v jinja.Value) string {
	switch {
	case v.IsUndefined():
		return "Undefined"
	case v.IsNone():
		return "NoneType"
	case v.IsBool():
		return "bool"
	case v.IsInt():
		return "int"
	case v.IsFloat():
		return "float"
	case v.IsString():
		return "str"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	}
	return "function"
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
