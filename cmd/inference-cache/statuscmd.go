package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/internal/localpid"
)

func newStatusCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each node's Raft state, leader, indexes and members",
		Long: `Calls Cluster.Status on every --addr and prints one row per node (state,
leader, term, applied and commit index, last leader contact, digest), then the
membership as seen by the first node that answered.

The index digest is printed with the applied index it was computed at
(DIGEST@INDEX, hex; in --json it is "digest" with its "applied_index", the
digest in decimal). Status and digest are two calls, so under load APPLIED
and the digest's index can differ: compare digests of nodes only at equal
digest indexes. The applied index rises by one every expire interval (10 s)
even without writes: the leader commits an expire command.

PID is the pid of the process listening on the row's address when it runs
on this machine (found through /proc; "-" for another host's address or
where /proc does not say), so that killing a node (the leader, to watch
failover) needs no matching of names to a banner; --json gives it as
"pid" when known.`,
		Example: `  inference-cache status
  inference-cache status --addr 127.0.0.1:7401 --addr 127.0.0.1:7411 --addr 127.0.0.1:7421 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Each node is asked on its own; run gives the bound.
			return cf.run(cmd, func(ctx context.Context, _ *client.Client) error {
				rows, err := statusRows(ctx, &cf)
				if err != nil {
					return err
				}
				if cf.json {
					err = printStatusJSON(ctx, cmd, &cf, rows)
				} else {
					err = printStatusTable(ctx, cmd, &cf, rows)
				}
				if err != nil {
					return err
				}
				if !slices.ContainsFunc(rows, func(r statusRow) bool { return r.err == nil }) {
					// Each address's reason is in the output; the error
					// says only that none answered.
					return &explainedErr{fmt.Sprintf("no node answered Status at %s (the output above says why)", strings.Join(cf.addrs, ", "))}
				}
				return nil
			})
		},
	}
	cf.register(cmd, addrEach)
	return cmd
}

// statusRow is one --addr's answer: its Status and Digest, or why not.
type statusRow struct {
	addr   string
	st     *pb.StatusResponse
	digest *pb.DigestResponse
	err    error
}

// statusRows asks every --addr on its own for its Status and Digest.
func statusRows(ctx context.Context, cf *clientFlags) ([]statusRow, error) {
	var rows []statusRow
	for _, a := range cf.addrs {
		one, err := cf.dialAddrs([]string{a})
		if err != nil {
			return nil, err
		}
		r := statusRow{addr: a}
		r.err = one.Do(ctx, func(ctx context.Context, _ string, _ pb.InferenceCacheClient, cl pb.ClusterClient) error {
			var err error
			if r.st, err = cl.Status(ctx, &pb.StatusRequest{}); err != nil {
				return err
			}
			r.digest, err = cl.Digest(ctx, &pb.DigestRequest{})
			return err
		})
		one.Close()
		rows = append(rows, r)
	}
	return rows, nil
}

// printStatusJSON prints the rows as one JSON array: each node's status
// and digest (and pid when local), or its address and error.
func printStatusJSON(ctx context.Context, cmd *cobra.Command, cf *clientFlags, rows []statusRow) error {
	out := []json.RawMessage{}
	for _, r := range rows {
		if r.err != nil {
			b, _ := json.Marshal(map[string]string{"addr": r.addr, "error": cf.explainAddr(ctx, r.addr, r.err)})
			out = append(out, b)
			continue
		}
		st, _ := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(r.st)
		dg, _ := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(r.digest)
		pid := ""
		if p, ok := localpid.PID(r.addr); ok {
			pid = fmt.Sprintf(`"pid":%d,`, p)
		}
		out = append(out, json.RawMessage(fmt.Sprintf(`{"addr":%q,%s"status":%s,"digest":%s}`, r.addr, pid, st, dg)))
	}
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// printStatusTable prints one row per node, then the members as the
// first node that answered sees them.
func printStatusTable(ctx context.Context, cmd *cobra.Command, cf *clientFlags, rows []statusRow) error {
	w := table(cmd.OutOrStdout())
	fmt.Fprintln(w, "ADDR\tNODE\tPID\tSTATE\tLEADER\tTERM\tAPPLIED\tCOMMIT\tLAST CONTACT MS\tDIGEST@INDEX")
	var members []*pb.Member
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(w, "%s\t-\t-\tunreachable\t-\t-\t-\t-\t-\t%v\n", r.addr, cf.explainAddr(ctx, r.addr, r.err))
			continue
		}
		s := r.st
		pid := "-"
		if p, ok := localpid.PID(r.addr); ok {
			pid = strconv.Itoa(p)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%016x@%d\n", r.addr, s.NodeId, pid, s.State, s.LeaderId, s.Term, s.AppliedIndex, s.CommitIndex, s.LastLeaderContactMs, r.digest.Digest, r.digest.AppliedIndex)
		if members == nil {
			members = s.Members
		}
	}
	if len(members) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "MEMBER\tRAFT ADDRESS\tGRPC ADDRESS\tSUFFRAGE\tHEALTHY\tWHY NOT")
		for _, m := range members {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%t\t%s\n", m.Id, m.RaftAddress, m.GrpcAddress, m.Suffrage, m.Healthy, m.UnhealthyReason)
		}
	}
	return w.Flush()
}
