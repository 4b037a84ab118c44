package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
)

// readInput reads a file, or stdin when path is "" or "-".
func readInput(cmd *cobra.Command, path string) ([]byte, error) {
	if path == "" || path == "-" {
		return io.ReadAll(bufio.NewReader(cmd.InOrStdin()))
	}
	return os.ReadFile(path)
}

func printRejections(w io.Writer, accepted uint32, applied uint64, duplicate bool, rej []*pb.Rejection, what string) error {
	tw := table(w)
	fmt.Fprintf(tw, "accepted\t%d %s\n", accepted, what)
	fmt.Fprintf(tw, "applied index\t%d\n", applied)
	if duplicate {
		fmt.Fprintf(tw, "duplicate\tthis request_id was already applied at index %d: these %s were NOT applied again (use a fresh request_id for a new write)\n", applied, what)
	}
	fmt.Fprintf(tw, "rejected\t%d\n", len(rej))
	if len(rej) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "INDEX\tREASON")
		for _, r := range rej {
			fmt.Fprintf(tw, "%d\t%s\n", r.EventIndex, r.Reason)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return rejectedErr(len(rej), accepted, what)
}

// rejectedErr makes the exit status say that part of the input was
// refused (the accepted part is committed either way).
func rejectedErr(rejected int, accepted uint32, what string) error {
	if rejected == 0 {
		return nil
	}
	return fmt.Errorf("%d %s rejected (listed in the output); the %d accepted are committed", rejected, what, accepted)
}

func newIngestCmd() *cobra.Command {
	var cf clientFlags
	var file string
	cmd := &cobra.Command{
		Use:   "ingest",
		Short: "Commit block events (JSON) through the Raft log",
		Long: `Reads block events as JSON from --file or stdin, either an IngestRequest
({"events": [...], "request_id": "..."}) or a bare array of BlockEvent objects,
in the protobuf JSON mapping (field names snake_case or lowerCamelCase, kind as
"STORED"/"REMOVED"/"CLEARED", uint64 hashes as strings or numbers). An object
is read as the IngestRequest: one event alone is refused with the hint to wrap
it in [ ]. Errors name fields as the input spells them. Valid events commit;
invalid ones are listed with their index and reason, and the exit status is
then 1. Retriable failures are retried for up to 5 s with the same request id.`,
		Example: `  echo '[{"kind":"STORED","replica_id":"vllm-0","hash_scheme":"vllm","model_id":"qwen3-8b",
         "tenant_id":"team-a","token_ids":[1,2,3,4],"block_size":2}]' | inference-cache ingest
  inference-cache ingest --file events.json --addr 127.0.0.1:7401 --addr 127.0.0.1:7411`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWrite(cmd, &cf, file, "events", "events", "an IngestRequest or array of events", &pb.IngestRequest{}, (*client.Client).Ingest)
		},
	}
	cf.register(cmd, addrWrite)
	cmd.Flags().StringVarP(&file, "file", "f", "-", "JSON file of events; - = stdin")
	markPaths(cmd.Flags(), "file")
	return cmd
}

// writeResponse is what both write RPCs answer.
type writeResponse interface {
	proto.Message
	GetAccepted() uint32
	GetAppliedIndex() uint64
	GetDuplicate() bool
	GetRejected() []*pb.Rejection
}

// runWrite is the body of `ingest` and `stats`: read the JSON request (or
// a bare array of its items, wrapped under field), send it with call, and
// print the outcome (what names the items); the exit status is 1 when any
// item was rejected.
func runWrite[Req proto.Message, Resp writeResponse](cmd *cobra.Command, cf *clientFlags, file, field, what, shape string,
	req Req, call func(*client.Client, context.Context, Req) (Resp, error)) error {
	b, err := readInput(cmd, file)
	if err != nil {
		return err
	}
	if err := parseWriteInput(b, field, shape, req); err != nil {
		if errors.Is(err, errEmptyInput) {
			if file == "" || file == "-" {
				return fmt.Errorf("no %s on standard input (it was empty)", field)
			}
			return fmt.Errorf("no %s in %s (the file is empty)", field, file)
		}
		return fmt.Errorf("%s: %v", orStdin(file), err)
	}
	return cf.run(cmd, func(ctx context.Context, c *client.Client) error {
		resp, err := call(c, ctx, req)
		if err != nil {
			return err
		}
		if cf.json {
			if err := printJSON(cmd.OutOrStdout(), resp); err != nil {
				return err
			}
			return rejectedErr(len(resp.GetRejected()), resp.GetAccepted(), what)
		}
		return printRejections(cmd.OutOrStdout(), resp.GetAccepted(), resp.GetAppliedIndex(), resp.GetDuplicate(), resp.GetRejected(), what)
	})
}

func orStdin(p string) string {
	if p == "" || p == "-" {
		return "stdin"
	}
	return p
}

func newStatsCmd() *cobra.Command {
	var cf clientFlags
	var file string
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Report replica stats (JSON) through the Raft log",
		Long: `Reads replica stats as JSON from --file or stdin, either a
ReportReplicaStatsRequest ({"stats": [...]}) or a bare array of ReplicaStats
(replica_id, model_id, hash_schemes, pressure 0..1, tenant_hit_rate
{tenant: 0..1}, observed_at_ms, endpoint, waiting_requests and
running_requests at most 1,000,000 each), and commits them. An object is read
as the request: one entry alone is refused with the hint to wrap it in [ ].
Invalid entries are listed with their index and reason (exit status 1; the
valid ones commit).`,
		Example: `  echo '[{"replica_id":"vllm-0","model_id":"qwen3-8b","hash_schemes":["vllm"],
         "pressure":0.3,"tenant_hit_rate":{"team-a":0.6},
         "waiting_requests":4,"running_requests":12}]' | inference-cache stats`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWrite(cmd, &cf, file, "stats", "stats entries", "a ReportReplicaStatsRequest or array of stats", &pb.ReportReplicaStatsRequest{}, (*client.Client).ReportReplicaStats)
		},
	}
	cf.register(cmd, addrWrite)
	cmd.Flags().StringVarP(&file, "file", "f", "-", "JSON file of stats; - = stdin")
	markPaths(cmd.Flags(), "file")
	return cmd
}
