package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/policy"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
		Short: "Get or set the replicated CachePolicy",
		Example: `  inference-cache policy get > policy.yaml
  inference-cache policy set policy.yaml`,
	}
	cmd.AddCommand(newPolicyGetCmd(), newPolicySetCmd())
	return cmd
}

func newPolicyGetCmd() *cobra.Command {
	var gf clientFlags
	get := &cobra.Command{
		Use:   "get",
		Short: "Print the policy in force as a CachePolicy YAML file (or JSON)",
		Example: `  inference-cache policy get
  inference-cache policy get --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return gf.run(cmd, func(ctx context.Context, c *client.Client) error {
				var err error
				var p *pb.CachePolicy
				err = c.Do(ctx, func(ctx context.Context, _ string, ic pb.InferenceCacheClient, _ pb.ClusterClient) error {
					p, err = ic.GetCachePolicy(ctx, &pb.GetCachePolicyRequest{})
					return err
				})
				if err != nil {
					return err
				}
				return gf.print(cmd, p, func(w io.Writer) error { return writePolicyYAML(w, p) })
			})
		},
	}
	gf.register(get, addrTurn)
	return get
}

func newPolicySetCmd() *cobra.Command {
	var sf clientFlags
	var force bool
	set := &cobra.Command{
		Use:   "set FILE",
		Short: "Replace the policy with a CachePolicy YAML file (through the Raft log)",
		Long: `Loads FILE (kind: CachePolicy, spec: with the camelCase knobs of contract §7.1;
absent knobs take their defaults), validates it locally (errors name the file,
line, field and reason) and commits it. Says on stderr which version it
committed ("committed FILE as policy version N (was version M)") and prints
the policy now in force on stdout (--json: as JSON, with its "version").

A file written by "policy get" starts with "# version N": when the cluster's
policy has moved past N since, the file would silently undo those changes, so
it is refused unless --force. A file whose knobs equal the policy in force is
reported as unchanged and commits nothing (the version stays).`,
		Example: `  inference-cache policy set policy.yaml
  inference-cache policy set policy.yaml --addr 127.0.0.1:7411 --json
  inference-cache policy set old-policy.yaml --force`,
		Args: namedArgs("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("policy set: %w", pathErr(args[0], err))
			}
			p, err := policy.Parse(args[0], data)
			if err != nil {
				return err
			}
			return sf.run(cmd, func(ctx context.Context, c *client.Client) error {
				return setPolicy(ctx, cmd, c, &sf, args[0], data, p, force)
			})
		},
	}
	set.Flags().BoolVar(&force, "force", false, "set the file even when it was written from an older policy version than the cluster's")
	sf.register(set, addrTurn)
	return set
}

// setPolicy commits p, read from file (whose bytes are data), unless the
// file was written from an older version than the cluster's (without
// force) or its knobs equal the policy in force; it prints the policy in
// force after.
func setPolicy(ctx context.Context, cmd *cobra.Command, c *client.Client, sf *clientFlags, file string, data []byte, p policy.Policy, force bool) error {
	var err error
	want := api.PolicyToPB(p)
	var cur, got *pb.CachePolicy
	err = c.Do(ctx, func(ctx context.Context, _ string, ic pb.InferenceCacheClient, _ pb.ClusterClient) error {
		cur, err = ic.GetCachePolicy(ctx, &pb.GetCachePolicyRequest{})
		return err
	})
	if err != nil {
		return err
	}
	if base, ok := policy.BaseVersion(data); ok && base < cur.Version && !force {
		return fmt.Errorf("policy set: %s was written from policy version %d, and the cluster's policy is now version %d: setting it would undo the changes made since; read the current one with `policy get`, or pass --force", file, base, cur.Version)
	}
	if sameKnobs(cur, want) {
		if sf.json {
			return printJSON(cmd.OutOrStdout(), cur)
		}
		_, err := fmt.Fprintf(cmd.OutOrStdout(), "policy unchanged: %s equals the policy in force (version %d); nothing committed\n", file, cur.Version)
		return err
	}
	err = c.Do(ctx, func(ctx context.Context, _ string, ic pb.InferenceCacheClient, _ pb.ClusterClient) error {
		got, err = ic.SetCachePolicy(ctx, &pb.SetCachePolicyRequest{Policy: want})
		return err
	})
	if err != nil {
		return err
	}
	// The outcome goes to stderr: stdout stays the YAML of the policy in
	// force, which policy set reads back.
	if !sf.json {
		fmt.Fprintf(cmd.ErrOrStderr(), "committed %s as policy version %d (was version %d); the policy now in force:\n", file, got.Version, cur.Version)
	}
	return sf.print(cmd, got, func(w io.Writer) error { return writePolicyYAML(w, got) })
}

// sameKnobs reports whether two policies differ only in their version.
func sameKnobs(a, b *pb.CachePolicy) bool {
	x, y := proto.Clone(a).(*pb.CachePolicy), proto.Clone(b).(*pb.CachePolicy)
	x.Version, y.Version = 0, 0
	return proto.Equal(x, y)
}

func writePolicyYAML(w io.Writer, q *pb.CachePolicy) error {
	// The server's policy always validates; convert through the policy
	// type so the YAML is exactly what `policy set` reads.
	p, err := api.PolicyFromPB(q)
	if err != nil {
		return printJSON(w, q)
	}
	p.Version = q.Version
	_, err = w.Write(policy.MarshalYAML(p))
	return err
}
