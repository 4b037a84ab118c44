package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// untilSignal makes a command's RunE from run, whose context ends at the
// first SIGINT or SIGTERM, so that a long-running command (a server, a
// proxy, a benchmark) shuts down cleanly instead of being cut off.
func untilSignal(run func(ctx context.Context, cmd *cobra.Command) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return run(ctx, cmd)
	}
}
