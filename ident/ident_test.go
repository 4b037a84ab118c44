package ident

import "testing"

// Each rule of contract §9.2, with the byte offset it names.
func TestProblem_NamesTheRuleAndTheByte(t *testing.T) {
	for v, want := range map[string]string{
		"qwen3-8b":           "",
		"équipe-a":           "",
		"m\x00":              "holds control character U+0000 at byte 1",
		"a\u200bb":           "holds invisible format character U+200B at byte 1",
		"\u202eevil":         "holds invisible format character U+202E at byte 0",
		"ab\x7f":             "holds control character U+007F at byte 2",
		"   ":                "blank (only whitespace)",
		string([]byte{0xff}): "not valid UTF-8",
	} {
		if got := Problem(v); got != want {
			t.Errorf("Problem(%q) = %q, want %q", v, got, want)
		}
	}
}
