package main

import (
	"context"
	"encoding/json"
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
	var service string
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check nodes' gRPC health service (exit 0 when every one is SERVING)",
		Long: `Calls grpc.health.v1.Health/Check on each --addr and exits 0 when every node
reports SERVING, 1 otherwise (not serving, unreachable or slower than --timeout).
A node reports SERVING once its Raft node has started and while its own log
and state machine keep up; NOT_SERVING while appends to its log fail (e.g. a
full disk), while it replays the log found at start, while committed entries
wait longer than maxStaleness to be applied, and while it shuts down.
Meant for container health checks (Docker HEALTHCHECK, compose); Kubernetes
probes the same service natively.`,
		Example: `  inference-cache health
  inference-cache health --addr 10.0.0.1:7401 --service inferencecache.v1.InferenceCache
  inference-cache health --addr 127.0.0.1:7401 --addr 127.0.0.1:7411 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cc client.Config
			if err := cf.security.apply(&cc); err != nil {
				return err
			}
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if cc.TLS != nil {
				opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cc.TLS)))
			}
			results := make([]healthResult, len(cf.addrs))
			failed := 0
			for i, addr := range cf.addrs {
				results[i] = checkHealth(cmd.Context(), addr, service, cf.timeout, opts)
				if results[i].err != nil {
					results[i].Error = cf.explainAddr(cmd.Context(), addr, results[i].err)
				}
				if results[i].Status != healthpb.HealthCheckResponse_SERVING.String() {
					failed++
				}
			}
			out := cmd.OutOrStdout()
			switch {
			case cf.json:
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(results); err != nil {
					return err
				}
			case len(results) == 1 && failed == 0:
				fmt.Fprintln(out, results[0].Status)
			case len(results) > 1:
				tw := table(out)
				fmt.Fprintln(tw, "ADDR\tSTATUS\tERROR")
				for _, r := range results {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Addr, r.Status, r.Error)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if failed == 1 && len(results) == 1 {
				r := results[0]
				if r.Error != "" {
					return fmt.Errorf("health %s: %s", r.Addr, r.Error)
				}
				return fmt.Errorf("health %s: %s", r.Addr, r.Status)
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d nodes not SERVING", failed, len(results))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&service, "service", "", `service name to check ("" = the whole server)`)
	cf.register(cmd, addrHealth)
	// A container health check wants a short bound.
	t := cmd.Flags().Lookup("timeout")
	t.DefValue, t.Usage = "3s", "bound on each node's check (positive)"
	_ = t.Value.Set("3s")
	return cmd
}

// healthResult is one node's answer, as printed by `health --json`.
type healthResult struct {
	Addr   string `json:"addr"`
	Status string `json:"status"` // SERVING, NOT_SERVING, UNKNOWN, SERVICE_UNKNOWN or UNREACHABLE
	Error  string `json:"error,omitempty"`
	err    error  // the call's error, which Error words
}

// checkHealth calls grpc.health.v1 Check on addr within timeout.
func checkHealth(ctx context.Context, addr, service string, timeout time.Duration, opts []grpc.DialOption) healthResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return healthResult{Addr: addr, Status: "UNREACHABLE", Error: err.Error()}
	}
	defer conn.Close()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
	if err != nil {
		return healthResult{Addr: addr, Status: "UNREACHABLE", Error: err.Error(), err: err}
	}
	return healthResult{Addr: addr, Status: r.Status.String()}
}

// explainCallErr is a gRPC call error in words a person can act on, as
// explainAddr words it but without asking other ports what a non-gRPC
// port is: for top, which polls every interval.
func explainCallErr(err error) string {
	switch failure(err.Error()) {
	case "http":
		return httpPortText
	case "refused":
		return refusedText
	case "notgrpc":
		return "it " + notGRPCText + ": it closes connections at gRPC's handshake, as a node's Raft and gossip ports do; use the node's --grpc-addr"
	}
	return err.Error()
}
