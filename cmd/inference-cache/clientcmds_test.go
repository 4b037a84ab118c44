package main

import (
	"strings"
	"testing"
	"time"
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

// --addr without a port is refused before any call, naming the flag (gRPC
// would otherwise dial port 443); host:port, [v6]:port and scheme targets
// pass.
func TestClientFlags_AddrNeedsAPort(t *testing.T) {
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1", false}, {"localhost", false}, {"127.0.0.1:", false},
		{"127.0.0.1:7401", true}, {"[::1]:7401", true}, {"dns:///node1:7401", true},
	} {
		f := &clientFlags{addrs: []string{c.addr}, timeout: time.Second}
		err := f.validate()
		if c.ok != (err == nil) {
			t.Errorf("--addr %q: err %v, want ok=%v", c.addr, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--addr \""+c.addr+"\": want HOST:PORT") {
			t.Errorf("--addr %q: error %q does not name the flag and the form", c.addr, err)
		}
	}
}

// lookup warns on stderr, once per field, when --model or --tenant is
// empty; with both given it says nothing.
func TestWarnEmptyPartition(t *testing.T) {
	for _, c := range []struct {
		model, tenant string
		want          []string
	}{
		{"", "", []string{"--model is empty", "--tenant is empty"}},
		{"m", "", []string{"--tenant is empty"}},
		{"", "t", []string{"--model is empty"}},
		{"m", "t", nil},
	} {
		var b strings.Builder
		warnEmptyPartition(&b, c.model, c.tenant)
		if got := strings.Count(b.String(), "warning: "); got != len(c.want) {
			t.Errorf("model %q tenant %q: %d warnings in %q, want %d", c.model, c.tenant, got, b.String(), len(c.want))
		}
		for _, w := range c.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("model %q tenant %q: %q lacks %q", c.model, c.tenant, b.String(), w)
			}
		}
	}
}
