package openai

import (
	"strings"
	"testing"
)

// The first output event is found wherever the stream is cut into
// reads; the role chunk, empty deltas and comments are not output.
func TestFirstToken_FindsTheFirstOutputEventAcrossAnySplit(t *testing.T) {
	role := "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
	comment := ": keep-alive\n\n"
	content := "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok\"},\"finish_reason\":null}]}\n\n"
	crlf := strings.ReplaceAll(role+content, "\n", "\r\n")
	compl := "data: {\"choices\":[{\"index\":0,\"text\":\"\"}]}\n\ndata: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n"
	reasoning := "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n"
	tool := "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\n"
	streams := map[string]struct {
		s     string
		found int // length of the prefix ending with the first output event; -1: none
	}{
		"chat":                {role + comment + content + content, len(role + comment + content)},
		"chat with CRLF":      {crlf + crlf, len(crlf)},
		"completion":          {compl, len(compl)},
		"reasoning first":     {reasoning, len(reasoning)},
		"tool call":           {tool + content, len(tool)},
		"no output, then end": {role + "data: [DONE]\n\n", -1},
	}
	for name, c := range streams {
		for cut := 1; cut <= len(c.s); cut++ {
			var ft FirstTokenSpotter
			at := -1
			for off := 0; off < len(c.s); off += cut {
				end := min(off+cut, len(c.s))
				if ft.Feed([]byte(c.s[off:end])) {
					if at >= 0 {
						t.Fatalf("%s cut %d: found twice", name, cut)
					}
					at = end
				}
			}
			switch {
			case c.found < 0 && at >= 0:
				t.Fatalf("%s cut %d: found output at %d in a stream without any", name, cut, at)
			case c.found >= 0 && (at < c.found || at >= c.found+cut):
				t.Fatalf("%s cut %d: found at %d, want in the read ending the event at %d", name, cut, at, c.found)
			}
		}
	}
}
