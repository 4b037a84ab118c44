package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/policy"
	"github.com/inference-cache/inference-cache/snapshot"
)

// clientFlags are shared by every client subcommand.
type clientFlags struct {
	addrs    []string
	json     bool
	timeout  time.Duration
	security clientSecurityFlags
}

func (c *clientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&c.addrs, "addr", []string{defaultGRPCAddr}, "gRPC address of a server node (repeatable); calls go to the first that answers")
	cmd.Flags().BoolVar(&c.json, "json", false, "print JSON instead of a table")
	cmd.Flags().DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the whole command (positive)")
	c.security.register(cmd)
	cmd.PreRunE = func(*cobra.Command, []string) error { return c.validate() }
}

// validate refuses client flag values no call could succeed with, before
// any call.
func (c *clientFlags) validate() error {
	if c.timeout <= 0 {
		return fmt.Errorf("--timeout %v: must be positive", c.timeout)
	}
	for _, a := range c.addrs {
		if strings.Contains(a, "://") {
			continue // a gRPC target with a scheme (dns:///…) names its own port
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return fmt.Errorf("--addr %q: want HOST:PORT, e.g. 127.0.0.1:7401 (without a port gRPC would dial :443)", a)
		}
	}
	return nil
}

func (c *clientFlags) dial() (*client.Client, error) {
	return c.dialAddrs(c.addrs)
}

// dialAddrs is dial to addrs instead of --addr.
func (c *clientFlags) dialAddrs(addrs []string) (*client.Client, error) {
	cfg := client.Config{Addrs: addrs, LookupTimeout: c.timeout}
	if err := c.security.apply(&cfg); err != nil {
		return nil, err
	}
	return client.New(cfg)
}

var pjson = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true, Multiline: true, Indent: "  "}

func printJSON(w io.Writer, m proto.Message) error {
	b, err := pjson.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// parseUints parses a list of unsigned integers of at most bits bits,
// separated by commas or white space. An empty item between two commas or
// at either end of the list is an error naming its position, not skipped:
// "1,,2" is more likely a lost value than a list of two.
func parseUints(s string, bits int) ([]uint64, error) {
	var out []uint64
	pos := 0
	for _, item := range strings.Split(s, ",") {
		fields := strings.Fields(item)
		if len(fields) == 0 {
			pos++
			return nil, fmt.Errorf("item %d is empty (two commas in a row, or a comma at an end of the list)", pos)
		}
		for _, f := range fields {
			pos++
			v, err := strconv.ParseUint(f, 10, bits)
			if err != nil {
				return nil, fmt.Errorf("item %d %q: must be an integer between 0 and %d", pos, f, uint64(1)<<bits-1)
			}
			out = append(out, v)
		}
	}
	return out, nil
}

// readPromptFile reads the prompt of `lookup --prompt-file` (stdin for
// "-") verbatim, refusing what the server would not take: more than
// api.MaxPromptBytes, or text that is not UTF-8.
func readPromptFile(cmd *cobra.Command, path string) (string, error) {
	var r io.Reader = cmd.InOrStdin()
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("--prompt-file: %w", pathErr(path, err))
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, api.MaxPromptBytes+1))
	if err != nil {
		return "", fmt.Errorf("--prompt-file %s: %w", orStdin(path), err)
	}
	switch {
	case len(b) > api.MaxPromptBytes:
		return "", fmt.Errorf("--prompt-file %s: over the limit of %d bytes (api.MaxPromptBytes)", orStdin(path), api.MaxPromptBytes)
	case len(b) == 0:
		return "", fmt.Errorf("--prompt-file %s: empty; a prompt needs at least 1 byte", orStdin(path))
	case !utf8.Valid(b):
		off := invalidUTF8At(string(b))
		return "", fmt.Errorf("--prompt-file %s: not valid UTF-8: byte %#02x at offset %d", orStdin(path), b[off], off)
	}
	return string(b), nil
}

// pathErr is err about the file at path, naming path once: an
// *fs.PathError for path already names it, and wrapping it again prints
// "open x: open x: …".
func pathErr(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == path {
		return fmt.Errorf("%s %s: %w", pe.Op, path, pe.Err)
	}
	return fmt.Errorf("%s: %w", path, err)
}

