package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/prompt"
)

// renderOutput is what `inference-cache render` prints. Hashes are
// decimal strings, as the fingerprint command prints them (JSON numbers
// lose precision above 2^53).
type renderOutput struct {
	Model       string   `json:"model"`
	Prompt      *string  `json:"prompt"`
	TokenIDs    []uint32 `json:"token_ids"`
	BlockSize   int      `json:"block_size"`
	BlockHashes []string `json:"block_hashes"`
	CacheSalt   string   `json:"cache_salt,omitempty"`
}

// maxRenderInput bounds the request read from stdin (the proxy's default
// body limit).
const maxRenderInput = 32 << 20

func newRenderCmd() *cobra.Command {
	var modelsDir, model, now string
	var blockSize int
	var idsOnly bool
	cmd := &cobra.Command{
		Use:   "render --models-dir DIR --model NAME [--now TIME] [--block-size N]",
		Short: "Print the prompt, token ids and block hashes an engine prefills for an OpenAI request",
		Long: `Reads one OpenAI request body (JSON) on standard input: a /v1/chat/completions
request (with "messages") or a /v1/completions request (with "prompt"). Prints
what a vLLM engine serving --model from --models-dir prefills for it, computed
exactly as the proxy keys it: the prompt text (the chat template rendered, or
the completion's prompt string; null for a token-id prompt), its token ids (chat
prompts without added special tokens, completion strings with them) and the
content fingerprint's block hashes at --block-size (in the hash domain of the
request's cache_salt, when it has one).

Put the output beside what the engine logged (its prompt, or the token ids of
its KV events) to see why a prefix does not match. --ids-only prints the token
ids alone, comma-separated, as "lookup --tokens" takes them: the cluster then
answers the key the proxy looked up. The request's own "model"
is ignored: the files are --model's. strftime_now in a template formats --now.

Bad input exits non-zero with a message naming the field as written.`,
		Example: `  # make run unpacks qwen3's tokenizer and chat template into .dev-cluster/models:
  echo '{"messages": [{"role": "user", "content": "What is 2+2?"}]}' |
    inference-cache render --models-dir .dev-cluster/models --model qwen3
  inference-cache render --models-dir .dev-cluster/models --model qwen3 --now 2026-01-15T10:00:00Z < .dev-cluster/chat-1.json
  inference-cache lookup --model qwen3 --tokens "$(inference-cache render --models-dir .dev-cluster/models --model qwen3 --ids-only < .dev-cluster/chat-2.json)"
  echo '{"prompt": "Hello world"}' | inference-cache render --models-dir ./models --model mistral   # your own models`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case modelsDir == "":
				return errors.New("--models-dir: required (the directory of <model>/tokenizer.json and its chat template)")
			case model == "":
				return errors.New("--model: required (the model whose tokenizer and chat template render the request)")
			case blockSize < 1 || blockSize > fingerprint.MaxBlockSize:
				return fmt.Errorf("--block-size %d: must be between 1 and %d", blockSize, fingerprint.MaxBlockSize)
			}
			clock := time.Now()
			if now != "" {
				t, err := time.Parse(time.RFC3339, now)
				if err != nil {
					return fmt.Errorf("--now %q: want an RFC 3339 time such as 2026-01-15T10:00:00Z", now)
				}
				clock = t
			}
			body, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxRenderInput+1))
			if err != nil {
				return fmt.Errorf("stdin: %w", err)
			}
			if len(body) > maxRenderInput {
				return fmt.Errorf("stdin: over the limit of %d bytes", maxRenderInput)
			}
			out, err := render(cmd.Context(), modelsDir, model, clock, blockSize, body)
			if err != nil {
				return err
			}
			if idsOnly {
				ids := make([]string, len(out.TokenIDs))
				for i, id := range out.TokenIDs {
					ids[i] = strconv.FormatUint(uint64(id), 10)
				}
				_, err := fmt.Fprintln(cmd.OutOrStdout(), strings.Join(ids, ","))
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false) // templates are full of <|special|> tokens
			return enc.Encode(out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&modelsDir, "models-dir", "", "directory of <model>/tokenizer.json and its chat template (required)")
	f.StringVar(&model, "model", "", "the model whose files render the request (required)")
	f.StringVar(&now, "now", "", "the time strftime_now formats, RFC 3339 (default: the current time)")
	f.IntVar(&blockSize, "block-size", 16, "tokens per block of the block hashes (the engine's --block-size)")
	f.BoolVar(&idsOnly, "ids-only", false, "print only the token ids, comma-separated on one line: the value of lookup --tokens")
	markPaths(f, "models-dir")
	return cmd
}

// render computes the output for one request body.
func render(ctx context.Context, modelsDir, model string, now time.Time, blockSize int, body []byte) (*renderOutput, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimSpace(body), &fields); err != nil {
		return nil, fmt.Errorf("stdin: want one JSON request object: %v", err)
	}
	_, chat := fields["messages"]
	_, completion := fields["prompt"]
	var kind openai.Kind
	switch {
	case chat && completion:
		return nil, errors.New(`stdin: a request has "messages" (chat) or "prompt" (completion), not both`)
	case chat:
		kind = openai.KindChat
	case completion:
		kind = openai.KindCompletion
	default:
		return nil, errors.New(`stdin: "messages" (a chat request) or "prompt" (a completion request) is required`)
	}
	name, _ := json.Marshal(model)
	fields["model"] = name
	body, _ = json.Marshal(fields) // every value is valid JSON: it decoded
	req, err := openai.Decode(kind, body)
	if err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	reg := prompt.New(modelsDir, prompt.Options{Now: func() time.Time { return now }})
	p, err := reg.Tokens(ctx, req)
	var oe *openai.Error
	switch {
	case errors.As(err, &oe):
		return nil, fmt.Errorf("stdin: %w", oe)
	case errors.Is(err, prompt.ErrUnknownModel):
		return nil, fmt.Errorf("--model %q: no %s/%s/tokenizer.json: %w", model, modelsDir, model, err)
	case err != nil:
		return nil, fmt.Errorf("--model %q in --models-dir %q: %w", model, modelsDir, err)
	case p.NoKey != nil:
		return nil, errors.New("stdin: messages: the request has image, audio or video content, which has no key (a gateway routes it by load)")
	}
	hs, err := fingerprint.AppendSaltedBlockHashes(nil, p.TokenIDs, blockSize, p.CacheSalt)
	if err != nil {
		return nil, err
	}
	out := &renderOutput{Model: model, TokenIDs: p.TokenIDs, BlockSize: blockSize, BlockHashes: make([]string, len(hs)), CacheSalt: p.CacheSalt}
	if !p.TokenPrompt {
		out.Prompt = &p.Text
	}
	if out.TokenIDs == nil {
		out.TokenIDs = []uint32{}
	}
	for i, h := range hs {
		out.BlockHashes[i] = strconv.FormatUint(h, 10)
	}
	return out, nil
}
