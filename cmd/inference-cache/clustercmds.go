package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
)

// newClusterCmd is `inference-cache cluster …`: membership changes and
// leadership transfer (contract §8.10 admin). Raft accepts these only on the
// leader, so each subcommand asks the --addr nodes who leads and calls it.
func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
		Short: "Change membership or move leadership (add-server, remove-server, transfer-leadership)",
		Long: `Operator commands for the Raft membership. They go to the current leader,
found through any --addr node. Servers normally join by gossip with the same
command line as the rest (--join, --bootstrap-expect); use these to replace a
dead server by hand or to move leadership before maintenance.`,
		Example: `  inference-cache cluster remove-server node3 --addr 127.0.0.1:7401
  inference-cache cluster add-server node4 10.0.0.4:7402
  inference-cache cluster transfer-leadership`,
	}
	cmd.AddCommand(newAddServerCmd(), newRemoveServerCmd(), newTransferLeadershipCmd())
	return cmd
}

// onLeader runs fn against the current leader: it asks the --addr nodes for
// Status, then calls the leader's gRPC address, and the --addr nodes in
// turn when the leader is unavailable (leadership moved meanwhile).
func onLeader(ctx context.Context, cf *clientFlags, fn func(ctx context.Context, cl pb.ClusterClient) error) error {
	c, err := cf.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	var leader string
	err = c.Do(ctx, func(ctx context.Context, _ string, _ pb.InferenceCacheClient, cl pb.ClusterClient) error {
		st, err := cl.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return err
		}
		leader = st.GetLeaderAddress()
		return nil
	})
	if err != nil {
		return fmt.Errorf("cluster status: %w", err)
	}
	if leader == "" {
		return errors.New("no leader is known to the --addr nodes (no quorum?)")
	}
	lc, err := cf.dialAddrs([]string{leader})
	if err != nil {
		return err
	}
	defer lc.Close()
	call := func(ctx context.Context, _ string, _ pb.InferenceCacheClient, cl pb.ClusterClient) error {
		return fn(ctx, cl)
	}
	err = lc.Do(ctx, call)
	if status.Code(err) == codes.Unavailable {
		// Leadership moved meanwhile, or the leader's advertised address
		// is not reachable from here: the --addr nodes in turn (a
		// follower refuses with UNAVAILABLE, and the next is asked).
		err = c.Do(ctx, call)
	}
	return err
}

func newAddServerCmd() *cobra.Command {
	var cf clientFlags
	var nonvoter bool
	cmd := &cobra.Command{
		Use:     "add-server ID RAFT_ADDR",
		Short:   "Add a server to the Raft configuration (voter unless --nonvoter)",
		Example: "  inference-cache cluster add-server node4 10.0.0.4:7402 --addr 127.0.0.1:7401",
		Args:    namedArgs("ID", "RAFT_ADDR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
			defer cancel()
			return onLeader(ctx, &cf, func(ctx context.Context, cl pb.ClusterClient) error {
				r, err := cl.AddServer(ctx, &pb.AddServerRequest{Id: args[0], RaftAddress: args[1], Nonvoter: nonvoter})
				if err != nil {
					return fmt.Errorf("add-server %s: %w", args[0], err)
				}
				if cf.json {
					return printJSON(cmd.OutOrStdout(), r)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "added %s (%s) at log index %d\n", args[0], args[1], r.GetIndex())
				return err
			})
		},
	}
	cf.register(cmd, addrLeader)
	cmd.Flags().BoolVar(&nonvoter, "nonvoter", false, "add as a non-voter (receives the log, does not vote)")
	return cmd
}

func newRemoveServerCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "remove-server ID",
		Short: "Remove a server from the Raft configuration",
		Long: `Removes a server (for example a dead one) from the voters. Removing voters
lowers the quorum: never remove more than (voters−1)/2 servers that might still
be alive.`,
		Example: "  inference-cache cluster remove-server node3 --addr 127.0.0.1:7401",
		Args:    namedArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
			defer cancel()
			return onLeader(ctx, &cf, func(ctx context.Context, cl pb.ClusterClient) error {
				r, err := cl.RemoveServer(ctx, &pb.RemoveServerRequest{Id: args[0]})
				if err != nil {
					return fmt.Errorf("remove-server %s: %w", args[0], err)
				}
				if cf.json {
					return printJSON(cmd.OutOrStdout(), r)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "removed %s at log index %d\n", args[0], r.GetIndex())
				return err
			})
		},
	}
	cf.register(cmd, addrLeader)
	return cmd
}

func newTransferLeadershipCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "transfer-leadership [ID RAFT_ADDR]",
		Short: "Hand leadership to another server (the most up-to-date follower when none is named)",
		Example: `  inference-cache cluster transfer-leadership
  inference-cache cluster transfer-leadership node2 10.0.0.2:7402`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 && len(args) != 2 {
				return fmt.Errorf("give no arguments or both ID and RAFT_ADDR, got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
			defer cancel()
			req := &pb.TransferLeadershipRequest{}
			if len(args) == 2 {
				req.Id, req.Address = args[0], args[1]
			}
			return onLeader(ctx, &cf, func(ctx context.Context, cl pb.ClusterClient) error {
				r, err := cl.TransferLeadership(ctx, req)
				if err != nil {
					return fmt.Errorf("transfer-leadership: %w", err)
				}
				if cf.json {
					return printJSON(cmd.OutOrStdout(), r)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "leader is now %s\n", r.GetLeaderId())
				return err
			})
		},
	}
	cf.register(cmd, addrLeader)
	return cmd
}
