package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/inference-cache/inference-cache/api"
	pb "github.com/inference-cache/inference-cache/api/inferencecache/v1"
	"github.com/inference-cache/inference-cache/client"
	"github.com/inference-cache/inference-cache/fingerprint"
)

// lookupOptions are the flags of `inference-cache lookup`.
type lookupOptions struct {
	cf                                 clientFlags
	req                                pb.LookupRouteRequest
	tokens, hashes, prompt, promptFile string
	blockSize                          int
	prefix                             uint64
	ttft                               uint32
	explain                            bool
}

func newLookupCmd() *cobra.Command {
	o := &lookupOptions{}
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
the factors behind each score (contract §5.4): for PREFIX_MATCH the score is matched
tokens × freshness × pressure factor × SLO bias × distinguishing power
(ranking v1: matched tokens × freshness, the rest shown as 1); a TENANT_HOT
hint scores its tenant hit rate, an AFFINITY_HINT is the rendezvous-hashing
pick. With --json the explanation is each hint's "factors" object.

SOURCE says where a hint's match comes from (contract §5.12): "confirmed"
from the index the engines' KV events feed, "provisional" from a gateway's
pick that the engine's events have not confirmed yet (a sibling request of
the same instant goes where the first one went); its score is the matched
tokens and it has no factors.`,
		Example: `  inference-cache lookup --model qwen3-8b --tenant team-a --tokens "$(seq -s, 0 127)"
  inference-cache lookup --model qwen3-8b --tenant team-a --tokens "$(seq -s, 0 127)" --explain
  inference-cache lookup --model qwen3-8b --prompt "You are a helpful assistant." --json
  inference-cache lookup --addr 127.0.0.1:7411 --model m --block-hashes 123,456
  inference-cache lookup --model qwen3-8b --prompt-file conversation.txt
  inference-cache lookup --model qwen3-8b --cache-salt "$TENANT_SALT" --tokens "$(seq -s, 0 127)"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			warnEmptyPartition(cmd.ErrOrStderr(), o.req.ModelId, o.req.TenantId)
			if err := o.buildRequest(cmd); err != nil {
				return err
			}
			return o.run(cmd)
		},
	}
	o.cf.register(cmd, addrLookup)
	o.register(cmd)
	return cmd
}

// register adds lookup's own flags.
func (o *lookupOptions) register(cmd *cobra.Command) {
	req := &o.req
	f := cmd.Flags()
	f.StringVar(&req.HashScheme, "scheme", "vllm", "hash_scheme (vllm, sglang, …)")
	f.StringVar(&req.ModelId, "model", "", "model_id")
	f.StringVar(&req.TenantId, "tenant", "", "tenant_id")
	f.StringVar(&req.AdapterId, "adapter", "", "adapter_id (LoRA); empty = base model")
	f.StringVar(&req.CacheSalt, "cache-salt", "", "vLLM cache_salt of the request: --tokens, --prompt and --block-size fingerprints use its hash domain")
	f.StringVar(&o.tokens, "tokens", "", "token ids, comma- or space-separated")
	f.IntVar(&o.blockSize, "block-size", 0, "fingerprint --tokens locally with this block size (0 = let the server do it)")
	f.StringVar(&o.hashes, "block-hashes", "", "block hash chain, comma-separated decimal uint64")
	f.Uint64Var(&o.prefix, "prefix-hash", 0, "prefix hash (decimal uint64)")
	f.StringVar(&o.prompt, "prompt", "", "prompt text (the server tokenizes it)")
	f.StringVar(&o.promptFile, "prompt-file", "", "read the prompt text from this file, verbatim (- = stdin; at most 1 MiB); instead of --prompt")
	markPaths(f, "prompt-file")
	f.Uint32Var(&o.ttft, "ttft-ms", 0, "SLO time-to-first-token in ms (0 = none)")
	f.Uint32Var(&req.MaxReplicas, "max-replicas", 0, "most hints to return (0 = policy maxReplicas)")
	f.BoolVar(&o.explain, "explain", false, "show the ranking factors behind each hint's score")
}

