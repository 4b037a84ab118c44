package main

import (
	"strings"
	"testing"
)

// Ids come from the engines: the lookup table quotes any with control
// characters instead of writing them to the terminal raw.
func TestPrintable_QuotesControlCharacters(t *testing.T) {
	for in, want := range map[string]string{
		"vllm-0":                 "vllm-0",
		"réplique":               "réplique",
		"evil\x1b[31mRED\x1b[0m": `"evil\x1b[31mRED\x1b[0m"`,
		"nul\x00x":               `"nul\x00x"`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %s, want %s", in, got, want)
		}
	}
}

// An unreadable snapshot file is named once (fault trial: "open
// /nonexistent: open /nonexistent: …").
func TestSnapshotCmds_NameAMissingFileOnce(t *testing.T) {
	missing := t.TempDir() + "/missing.snap"
	for _, args := range [][]string{
		{"snapshot", "inspect", missing},
		{"snapshot", "restore", missing, "--addr", "127.0.0.1:1"},
	} {
		_, err := runCLI(t, "", args...)
		if err == nil || strings.Count(err.Error(), missing) != 1 || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("%s: err = %v, want the path named once and the reason", strings.Join(args[:2], " "), err)
		}
	}
}
