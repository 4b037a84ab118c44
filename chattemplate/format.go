package chattemplate

import (
	"regexp"
	"strings"
)

// Patterns of the statements detectContentFormat reads. A slice is
// [a:b] or [a:b:c] with integer bounds; a filter chain is '|' and the rest.
var (
	forStmt    = regexp.MustCompile(`(?s)^\s*for\s+(.+?)\s+in\s+(.+?)(?:\s+if\s+.*|\s+recursive\s*)?$`)
	setStmt    = regexp.MustCompile(`(?s)^\s*set\s+([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.+?)\s*$`)
	identRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	accessTail = `\s*(?:\[\s*-?\d*\s*:\s*-?\d*\s*(?::\s*-?\d*\s*)?\])?\s*(?:\|.*|\s+is\s+.*)?$`
)

// detectContentFormat decides the content format of a template as vLLM's
// _detect_content_format does (vllm/renderers/hf.py): "openai" when some
// for-loop iterates over the content of a message, where a message is the
// target of a for-loop over messages or over a variable set from messages
// (transitively, through slices and filters); "string" otherwise, and
// also when one of those statements has a target vLLM's walk rejects (a
// tuple loop target, a namespace attribute set from messages).
//
// vLLM walks Jinja2's syntax tree; this reads the statements' text, which
// agrees for the statement shapes chat templates use.
func detectContentFormat(src string) ContentFormat {
	var sets, fors [][2]string
	forEachTag(src, func(kind byte, content string) {
		if kind != '%' {
			return
		}
		if m := setStmt.FindStringSubmatch(content); m != nil {
			sets = append(sets, [2]string{m[1], m[2]})
		} else if m := forStmt.FindStringSubmatch(content); m != nil {
			fors = append(fors, [2]string{strings.TrimSpace(m[1]), strings.TrimSpace(m[2])})
		}
	})

	// Variables holding messages or a part of them.
	related := map[string]bool{"messages": true}
	queue := []string{"messages"}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, s := range sets {
			if !isAccess(s[1], v, "") {
				continue
			}
			if !identRe.MatchString(s[0]) {
				return ContentString
			}
			if !related[s[0]] {
				related[s[0]] = true
				queue = append(queue, s[0])
			}
		}
	}
	// Loop variables holding one message.
	messageVars := map[string]bool{}
	for _, f := range fors {
		for v := range related {
			if isAccess(f[1], v, "") {
				if !identRe.MatchString(f[0]) {
					return ContentString
				}
				messageVars[f[0]] = true
				break
			}
		}
	}
	for _, f := range fors {
		for v := range messageVars {
			if isAccess(f[1], v, "content") {
				return ContentOpenAI
			}
		}
	}
	return ContentString
}

// isAccess reports whether expr is the variable v (or, with key, v.key or
// v['key']), possibly sliced, filtered or tested: vLLM's
// _is_var_or_elems_access.
func isAccess(expr, v, key string) bool {
	q := regexp.QuoteMeta(v)
	pat := `^` + q
	if key != "" {
		k := regexp.QuoteMeta(key)
		pat += `\s*(?:\.\s*` + k + `|\[\s*(?:'` + k + `'|"` + k + `")\s*\])`
	}
	re, err := regexp.Compile(`(?s)` + pat + accessTail)
	return err == nil && re.MatchString(strings.TrimSpace(expr))
}

// forEachTag calls fn with the kind ('{', '%' or '#') and content of each
// tag of src, found as the engine's scanner finds them.
func forEachTag(src string, fn func(kind byte, content string)) {
	i := 0
	for i < len(src) {
		open := strings.IndexByte(src[i:], '{')
		if open < 0 || i+open+1 >= len(src) {
			return
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
			i = open + 1
			continue
		}
		j := open + 2
		if j < len(src) && src[j] == '-' {
			j++
		}
		end, tagEnd, _ := findCloser(src, j, closer, src[open+1] != '#')
		if tagEnd < 0 {
			return
		}
		fn(src[open+1], src[j:end])
		i = tagEnd
	}
}
