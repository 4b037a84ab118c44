package doccmds

import (
	"strings"
	"testing"
)

// An Examples section splits into commands: backslash and pipe
// continuations and a quote left open join lines; an apostrophe in a
// trailing comment opens nothing; comment lines between commands go.
func TestSplitExamples(t *testing.T) {
	lines := strings.Split(`  # a comment
  inference-cache a --x 1   # make run's sim-1
  inference-cache b --y \
      --z 2
  echo '[{"a": 1,
         "b": 2}]' | inference-cache c
  echo '{}' |
    inference-cache d`, "\n")
	got := splitExamples(lines)
	want := []string{
		"inference-cache a --x 1   # make run's sim-1",
		"inference-cache b --y \\|--z 2",
		"echo '[{\"a\": 1,|\"b\": 2}]' | inference-cache c",
		"echo '{}' ||inference-cache d",
	}
	if len(got) != len(want) {
		t.Fatalf("%d commands %q, want %d", len(got), got, len(want))
	}
	for i := range want {
		if j := strings.Join(got[i], "|"); j != want[i] {
			t.Errorf("command %d: %q, want %q", i, j, want[i])
		}
	}
}
