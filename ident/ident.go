// Package ident holds the identifier rules of contract §9.2, shared by
// every place that takes an id from a user (API fields, the policy's
// model keys, pickers' and replicas' ids): valid UTF-8, no control or
// invisible format characters, not only spaces. Ids that break them
// print as nothing, garble a terminal or reorder text, so two ids that
// look alike in logs and the CLI could differ. Limits on length are the
// caller's: they differ by field.
package ident

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Hidden names the first control character (C0, DEL, C1) or invisible
// format character (zero-width space, bidi override, BOM: Unicode Cf) of
// v and its byte offset, as "holds control character U+0001 at byte 3";
// "" when there is none.
func Hidden(v string) string {
	for i, r := range v {
		switch {
		case unicode.IsControl(r):
			return fmt.Sprintf("holds control character %U at byte %d", r, i)
		case unicode.Is(unicode.Cf, r):
			return fmt.Sprintf("holds invisible format character %U at byte %d", r, i)
		}
	}
	return ""
}

// Problem is the objection to a non-empty id v under contract §9.2:
// "not valid UTF-8", Hidden's reason, or "blank (only whitespace)"; ""
// when there is none.
func Problem(v string) string {
	if !utf8.ValidString(v) {
		return "not valid UTF-8"
	}
	if h := Hidden(v); h != "" {
		return h
	}
	if strings.TrimSpace(v) == "" {
		return "blank (only whitespace)"
	}
	return ""
}
