package proxy

import (
	"os"
	"path/filepath"
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
			var ft firstToken
			at := -1
			for off := 0; off < len(c.s); off += cut {
				end := min(off+cut, len(c.s))
				if ft.feed([]byte(c.s[off:end])) {
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

func TestBackends_ParseAndCheckNameTheField(t *testing.T) {
	b, err := ParseBackendFlag("sim-0=http://127.0.0.1:8001/")
	if err != nil || b.ReplicaID != "sim-0" || b.URL != "http://127.0.0.1:8001/" {
		t.Fatalf("%+v %v", b, err)
	}
	for s, want := range map[string]string{
		"http://127.0.0.1:8001":  "want REPLICA_ID=URL",
		"=http://127.0.0.1:8001": "replica_id: required",
		"a=127.0.0.1:8001":       "want http://HOST:PORT",
		"a=ftp://h:1":            "want http://HOST:PORT",
		"a,b=http://h:1":         "must not contain a comma",
	} {
		if _, err := ParseBackendFlag(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", s, err, want)
		}
	}
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "b.yaml")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bs, err := LoadBackends(write("backends:\n  - replica_id: a\n    url: http://h:1\n    model: qwen3\n  - replica_id: b\n    url: https://h:2/v\n"))
	if err != nil || len(bs) != 2 || bs[0].Model != "qwen3" || bs[1].URL != "https://h:2/v" {
		t.Fatalf("%+v %v", bs, err)
	}
	for s, want := range map[string]string{
		"backends:\n  - replica_id: a\n    url: http://h:1\n  - replica_id: a\n    url: http://h:2\n": `backends[1]: replica_id "a" is also backends[0]'s`,
		"backends:\n  - replica_id: a\n    url: http://h:1\n    modle: x\n":                           "field modle not found",
		"backends:\n  - url: http://h:1\n":                                                            "backends[0]: replica_id: required",
		"backends: []\n":                                                                              "no backends",
	} {
		if _, err := LoadBackends(write(s)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", s, err, want)
		}
	}
}
