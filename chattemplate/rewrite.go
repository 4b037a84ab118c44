package chattemplate

import (
	"strings"
)

// printFilter is the filter every {{ expression }} is passed through, so
// that values print as Python's str() prints them (see pyStr): the engine
// itself prints None as nothing and 1.0 as "1".
const printFilter = "__ic_str"

// filterOverrides maps the Jinja2 filters whose engine versions differ from
// Jinja2 (or from transformers' environment), or that the engine lacks, to
// the names under which this package provides its own. The engine looks a filter up among its
// built-ins first and in the render variables only after, so a template's
// uses are renamed to names it has no built-in for.
var filterOverrides = map[string]string{
	"tojson":     "__ic_tojson",
	"map":        "__ic_map",
	"selectattr": "__ic_selectattr",
	"rejectattr": "__ic_rejectattr",
	"join":       "__ic_join",
	"string":     "__ic_string",
	"format":     "__ic_format",
}

// rewriteSource prepares a chat template for the engine, changing only
// what the engine would otherwise render differently from Jinja2:
//
//   - {{ expr }} becomes {{ (expr)|__ic_str }} (Python's str() printing);
//   - a filter of filterOverrides used after '|' gets the override's name;
//   - {% generation %} and {% endgeneration %}, the tags transformers'
//     AssistantTracker adds, become {% if true %} and {% endif %}: outside
//     assistant-mask tracking they render their body unchanged;
//   - nothing between {% raw %} and {% endraw %} changes.
//
// First, as Jinja2's lexer does, every line ending (\r\n, \r) becomes
// "\n" and one newline at the very end is dropped (keep_trailing_newline
// is off in transformers' environment).
//
// Tags are found exactly as the engine's scanner finds them ({{ }}, {% %},
// {# #}, quotes respected inside the first two), so the rewrite never moves
// a tag boundary; whitespace-control markers are kept in place.
func rewriteSource(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	src = strings.TrimSuffix(src, "\n")
	var out strings.Builder
	out.Grow(len(src) + len(src)/8)
	inRaw := false
	i := 0
	for i < len(src) {
		open := strings.IndexByte(src[i:], '{')
		if open < 0 || i+open+1 >= len(src) {
			out.WriteString(src[i:])
			break
		}
		open += i
		var closer string
		switch src[open+1] {
		case '{':
			closer = "}}"
		case '%':
			closer = "%}"
		case '#':
			closer = "#}"
		default:
			out.WriteString(src[i : open+1])
			i = open + 1
			continue
		}
		out.WriteString(src[i:open])
		kind := src[open+1]
		j := open + 2
		trimLeft := j < len(src) && src[j] == '-'
		if trimLeft {
			j++
		}
		contentStart := j
		contentEnd, tagEnd, trimRight := findCloser(src, j, closer, kind != '#')
		if tagEnd < 0 {
			// Unterminated tag: leave the rest for the engine to reject.
			out.WriteString(src[open:])
			break
		}
		content := src[contentStart:contentEnd]
		word := firstWord(content)
		switch {
		case kind == '#':
			out.WriteString(src[open:tagEnd])
		case inRaw:
			if kind == '%' && word == "endraw" {
				inRaw = false
			}
			out.WriteString(src[open:tagEnd])
		case kind == '%' && word == "raw":
			inRaw = true
			out.WriteString(src[open:tagEnd])
		case kind == '%' && (word == "generation" || word == "endgeneration") && strings.TrimSpace(content) == word:
			repl := " if true "
			if word == "endgeneration" {
				repl = " endif "
			}
			writeTag(&out, '%', trimLeft, trimRight, repl)
		case kind == '%':
			writeTag(&out, '%', trimLeft, trimRight, renameFilters(content))
		default:
			writeTag(&out, '{', trimLeft, trimRight, " ("+renameFilters(content)+")|"+printFilter+" ")
		}
		i = tagEnd
	}
	return out.String()
}

// findCloser scans src from i for closer ("}}", "%}" or "#}"), skipping
// quoted strings when quotes is set, as the engine's scanner does. It
// returns where the content ends, where the tag ends, and whether the
// closer had a '-' before it; tagEnd is -1 when there is no closer.
func findCloser(src string, i int, closer string, quotes bool) (contentEnd, tagEnd int, trimRight bool) {
	for i < len(src) {
		c := src[i]
		if quotes && (c == '\'' || c == '"') {
			i++
			for i < len(src) && src[i] != c {
				if src[i] == '\\' && i+1 < len(src) {
					i++
				}
				i++
			}
			i++ // the closing quote
			continue
		}
		if c == '-' && i+2 < len(src) && src[i+1] == closer[0] && src[i+2] == closer[1] {
			return i, i + 3, true
		}
		if i+1 < len(src) && c == closer[0] && src[i+1] == closer[1] {
			return i, i + 2, false
		}
		i++
	}
	return 0, -1, false
}

// writeTag writes a {{ }} (open '{') or {% %} (open '%') tag around content.
func writeTag(out *strings.Builder, open byte, trimLeft, trimRight bool, content string) {
	out.WriteByte('{')
	out.WriteByte(open)
	if trimLeft {
		out.WriteByte('-')
	}
	out.WriteString(content)
	if trimRight {
		out.WriteByte('-')
	}
	if open == '{' {
		out.WriteString("}}")
	} else {
		out.WriteString("%}")
	}
}

// firstWord returns the leading identifier of a tag's content.
func firstWord(s string) string {
	s = strings.TrimLeft(s, " \t\r\n")
	n := 0
	for n < len(s) && isIdentByte(s[n]) {
		n++
	}
	return s[:n]
}

// renameFilters renames, in a tag's content, each filter of
// filterOverrides that follows a '|' outside string literals.
func renameFilters(s string) string {
	var out strings.Builder
	changed := false
	last := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' || c == '"':
			i++
			for i < len(s) && s[i] != c {
				if s[i] == '\\' {
					i++
				}
				i++
			}
		case c == '|':
			j := i + 1
			for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r') {
				j++
			}
			k := j
			for k < len(s) && isIdentByte(s[k]) {
				k++
			}
			if repl, ok := filterOverrides[s[j:k]]; ok {
				if !changed {
					out.Grow(len(s) + 16)
					changed = true
				}
				out.WriteString(s[last:j])
				out.WriteString(repl)
				last = k
			}
			i = k - 1
		}
	}
	if !changed {
		return s
	}
	out.WriteString(s[last:])
	return out.String()
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
