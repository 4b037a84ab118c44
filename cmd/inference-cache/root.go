package main

import (
	"github.com/spf13/cobra"
)

// version is stamped by the Makefile with -ldflags "-X main.version=…".
var version = "dev"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "inference-cache",
		Short: "Prefix-cache routing hints for LLM inference fleets",
		Long: `inference-cache tells an LLM gateway which inference replicas (vLLM, SGLang)
already hold a prompt's prefix in their KV cache. The prefix index is fed by
the engines' KV-cache events and replicated with Raft across server nodes;
every node answers LookupRoute from its local copy.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Every flag also reads INFERENCE_CACHE_<FLAG> (see env.go).
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return applyEnv(cmd) },
	}
	root.AddCommand(newVersionCmd(), newFingerprintCmd(), newServerCmd(), newDevCmd(),
		newLookupCmd(), newIngestCmd(), newStatsCmd(), newStatusCmd(), newPolicyCmd(), newSnapshotCmd())
	root.AddCommand(newSubscribeCmd())
	root.AddCommand(newBenchCmd())
	root.AddCommand(newHealthCmd())
	root.AddCommand(newClusterCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version",
		Example: "  inference-cache version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write([]byte("inference-cache " + version + "\n"))
			return err
		},
	}
}
