package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/internal/topview"
)

func newTopCmd() *cobra.Command {
	var cf clientFlags
	var every time.Duration
	var once bool
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live view of a cluster: node states, lookups per second by reason code, leader changes",
		Long: `Polls Status on every --addr (and every member they report) each --interval and
shows each node's Raft state, term, applied index and stale flag; lookups per
second since the line or frame before (one interval) with their reason-code mix; the leader (and since
when, once a poll has seen it take over), its last change and how long the
cluster had no leader around it (writes unavailable; measured between polls,
so within one interval); and one line per picker (gateway) sharing its load:
its id, the replicas it has requests on, its requests before their first token,
their prompt tokens, its requests in flight, the age of its latest report and
on how many nodes that report is held; the 20 pickers with the most requests
in flight, the others summed on one line. On a terminal the table is redrawn in place;
otherwise one plain line per interval. --json prints each poll as one JSON
object per line. --once polls twice, one interval apart, prints once and
exits.`,
		Example: `  inference-cache top
  inference-cache top --addr 10.0.0.1:7401 --interval 2s
  inference-cache top --once --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if every < 100*time.Millisecond {
				return fmt.Errorf("--interval %v: must be at least 100ms", every)
			}
			return runTopCmd(cmd, &cf, every, once)
		},
	}
	cf.register(cmd, addrTop)
	cmd.Flags().DurationVar(&every, "interval", time.Second, "time between polls (at least 100ms)")
	cmd.Flags().BoolVar(&once, "once", false, "poll twice, one interval apart, print once and exit")
	return cmd
}

// runTopCmd is top after its flags: the nodes polled once to learn the
// members (so the first rates cover every node), then the live view.
func runTopCmd(cmd *cobra.Command, cf *clientFlags, every time.Duration, once bool) error {
	p := topview.NewPoller(cf.addrs, func(a string) (*client.Client, error) { return cf.dialAddrs([]string{a}) }, cf.timeout, explainCallErr)
	defer p.Close()
	p.Poll(cmd.Context())
	out := cmd.OutOrStdout()
	v := &topview.View{}
	mode := topview.Plain
	switch {
	case cf.json:
		mode = topview.JSON
	case isTerminal(out):
		mode = topview.Terminal
	}
	if err := topview.Run(cmd.Context(), out, p, v, topview.RunConfig{Every: every, Mode: mode, Once: once}); err != nil {
		return err
	}
	if err := v.Unanswered(); err != nil {
		return fmt.Errorf("no node answered Status: %w", err) // register's explain words it
	}
	return nil
}
