package tokenizer

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// split finds added tokens leftmost-longest wherever they are, whether the
// tokens share one first byte (found with strings.IndexByte) or not.
func TestAddedMatcher_SplitFindsEveryToken(t *testing.T) {
	shared := []*addedToken{{ID: 1, Content: "<|im_start|>"}, {ID: 2, Content: "<|im_end|>"}, {ID: 3, Content: "<|im"}}
	mixed := append([]*addedToken{{ID: 4, Content: "[INST]"}}, shared...)
	cases := []struct {
		text string
		want []string // text segments, and added tokens as "#id"
	}{
		{"", nil},
		{"plain text, no tokens < at all <", []string{"plain text, no tokens < at all <"}},
		{"<|im_start|>user\nhi<|im_end|>", []string{"#1", "user\nhi", "#2"}},
		{"a<|im_end|><|im_start|>b", []string{"a", "#2", "#1", "b"}},
		{"x <|imy <|im_start", []string{"x ", "#3", "y ", "#3", "_start"}},
		{"<<|im_end|", []string{"<", "#3", "_end|"}},
	}
	for name, toks := range map[string][]*addedToken{"shared": shared, "mixed": mixed} {
		m := newAddedMatcher(toks)
		if wantOnly := name == "shared"; (m.only == '<') != wantOnly {
			t.Fatalf("%s: only = %d", name, m.only)
		}
		for _, c := range append(cases, struct {
			text string
			want []string
		}{"[INST]q<|im_end|>", map[string][]string{"shared": {"[INST]q", "#2"}, "mixed": {"#4", "q", "#2"}}[name]}) {
			var got []string
			for _, seg := range m.split(nil, c.text, 0, nil) {
				if seg.tok != nil {
					got = append(got, "#"+string(rune('0'+seg.tok.ID)))
				} else {
					got = append(got, seg.text)
				}
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("%s: split(%q) (-want +got):\n%s", name, c.text, diff)
			}
		}
	}
}