func newLookupCmd() *cobra.Command {
	var cf clientFlags
	var req pb.LookupRouteRequest
	var tokens, hashes, prompt, promptFile string
	var blockSize int
	var prefix uint64
	var ttft uint32
	var explain bool
	cmd := &cobra.Command{
		Use:   "lookup",
		Short: "Ask LookupRoute which replicas hold a prompt's prefix",
		Long: `Calls LookupRoute on a node and prints the ranked replicas, the reason code and
how stale the answer may be. The key is given as token ids (--tokens; with
--block-size the CLI fingerprints them locally like a gateway SDK, without it
the server fingerprints with the policy's block size), as block hashes
(--block-hashes, --prefix-hash) or as prompt text (--prompt, or --prompt-file
for a prompt too long for the command line; needs a server with
--models-dir).

Every hint shows the replica's queue (requests waiting and running) from its
last stats report while that report is fresh. --explain asks the server for
the factors behind each score (SPEC 5): for PREFIX_MATCH the score is matched
tokens × freshness × pressure factor × SLO bias × distinguishing power
(ranking v1: matched tokens × freshness, the rest shown as 1); a TENANT_HOT
hint scores its tenant hit rate, an AFFINITY_HINT is the rendezvous-hashing
pick. With --json the explanation is each hint's "factors" object.`,
		Example: `  inference-cache lookup --model qwen3-8b --tenant team-a --tokens "$(seq -s, 0 127)"
  inference-cache lookup --model qwen3-8b --tenant team-a --tokens "$(seq -s, 0 127)" --explain
  inference-cache lookup --model qwen3-8b --prompt "You are a helpful assistant." --json
  inference-cache lookup --addr 127.0.0.1:7411 --model m --block-hashes 123,456
  inference-cache lookup --model qwen3-8b --prompt-file conversation.txt
  inference-cache lookup --model qwen3-8b --cache-salt "$TENANT_SALT" --tokens "$(seq -s, 0 127)"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			warnEmptyPartition(cmd.ErrOrStderr(), req.ModelId, req.TenantId)
			if blockSize < 0 || blockSize > fingerprint.MaxBlockSize {
				return fmt.Errorf("--block-size %d: must be 0 (the server fingerprints) or between 1 and %d", blockSize, fingerprint.MaxBlockSize)
			}
			if cmd.Flags().Changed("prompt-file") {
				if cmd.Flags().Changed("prompt") {
					return errors.New("--prompt and --prompt-file: give the prompt one way, not both")
				}
				var err error
				if prompt, err = readPromptFile(cmd, promptFile); err != nil {
					return err
				}
			} else if len(prompt) > api.MaxPromptBytes {
				return fmt.Errorf("--prompt: %d bytes, over the limit of %d (api.MaxPromptBytes)", len(prompt), api.MaxPromptBytes)
			}
			if tokens != "" {
				ids, err := parseUints(tokens, 32)
				if err != nil {
					return fmt.Errorf("--tokens: %w", err)
				}
				for _, v := range ids {
					req.TokenIds = append(req.TokenIds, uint32(v))
				}
			}
			if hashes != "" {
				hs, err := parseUints(hashes, 64)
				if err != nil {
					return fmt.Errorf("--block-hashes: %w", err)
				}
				req.BlockHashes = hs
			}
			req.PrefixHash, req.PromptText, req.Explain = prefix, prompt, explain
			if ttft > 0 {
				req.Slo = &pb.Slo{TtftMs: ttft}
			}
			if blockSize > 0 && len(req.TokenIds) > 0 {
				if err := client.Fingerprint(&req, req.TokenIds, blockSize); err != nil {
					return fmt.Errorf("--block-size %d: %w", blockSize, err)
				}
			}
			c, err := cf.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			resp := c.LookupRoute(cmd.Context(), &req)
			// The SDK fails open for gateways; an operator asking a node
			// must hear that no node answered.
			if c.Stats().FailOpen > 0 {
				if !strings.Contains(resp.Detail, "Unavailable") && !strings.Contains(resp.Detail, "DeadlineExceeded") {
					return fmt.Errorf("LookupRoute request failed (%s): %s", strings.Join(cf.addrs, ", "), resp.Detail)
				}
				return fmt.Errorf("no node answered LookupRoute (%s): %s", strings.Join(cf.addrs, ", "), resp.Detail)
			}
			if cf.json {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			w := table(cmd.OutOrStdout())
			fmt.Fprintf(w, "reason\t%s\n", resp.ReasonCode)
			if resp.Detail != "" {
				fmt.Fprintf(w, "detail\t%s\n", printable(resp.Detail))
			}
			fmt.Fprintf(w, "served by\t%s (applied index %d, stale %t, last leader contact %d ms)\n", resp.ServedBy, resp.AppliedIndex, resp.Stale, resp.LastLeaderContactMs)
			w.Flush()
			if len(resp.Replicas) == 0 {
				return w.Flush()
			}
			fmt.Fprintln(w)
			if explain {
				printExplained(w, resp)
				return w.Flush()
			}
			fmt.Fprintln(w, "REPLICA\tSCORE\tMATCHED TOKENS\tBLOCKS\tFRESHNESS\tAGE MS\tPRESSURE\tWAITING\tRUNNING")
			for _, h := range resp.Replicas {
				fmt.Fprintf(w, "%s\t%.2f\t%d\t%d\t%.3f\t%d\t%.2f\t%d\t%d\n", printable(h.ReplicaId), h.Score, h.MatchedTokens, h.MatchedBlocks,
					h.Freshness, h.AgeMs, h.Pressure, h.WaitingRequests, h.RunningRequests)
			}
			return w.Flush()
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&req.HashScheme, "scheme", "vllm", "hash_scheme (vllm, sglang, …)")
	f.StringVar(&req.ModelId, "model", "", "model_id")
	f.StringVar(&req.TenantId, "tenant", "", "tenant_id")
	f.StringVar(&req.AdapterId, "adapter", "", "adapter_id (LoRA); empty = base model")
	f.StringVar(&req.CacheSalt, "cache-salt", "", "vLLM cache_salt of the request: --tokens, --prompt and --block-size fingerprints use its hash domain")
	f.StringVar(&tokens, "tokens", "", "token ids, comma- or space-separated")
	f.IntVar(&blockSize, "block-size", 0, "fingerprint --tokens locally with this block size (0 = let the server do it)")
	f.StringVar(&hashes, "block-hashes", "", "block hash chain, comma-separated decimal uint64")
	f.Uint64Var(&prefix, "prefix-hash", 0, "prefix hash (decimal uint64)")
	f.StringVar(&prompt, "prompt", "", "prompt text (the server tokenizes it)")
	f.StringVar(&promptFile, "prompt-file", "", "read the prompt text from this file, verbatim (- = stdin; at most 1 MiB); instead of --prompt")
	markPaths(f, "prompt-file")
	f.Uint32Var(&ttft, "ttft-ms", 0, "SLO time-to-first-token in ms (0 = none)")
	f.Uint32Var(&req.MaxReplicas, "max-replicas", 0, "most hints to return (0 = policy maxReplicas)")
	f.BoolVar(&explain, "explain", false, "show the ranking factors behind each hint's score")
	return cmd
}

// printExplained writes the hints of an explained lookup with the factors
// of their scores (SPEC 5); the fallbacks add what picked them: the tenant
// hit rate (TENANT_HOT) or the rendezvous pick (AFFINITY_HINT). A hint
// without an explanation (a server that predates explain) shows "-".
func printExplained(w io.Writer, resp *pb.LookupRouteResponse) {
	version := "?"
	for _, h := range resp.Replicas {
		if h.Factors != nil {
			version = h.Factors.RankingVersion
			break
		}
	}
	switch {
	case resp.ReasonCode != pb.ReasonCode_PREFIX_MATCH:
	case version == "v1":
		fmt.Fprintln(w, "ranking v1: score = matched tokens × freshness")
	default:
		fmt.Fprintf(w, "ranking %s: score = matched tokens × freshness × pressure factor × SLO bias × distinguishing power\n", version)
	}
	head := "REPLICA\tSCORE\tMATCHED TOKENS\tFRESHNESS\tPRESSURE FACTOR\tSLO BIAS\tDISTINGUISHING POWER\tMATCHING/TOTAL\tWAITING\tRUNNING\tSTATS FRESH"
	switch resp.ReasonCode {
	case pb.ReasonCode_TENANT_HOT:
		head += "\tTENANT HIT RATE"
	case pb.ReasonCode_AFFINITY_HINT:
		head += "\tRENDEZVOUS"
	}
	fmt.Fprintln(w, head)
	for _, h := range resp.Replicas {
		fmt.Fprintf(w, "%s\t%.4f\t%d\t", printable(h.ReplicaId), h.Score, h.MatchedTokens)
		e := h.Factors
		if e == nil {
			fmt.Fprintf(w, "-\t-\t-\t-\t-\t%d\t%d\t-\n", h.WaitingRequests, h.RunningRequests)
			continue
		}
		stats := "no"
		if e.StatsFresh {
			stats = "yes"
		}
		fmt.Fprintf(w, "%.4f\t%.4f\t%.4f\t%.4f\t%d/%d\t%d\t%d\t%s", e.Freshness, e.PressureFactor, e.SloBias, e.DistinguishingPower,
			e.MatchingAtDepth, e.TotalReplicas, h.WaitingRequests, h.RunningRequests, stats)
		switch resp.ReasonCode {
		case pb.ReasonCode_TENANT_HOT:
			fmt.Fprintf(w, "\t%.4f", e.TenantHitRate)
		case pb.ReasonCode_AFFINITY_HINT:
			fmt.Fprintf(w, "\t%t", e.AffinityPick)
		}
		fmt.Fprintln(w)
	}
}

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
"STORED"/"REMOVED"/"CLEARED", uint64 hashes as strings or numbers). Valid events
commit; invalid ones are listed with their index and reason, and the exit
status is then 1. Retriable failures are retried for up to 5 s with the same
request id.`,
		Example: `  echo '[{"kind":"STORED","replica_id":"vllm-0","hash_scheme":"vllm","model_id":"qwen3-8b",
         "tenant_id":"team-a","token_ids":[1,2,3,4],"block_size":2}]' | inference-cache ingest
  inference-cache ingest --file events.json --addr 127.0.0.1:7401 --addr 127.0.0.1:7411`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWrite(cmd, &cf, file, "events", "events", "an IngestRequest or array of events", &pb.IngestRequest{}, (*client.Client).Ingest)
		},
	}
	cf.register(cmd)
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
	c, err := cf.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
	defer cancel()
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
running_requests at most 1,000,000 each), and commits them. Invalid entries
are listed with their index and reason (exit status 1; the valid ones commit).`,
		Example: `  echo '[{"replica_id":"vllm-0","model_id":"qwen3-8b","hash_schemes":["vllm"],
         "pressure":0.3,"tenant_hit_rate":{"team-a":0.6},
         "waiting_requests":4,"running_requests":12}]' | inference-cache stats`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWrite(cmd, &cf, file, "stats", "stats entries", "a ReportReplicaStatsRequest or array of stats", &pb.ReportReplicaStatsRequest{}, (*client.Client).ReportReplicaStats)
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "-", "JSON file of stats; - = stdin")
	markPaths(cmd.Flags(), "file")
	return cmd
}

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
even without writes: the leader commits an expire command.`,
		Example: `  inference-cache status
  inference-cache status --addr 127.0.0.1:7401 --addr 127.0.0.1:7411 --addr 127.0.0.1:7421 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
			defer cancel()
			type row struct {
				addr   string
				st     *pb.StatusResponse
				digest *pb.DigestResponse
				err    error
			}
			var rows []row
			for _, a := range cf.addrs {
				one, err := cf.dialAddrs([]string{a})
				if err != nil {
					return err
				}
				r := row{addr: a}
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
			if cf.json {
				out := []json.RawMessage{}
				for _, r := range rows {
					if r.err != nil {
						b, _ := json.Marshal(map[string]string{"addr": r.addr, "error": r.err.Error()})
						out = append(out, b)
						continue
					}
					st, _ := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(r.st)
					dg, _ := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(r.digest)
					out = append(out, json.RawMessage(fmt.Sprintf(`{"addr":%q,"status":%s,"digest":%s}`, r.addr, st, dg)))
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			w := table(cmd.OutOrStdout())
			fmt.Fprintln(w, "ADDR\tNODE\tSTATE\tLEADER\tTERM\tAPPLIED\tCOMMIT\tLAST CONTACT MS\tDIGEST@INDEX")
			var members []*pb.Member
			failed := 0
			for _, r := range rows {
				if r.err != nil {
					failed++
					fmt.Fprintf(w, "%s\t-\tunreachable\t-\t-\t-\t-\t-\t%v\n", r.addr, explainCallErr(r.err))
					continue
				}
				s := r.st
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%016x@%d\n", r.addr, s.NodeId, s.State, s.LeaderId, s.Term, s.AppliedIndex, s.CommitIndex, s.LastLeaderContactMs, r.digest.Digest, r.digest.AppliedIndex)
				if members == nil {
					members = s.Members
				}
			}
			if len(members) > 0 {
				fmt.Fprintln(w)
				fmt.Fprintln(w, "MEMBER\tRAFT ADDRESS\tGRPC ADDRESS\tSUFFRAGE\tHEALTHY")
				for _, m := range members {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%t\n", m.Id, m.RaftAddress, m.GrpcAddress, m.Suffrage, m.Healthy)
				}
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if failed == len(rows) {
				return fmt.Errorf("no node answered (%d addresses); is the cluster running? `make run` starts a local one on 127.0.0.1:7401,7411,7421", failed)
			}
			return nil
		},
	}
	cf.register(cmd)
	return cmd
}

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Get or set the replicated CachePolicy",
		Example: `  inference-cache policy get > policy.yaml
  inference-cache policy set policy.yaml`,
	}
	var gf clientFlags
	get := &cobra.Command{
		Use:   "get",
		Short: "Print the policy in force as a CachePolicy YAML file (or JSON)",
		Example: `  inference-cache policy get
  inference-cache policy get --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := gf.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), gf.timeout)
			defer cancel()
			var p *pb.CachePolicy
			err = c.Do(ctx, func(ctx context.Context, _ string, ic pb.InferenceCacheClient, _ pb.ClusterClient) error {
				p, err = ic.GetCachePolicy(ctx, &pb.GetCachePolicyRequest{})
				return err
			})
			if err != nil {
				return err
			}
			if gf.json {
				return printJSON(cmd.OutOrStdout(), p)
			}
			return writePolicyYAML(cmd.OutOrStdout(), p)
		},
	}
	gf.register(get)
	var sf clientFlags
	var force bool
	set := &cobra.Command{
		Use:   "set FILE",
		Short: "Replace the policy with a CachePolicy YAML file (through the Raft log)",
		Long: `Loads FILE (kind: CachePolicy, spec: with the camelCase knobs of SPEC 7;
absent knobs take their defaults), validates it locally (errors name the file,
line, field and reason) and commits it. Prints the policy now in force with
its new version.

A file written by "policy get" starts with "# version N": when the cluster's
policy has moved past N since, the file would silently undo those changes, so
it is refused unless --force. A file whose knobs equal the policy in force is
reported as unchanged and commits nothing (the version stays).`,
		Example: `  inference-cache policy set policy.yaml
  inference-cache policy set policy.yaml --addr 127.0.0.1:7411 --json
  inference-cache policy set old-policy.yaml --force`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("policy set: %w", pathErr(args[0], err))
			}
			p, err := policy.Parse(args[0], data)
			if err != nil {
				return err
			}
			c, err := sf.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), sf.timeout)
			defer cancel()
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
				return fmt.Errorf("policy set: %s was written from policy version %d, and the cluster's policy is now version %d: setting it would undo the changes made since; read the current one with `policy get`, or pass --force", args[0], base, cur.Version)
			}
			if sameKnobs(cur, want) {
				if sf.json {
					return printJSON(cmd.OutOrStdout(), cur)
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "policy unchanged: %s equals the policy in force (version %d); nothing committed\n", args[0], cur.Version)
				return err
			}
			err = c.Do(ctx, func(ctx context.Context, _ string, ic pb.InferenceCacheClient, _ pb.ClusterClient) error {
				got, err = ic.SetCachePolicy(ctx, &pb.SetCachePolicyRequest{Policy: want})
				return err
			})
			if err != nil {
				return err
			}
			if sf.json {
				return printJSON(cmd.OutOrStdout(), got)
			}
			return writePolicyYAML(cmd.OutOrStdout(), got)
		},
	}
	set.Flags().BoolVar(&force, "force", false, "set the file even when it was written from an older policy version than the cluster's")
	sf.register(set)
	cmd.AddCommand(get, set)
	return cmd
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

func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save, restore and inspect snapshot backups",
		Example: `  inference-cache snapshot save backup.snap
  inference-cache snapshot inspect backup.snap
  inference-cache snapshot restore backup.snap`,
	}
	var saveF clientFlags
	save := &cobra.Command{
		Use:     "save FILE",
		Short:   "Take a snapshot on a node and save it to FILE",
		Example: `  inference-cache snapshot save backup.snap --addr 127.0.0.1:7401`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Check the destination before the node does the work: a
			// directory or an empty name would only fail at the rename.
			if args[0] == "" {
				return errors.New("snapshot save: FILE is empty")
			}
			if fi, err := os.Stat(args[0]); err == nil && fi.IsDir() {
				return fmt.Errorf("snapshot save: %s is a directory; give a file name", args[0])
			}
			c, err := saveF.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), saveF.timeout)
			defer cancel()
			tmp := args[0] + ".partial"
			err = c.Do(ctx, func(ctx context.Context, _ string, _ pb.InferenceCacheClient, cl pb.ClusterClient) error {
				st, err := cl.Backup(ctx, &pb.BackupRequest{})
				if err != nil {
					return err
				}
				f, err := os.Create(tmp)
				if err != nil {
					return err
				}
				defer f.Close()
				for {
					ch, err := st.Recv()
					if err == io.EOF {
						return f.Sync()
					}
					if err != nil {
						return err
					}
					if _, err := f.Write(ch.Data); err != nil {
						return err
					}
				}
			})
			if err != nil {
				os.Remove(tmp)
				return fmt.Errorf("snapshot save: %w", err)
			}
			meta, err := snapshot.InspectFile(tmp)
			if err != nil {
				os.Remove(tmp)
				return fmt.Errorf("snapshot save: the received file does not verify: %w", err)
			}
			if err := os.Rename(tmp, args[0]); err != nil {
				os.Remove(tmp)
				return fmt.Errorf("snapshot save: %w", err)
			}
			if saveF.json {
				return printMeta(cmd.OutOrStdout(), args[0], meta, true)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d bytes, applied index %d (term %d), %d residencies of %d replicas, policy version %d, digest %016x (verified)\n",
				filepath.Clean(args[0]), meta.StreamBytes, meta.AppliedIndex, meta.AppliedTerm, meta.Sizes.Residencies, meta.Sizes.Replicas, meta.Policy.Version, meta.Digest)
			return err
		},
	}
	saveF.register(save)
	var restF clientFlags
	var restYes bool
	restore := &cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the whole cluster's state with a saved snapshot",
		Long: `Verifies FILE locally, uploads it to a node, which forwards it to the leader;
the leader installs it through Raft so every node ends with the same state.
Both the index and the CachePolicy are replaced by the snapshot's: everything
written after the snapshot was taken is lost, and a policy set since is rolled
back. Asks for confirmation on a terminal; elsewhere --yes is required.`,
		Example: `  inference-cache snapshot restore backup.snap --addr 127.0.0.1:7401
  inference-cache snapshot restore backup.snap --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			meta, err := snapshot.InspectFile(args[0])
			if err != nil {
				return fmt.Errorf("snapshot restore: %w", pathErr(args[0], err))
			}
			what := fmt.Sprintf("replaces the whole cluster's index and policy with %s (applied index %d, policy version %d, taken %s): writes made since and policy changes since are lost",
				filepath.Clean(args[0]), meta.AppliedIndex, meta.Policy.Version, meta.CreatedAt.UTC().Format(time.RFC3339))
			if !restYes {
				if !isTerminalReader(cmd.InOrStdin()) {
					return fmt.Errorf("snapshot restore %s; pass --yes to confirm (standard input is not a terminal to ask on)", what)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "snapshot restore %s.\nRestore? [y/N] ", what)
				line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
					return errors.New("snapshot restore: not confirmed; nothing changed")
				}
			}
			c, err := restF.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), restF.timeout)
			defer cancel()
			var resp *pb.RestoreResponse
			err = c.Do(ctx, func(ctx context.Context, _ string, _ pb.InferenceCacheClient, cl pb.ClusterClient) error {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				st, err := cl.Restore(ctx)
				if err != nil {
					return err
				}
				buf := make([]byte, api.BackupChunkBytes)
				for {
					n, rerr := f.Read(buf)
					if n > 0 {
						if err := st.Send(&pb.RestoreChunk{Data: buf[:n]}); err != nil {
							break // CloseAndRecv reports why
						}
					}
					if rerr == io.EOF {
						break
					}
					if rerr != nil {
						return rerr
					}
				}
				resp, err = st.CloseAndRecv()
				return err
			})
			if err != nil {
				return fmt.Errorf("snapshot restore: %w", err)
			}
			if restF.json {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "restored the cluster from %s (snapshot of index %d); restore committed at index %d\n", args[0], resp.RestoredFromIndex, resp.AppliedIndex)
			return err
		},
	}
	restF.register(restore)
	restore.Flags().BoolVar(&restYes, "yes", false, "confirm replacing the cluster's index and policy without asking")
	var inspJSON bool
	inspect := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Verify a snapshot file and print its metadata (offline)",
		Example: `  inference-cache snapshot inspect backup.snap
  inference-cache snapshot inspect data/raft/snapshots/2-123-456/state.bin --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			meta, err := snapshot.InspectFile(args[0])
			if err != nil {
				return fmt.Errorf("snapshot inspect: %w", pathErr(args[0], err))
			}
			return printMeta(cmd.OutOrStdout(), args[0], meta, inspJSON)
		},
	}
	inspect.Flags().BoolVar(&inspJSON, "json", false, "print JSON instead of a table")
	cmd.AddCommand(save, restore, inspect)
	return cmd
}

// snapshotInfo is the JSON form of snapshot metadata.
type snapshotInfo struct {
	File          string `json:"file"`
	FormatVersion uint32 `json:"format_version"`
	AppliedIndex  uint64 `json:"applied_index"`
	AppliedTerm   uint64 `json:"applied_term"`
	CreatedAt     string `json:"created_at"`
	Digest        string `json:"digest"`
	Checksum      string `json:"checksum"`
	Bytes         int64  `json:"bytes"`
	Partitions    int    `json:"partitions"`
	Blocks        int    `json:"blocks"`
	Residencies   int    `json:"residencies"`
	Replicas      int    `json:"replicas"`
	PolicyVersion uint64 `json:"policy_version"`
}

func printMeta(w io.Writer, file string, m snapshot.Meta, asJSON bool) error {
	info := snapshotInfo{File: filepath.Clean(file), FormatVersion: m.FormatVersion, AppliedIndex: m.AppliedIndex, AppliedTerm: m.AppliedTerm,
		CreatedAt: m.CreatedAt.UTC().Format(time.RFC3339), Digest: fmt.Sprintf("%016x", m.Digest), Checksum: fmt.Sprintf("%016x", m.Checksum),
		Bytes: m.StreamBytes, Partitions: m.Sizes.Partitions, Blocks: m.Sizes.Blocks, Residencies: m.Sizes.Residencies,
		Replicas: m.Sizes.Replicas, PolicyVersion: m.Policy.Version}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	tw := table(w)
	fmt.Fprintf(tw, "file\t%s\nformat version\t%d\napplied index\t%d (term %d)\ncreated at\t%s\ndigest\t%s\nchecksum\t%s (verified)\nbytes\t%d\n",
		info.File, info.FormatVersion, info.AppliedIndex, info.AppliedTerm, info.CreatedAt, info.Digest, info.Checksum, info.Bytes)
	fmt.Fprintf(tw, "partitions\t%d\nblocks\t%d\nresidencies\t%d\nreplicas\t%d\npolicy version\t%d\n", info.Partitions, info.Blocks, info.Residencies, info.Replicas, info.PolicyVersion)
	return tw.Flush()
}

// printable returns s as is when every rune is printable, else quoted
// with escapes: ids come from the engines, and a control character (a
// terminal escape, a NUL) must not reach the operator's terminal raw.
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// warnEmptyPartition says on stderr what an empty --model or --tenant
// means, since the answer alone looks plausible either way: blocks are
// partitioned by model and tenant (SPEC 4), so an empty one matches only
// what was stored under the empty value.
func warnEmptyPartition(w io.Writer, model, tenant string) {
	if model == "" {
		fmt.Fprintln(w, "warning: --model is empty: only blocks stored with an empty model_id can match (most engines report one; pass --model)")
	}
	if tenant == "" {
		fmt.Fprintln(w, "warning: --tenant is empty: only blocks stored under the empty tenant can match; a fallback hint may name a replica that holds the prefix under another tenant")
	}
}
