package main

import (
	"testing"

	"github.com/spf13/cobra"
)

// Every command an operator can run has --help with an example (issue 5),
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
