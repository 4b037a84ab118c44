package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/inference-cache/inference-cache/client"
)

// newHealthCmd is the container health check: one grpc.health.v1 Check
// against a node, exit status 0 only when it answers SERVING. Images built
// FROM scratch have no shell or curl, so the binary checks itself.
func newHealthCmd() *cobra.Command {
	var addr, service string
	var timeout time.Duration
	var sec clientSecurityFlags
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check a node's gRPC health service (exit 0 when SERVING)",
		Long: `Calls grpc.health.v1.Health/Check on --addr and exits 0 when the node reports
SERVING, 1 otherwise (not serving, unreachable or slower than --timeout).
A node reports SERVING once its Raft node has started and while its own log
and state machine keep up; NOT_SERVING while appends to its log fail (e.g. a
full disk), while it replays the log found at start, while committed entries
wait longer than maxStaleness to be applied, and while it shuts down.
Meant for container health checks (Docker HEALTHCHECK, compose); Kubernetes
probes the same service natively.`,
		Example: `  inference-cache health
  inference-cache health --addr 10.0.0.1:7401 --service inferencecache.v1.InferenceCache`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			var cc client.Config
			if err := sec.apply(&cc); err != nil {
				return err
			}
			if cc.TLS != nil {
				opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cc.TLS)))
			}
			conn, err := grpc.NewClient(addr, opts...)
			if err != nil {
				return fmt.Errorf("health %s: %w", addr, err)
			}
			defer conn.Close()
			r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
			if err != nil {
				return fmt.Errorf("health %s: %w", addr, err)
			}
			if r.Status != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("health %s: %s", addr, r.Status)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), r.Status)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", defaultGRPCAddr, "gRPC address of the node to check")
	f.StringVar(&service, "service", "", `service name to check ("" = the whole server)`)
	f.DurationVar(&timeout, "timeout", 3*time.Second, "bound on the check")
	sec.register(cmd)
	return cmd
}
