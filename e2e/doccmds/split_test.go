package doccmds

import (
	"os"
	"path/filepath"
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

// Output markers belong to the fence right after them: the first block
// wants both texts, the second none (a line between marker and fence
// ends the markers), and a skip marker still reads as before.
func TestDocBlocks_OutputMarkersBelongToTheNextFence(t *testing.T) {
	dir := t.TempDir()
	doc := "<!-- doc-commands: output has (PREFIX_MATCH) -->\n" +
		"<!-- doc-commands: output has (sim-2) -->\n" +
		"```sh\necho PREFIX_MATCH sim-2\n```\n" +
		"<!-- doc-commands: output has (LOAD) -->\n" +
		"Some prose.\n" +
		"```sh\necho two\n```\n" +
		"<!-- doc-commands: skip (why) -->\n" +
		"```sh\necho three\n```\n"
	if err := os.WriteFile(filepath.Join(dir, "doc.md"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	bs := docBlocks(t, dir, "doc.md")
	if len(bs) != 3 {
		t.Fatalf("%d blocks, want 3: %+v", len(bs), bs)
	}
	if got := strings.Join(bs[0].wants, "|"); got != "PREFIX_MATCH|sim-2" || bs[0].text != "echo PREFIX_MATCH sim-2\n" {
		t.Errorf("first block wants %q, text %q", got, bs[0].text)
	}
	if len(bs[1].wants) != 0 || bs[1].skip != "" {
		t.Errorf("second block wants %q, skip %q: want neither", bs[1].wants, bs[1].skip)
	}
	if bs[2].skip != "why" || len(bs[2].wants) != 0 {
		t.Errorf("third block skip %q, wants %q", bs[2].skip, bs[2].wants)
	}
}