// buildRequest checks the key flags and fills the request from them:
// the prompt (from --prompt-file when given), the token ids, the block
// hashes, the SLO, and the local fingerprint with --block-size.
func (o *lookupOptions) buildRequest(cmd *cobra.Command) error {
	req := &o.req
	if o.blockSize < 0 || o.blockSize > fingerprint.MaxBlockSize {
		return fmt.Errorf("--block-size %d: must be 0 (the server fingerprints) or between 1 and %d", o.blockSize, fingerprint.MaxBlockSize)
	}
	if cmd.Flags().Changed("prompt-file") {
		if cmd.Flags().Changed("prompt") {
			return errors.New("--prompt and --prompt-file: give the prompt one way, not both")
		}
		var err error
		if o.prompt, err = readPromptFile(cmd, o.promptFile); err != nil {
			return err
		}
	} else if len(o.prompt) > api.MaxPromptBytes {
		return fmt.Errorf("--prompt: %d bytes, over the limit of %d (api.MaxPromptBytes)", len(o.prompt), api.MaxPromptBytes)
	}
	if o.tokens != "" {
		ids, err := parseUints(o.tokens, 32)
		if err != nil {
			return fmt.Errorf("--tokens: %w", err)
		}
		for _, v := range ids {
			req.TokenIds = append(req.TokenIds, uint32(v))
		}
	}
	if o.hashes != "" {
		hs, err := parseUints(o.hashes, 64)
		if err != nil {
			return fmt.Errorf("--block-hashes: %w", err)
		}
		req.BlockHashes = hs
	}
	req.PrefixHash, req.PromptText, req.Explain = o.prefix, o.prompt, o.explain
	if o.ttft > 0 {
		req.Slo = &pb.Slo{TtftMs: o.ttft}
	}
	if o.blockSize > 0 && len(req.TokenIds) > 0 {
		if err := client.Fingerprint(req, req.TokenIds, o.blockSize); err != nil {
			return fmt.Errorf("--block-size %d: %w", o.blockSize, err)
		}
	}
	return nil
}

// run asks LookupRoute and prints the answer.
func (o *lookupOptions) run(cmd *cobra.Command) error {
	c, err := o.cf.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	resp := c.LookupRoute(cmd.Context(), &o.req)
	// The SDK fails open for gateways, with the detail "client:
	// CODE: message; failing open"; an operator asking a node must
	// hear that no node answered, and why (the CLI does not fail
	// open: it exits 1).
	if c.Stats().FailOpen > 0 {
		cause := strings.TrimSuffix(strings.TrimPrefix(resp.Detail, "client: "), "; failing open")
		addrs := strings.Join(o.cf.addrs, ", ")
		switch {
		case strings.HasPrefix(cause, "DeadlineExceeded:"):
			return fmt.Errorf("no node answered LookupRoute at %s within --timeout %v: %s", addrs, o.cf.timeout, cause)
		case strings.HasPrefix(cause, "Unavailable:"):
			return fmt.Errorf("no node answered LookupRoute at %s: %s", addrs, cause)
		}
		return fmt.Errorf("LookupRoute failed at %s: %s", addrs, cause)
	}
	if o.cf.json {
		return printJSON(cmd.OutOrStdout(), resp)
	}
	return o.print(cmd, resp)
}

