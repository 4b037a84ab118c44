package main

import "testing"

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
