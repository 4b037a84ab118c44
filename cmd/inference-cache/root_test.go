package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command an operator can run has --help with an example,
// including ones added later: the tree is walked, not listed.
func TestEveryRunnableCommandHasAnExample(t *testing.T) {
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Name() != "help" && c.Name() != "completion" && c.HasParent() {
			seen++
			if c.Example == "" {
				t.Errorf("%q has no Example", c.CommandPath())
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
	if seen < 15 {
		t.Fatalf("walked only %d runnable commands; the tree is not what this test expects", seen)
	}
}

// The SDK fails open for gateways, but an operator's lookup against nodes
// that do not answer must fail, not print a NO_HINT as if one had.
func TestLookupCmd_FailsWhenNoNodeAnswers(t *testing.T) {
	_, err := runCLI(t, "", "lookup", "--addr", "127.0.0.1:1", "--model", "m", "--tokens", "1,2,3", "--timeout", "2s")
	if err == nil || !strings.Contains(err.Error(), "no node answered") {
		t.Fatalf("err = %v, want one saying no node answered", err)
	}
}

// snapshot save refuses a destination it could never rename onto before
// asking any node, and leaves no .partial file behind.
func TestSnapshotSave_RefusesBadDestinationFirst(t *testing.T) {
	dir := t.TempDir()
	for _, dest := range []string{"", dir} {
		_, err := runCLI(t, "", "snapshot", "save", dest, "--addr", "127.0.0.1:1", "--timeout", "2s")
		if err == nil || !strings.Contains(err.Error(), "snapshot save") {
			t.Errorf("save %q: err = %v", dest, err)
		}
		if _, serr := os.Stat(dest + ".partial"); serr == nil {
			t.Errorf("save %q left %s.partial behind", dest, dest)
		}
	}
}

// Every client command takes --addr, repeatable, and --json (the README
// says so); subscribe, proxy and picker are daemons with nothing to print. Walked, so a new
// command cannot forget.
func TestClientCommands_TakeRepeatableAddrAndJSON(t *testing.T) {
	var walk func(c *cobra.Command)
	clients := 0
	walk = func(c *cobra.Command) {
		if a := c.Flags().Lookup("addr"); a != nil && c.Name() != "subscribe" && c.Name() != "proxy" && c.Name() != "picker" {
			clients++
			if typ := a.Value.Type(); typ != "stringSlice" && typ != "stringArray" {
				t.Errorf("%s: --addr is a %s, not repeatable", c.CommandPath(), typ)
			}
			if c.Flags().Lookup("json") == nil {
				t.Errorf("%s takes --addr but not --json", c.CommandPath())
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
	if clients < 12 {
		t.Fatalf("found only %d client commands; the tree is not what this test expects", clients)
	}
}

// --version answers like the version command (the Makefile stamps
// main.version; a test binary has the default, "dev").
func TestRoot_VersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := runCLI(t, "", args...)
		if err != nil || out != "inference-cache dev\n" {
			t.Errorf("%v: %q, %v; want %q", args, out, err, "inference-cache dev\n")
		}
	}
}
