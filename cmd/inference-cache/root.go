package main

import "github.com/spf13/cobra"

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
		// --version prints what the version command prints.
		Version: version,
		// Every flag also reads INFERENCE_CACHE_<FLAG> (see env.go); no
		// string flag reaches an RPC unless it is UTF-8.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd); err != nil {
				return err
			}
			return envNamed(cmd, checkUTF8Flags(cmd))
		},
	}
	root.SetVersionTemplate("inference-cache {{.Version}}\n")
	root.SetFlagErrorFunc(suggestFlags)
	root.AddCommand(newVersionCmd(), newFingerprintCmd(), newServerCmd(), newDevCmd(),
		newLookupCmd(), newIngestCmd(), newStatsCmd(), newStatusCmd(), newPolicyCmd(), newSnapshotCmd())
	root.AddCommand(newSubscribeCmd())
	root.AddCommand(newBenchCmd())
	root.AddCommand(newHealthCmd())
	root.AddCommand(newTopCmd())
	root.AddCommand(newClusterCmd())
	root.AddCommand(newSimEngineCmd())
	root.AddCommand(newRenderCmd())
	root.AddCommand(newProxyCmd())
	root.AddCommand(newPickerCmd())
	root.AddCommand(newLoadgenCmd())
	nameEnvInErrors(root)
	return root
}

// nameEnvInErrors makes the errors of every command under c name the
// environment variable a bad value came from (envNamed), whichever check
// found it.
func nameEnvInErrors(c *cobra.Command) {
	if run := c.PreRunE; run != nil {
		c.PreRunE = func(cmd *cobra.Command, args []string) error { return envNamed(cmd, run(cmd, args)) }
	}
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error { return envNamed(cmd, run(cmd, args)) }
	}
	for _, s := range c.Commands() {
		nameEnvInErrors(s)
	}
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
