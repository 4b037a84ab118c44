// Command inference-cache is the one binary of the project: the server, the
// operator CLI and the benchmark gateway, as subcommands (contract §12).
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