// print writes the answer as a table: the reason, detail and server,
// then one row per hint (with --explain, its factors).
func (o *lookupOptions) print(cmd *cobra.Command, resp *pb.LookupRouteResponse) error {
	w := table(cmd.OutOrStdout())
	fmt.Fprintf(w, "reason\t%s\n", resp.ReasonCode)
	if resp.Detail != "" {
		fmt.Fprintf(w, "detail\t%s\n", printable(detailInFlags(resp.Detail, cmd.Flags().Changed, o.blockSize)))
	}
	fmt.Fprintf(w, "served by\t%s (applied index %d, stale %t, last leader contact %d ms)\n", resp.ServedBy, resp.AppliedIndex, resp.Stale, resp.LastLeaderContactMs)
	w.Flush()
	if len(resp.Replicas) == 0 {
		return w.Flush()
	}
	fmt.Fprintln(w)
	if o.explain {
		printExplained(w, resp)
		return w.Flush()
	}
	fmt.Fprintln(w, "REPLICA\tSCORE\tMATCHED TOKENS\tBLOCKS\tFRESHNESS\tAGE MS\tPRESSURE\tWAITING\tRUNNING\tSOURCE")
	for _, h := range resp.Replicas {
		fmt.Fprintf(w, "%s\t%.2f\t%d\t%d\t%.3f\t%d\t%.2f\t%d\t%d\t%s\n", printable(h.ReplicaId), h.Score, h.MatchedTokens, h.MatchedBlocks,
			h.Freshness, h.AgeMs, h.Pressure, h.WaitingRequests, h.RunningRequests, hintSource(h))
	}
	return w.Flush()
}

// requestFlags maps LookupRouteRequest fields, as a server's NO_HINT
// detail names them, to the lookup flags that set them.
var requestFlags = map[string]string{
	"hash_scheme": "--scheme", "model_id": "--model", "tenant_id": "--tenant", "adapter_id": "--adapter",
	"cache_salt": "--cache-salt", "token_ids": "--tokens", "block_hashes": "--block-hashes",
	"prefix_hash": "--prefix-hash", "prompt_text": "--prompt", "max_replicas": "--max-replicas",
	"ttft_ms": "--ttft-ms",
}

// requestField matches a field name of requestFlags, or
// block_token_counts, as a whole word.
var requestField = regexp.MustCompile(`\b(hash_scheme|model_id|tenant_id|adapter_id|cache_salt|token_ids|block_hashes|block_token_counts|prefix_hash|prompt_text|max_replicas|ttft_ms)\b`)

// detailInFlags is a lookup's detail with the request fields it names
// written as the flags the user typed (block_hashes is --block-hashes,
// or the blocks of --tokens fingerprinted locally with --block-size;
// prompt_text is --prompt or --prompt-file). changed reports whether a
// flag was given. The --json output keeps the server's words.
func detailInFlags(detail string, changed func(string) bool, blockSize int) string {
	return requestField.ReplaceAllStringFunc(detail, func(f string) string {
		local := blockSize > 0 && changed("tokens")
		switch {
		case (f == "block_hashes" || f == "block_token_counts") && local:
			return fmt.Sprintf("the blocks of --tokens (at --block-size %d)", blockSize)
		case f == "block_token_counts":
			return f // no flag sets it on its own
		case f == "prompt_text" && changed("prompt-file"):
			return "--prompt-file"
		}
		return requestFlags[f]
	})
}

// printExplained writes the hints of an explained lookup with the factors
// of their scores (contract §5.8); the fallbacks add what picked them: the tenant
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
			fmt.Fprintf(w, "-\t-\t-\t-\t-\t%d\t%d\t-", h.WaitingRequests, h.RunningRequests)
			if h.Provisional {
				fmt.Fprintf(w, "\tprovisional (picked %d ms ago; score = matched tokens)", h.AgeMs)
			}
			fmt.Fprintln(w)
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

// hintSource says where a hint's match comes from (contract §5.12):
// "confirmed" (the index, fed by the engines' events) or "provisional"
// (a gateway's pick the events have not confirmed yet).
func hintSource(h *pb.ReplicaHint) string {
	if h.GetProvisional() {
		return "provisional"
	}
	return "confirmed"
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

// warnEmptyPartition says on stderr what an empty --model or --tenant
// means, since the answer alone looks plausible either way: blocks are
// partitioned by model and tenant (contract §4.1), so an empty one matches only
// what was stored under the empty value.
func warnEmptyPartition(w io.Writer, model, tenant string) {
	if model == "" {
		fmt.Fprintln(w, "warning: --model is empty: only blocks stored with an empty model_id can match (most engines report one; pass --model)")
	}
	if tenant == "" {
		fmt.Fprintln(w, "warning: --tenant is empty: only blocks stored under the empty tenant can match; a fallback hint may name a replica that holds the prefix under another tenant")
	}
}
