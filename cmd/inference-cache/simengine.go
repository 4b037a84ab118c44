package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inference-cache/inference-cache/engine"
	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/internal/vllmpub"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/prompt"
	"github.com/inference-cache/inference-cache/simengine"
)

type simEngineOptions struct {
	listen, replicaID, model, modelsDir string
	prefillTPS, decodeTPS               float64
	kvBlocks, blockSize                 int
	eventsBind, eventsConnect, topic    string
	replayBind, encoding                string
	logFormat, logLevel                 string
	serving                             simEngineServing
}

// maxReplicaIDBytes bounds --replica-id (the subscriber's replica_id
// bound, so the id can be copied into its config).
const maxReplicaIDBytes = 200

// newSimEngineCmd is `inference-cache sim-engine`: a simulated vLLM
// replica in real time (package simengine).
func newSimEngineCmd() *cobra.Command {
	o := &simEngineOptions{}
	cmd := &cobra.Command{
		Use:   "sim-engine",
		Short: "Run a simulated vLLM replica: the OpenAI API, a KV cache, KV events and /metrics",
		Long: `Serves vLLM's OpenAI-compatible API (/v1/completions and /v1/chat/completions,
streamed or not, /v1/models, /health, /metrics with vLLM's metric names) in
front of a simulated engine on the benchmark's engine model, in real time:
one prefill at a time, first come first served, taking uncached prompt tokens
/ --prefill-tps (prefix blocks already in its KV cache are skipped, whole
blocks of --block-size tokens); every running request then decodes at
--decode-tps tokens/s at once (continuous batching); --kv-blocks is the KV
capacity, shared by cached prefixes and running requests, evicted least
recently used. Output is max_tokens (default 16) filler tokens; usage reports
prompt_tokens and prompt_tokens_details.cached_tokens as vLLM does.

With --kv-events-bind (or --kv-events-connect) it publishes vLLM-format KV
events over ZMQ (BlockStored with the token ids it prefilled, BlockRemoved on
eviction), so "inference-cache subscribe" indexes it as it would a vLLM.

Prompts become token ids as vLLM makes them (package prompt, the same code
the proxy keys requests with): a chat request is rendered with the model's chat
template (<models-dir>/<model>/chat_template.jinja or tokenizer_config.json)
and tokenized with <models-dir>/<model>/tokenizer.json without added special
tokens; a completion's prompt string is tokenized with them; token-id prompts
are used as they are. Requests with image, audio or video parts are refused.

With --enable-lora and --lora-modules NAME=PATH (vLLM's flags) each adapter is
a model name of its own: /v1/models lists it with parent = --model, its
prompts use --model's tokenizer and template, its blocks hash apart from the
base model's and carry lora_id and lora_name in the KV events; --max-loras
bounds the distinct adapters in a batch (a request of one more waits), an
adapter not loaded costs --lora-load-time, and vllm:lora_requests_info names
the running and waiting adapters.

With --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
it plays either part of disaggregated prefill/decode, per request, as vLLM's
NixlConnector: a request with kv_transfer_params {"do_remote_decode": true} is
prefilled and answered with kv_transfer_params for the decode replica; a
request with the answer's kv_transfer_params (do_remote_prefill) pulls its
uncached blocks at --kv-transfer-time-per-block each instead of prefilling.`,
		Example: `  # a fourth engine beside make run's sim-1..3 (its model files in .dev-cluster/models):
  inference-cache sim-engine --model qwen3 --models-dir .dev-cluster/models --listen 127.0.0.1:8001 \
      --replica-id sim-4 --kv-blocks 4096 --kv-events-bind tcp://127.0.0.1:5557
  # subscriber entry for it:
  #   - endpoint: tcp://127.0.0.1:5557
  #     replica_id: sim-4
  #     model_id: qwen3
  #     hash_scheme: vllm
  #     block_size: 16
  #     metrics_url: http://127.0.0.1:8001/metrics
  # a chat request to make run's sim-1:
  curl -s localhost:7431/v1/chat/completions -d '{"model": "qwen3", "messages": [{"role": "user", "content": "hi"}]}'`,
		Args: cobra.NoArgs,
		RunE: untilSignal(func(ctx context.Context, cmd *cobra.Command) error {
			return runSimEngine(ctx, o, cmd.ErrOrStderr())
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:8000", "HOST:PORT of the OpenAI-compatible HTTP API (port 0 = any free port, logged at start)")
	f.StringVar(&o.replicaID, "replica-id", "", "the replica's name in logs (required; the subscriber's replica_id for it)")
	f.StringVar(&o.model, "model", "", "the model name served (required); its tokenizer is <models-dir>/<model>/tokenizer.json")
	f.StringVar(&o.modelsDir, "models-dir", "", "directory of <model>/tokenizer.json and its chat template (required)")
	f.Float64Var(&o.prefillTPS, "prefill-tps", engine.DefaultPrefillTPS, "prefill speed, uncached prompt tokens per second (one prefill at a time)")
	f.Float64Var(&o.decodeTPS, "decode-tps", engine.DefaultDecodeTPS, "decode speed of each running request, output tokens per second")
	f.IntVar(&o.kvBlocks, "kv-blocks", 8192, "KV cache capacity in blocks of --block-size tokens, shared by cached prefixes and running requests")
	f.IntVar(&o.blockSize, "block-size", fingerprint.DefaultBlockSize, "tokens per KV block (vLLM's default 16); the subscriber's block_size must match")
	f.StringVar(&o.eventsBind, "kv-events-bind", "", "publish KV events on a ZMQ PUB socket bound here, tcp://HOST:PORT (\"*\" = every interface); empty = no events")
	f.StringVar(&o.eventsConnect, "kv-events-connect", "", "publish KV events on a ZMQ PUB socket connecting to a subscriber's listen socket, tcp://HOST:PORT")
	f.StringVar(&o.replayBind, "kv-events-replay-bind", "", "serve vLLM's replay ROUTER socket here, tcp://HOST:PORT (optional; the subscriber's replay_endpoint)")
	f.StringVar(&o.topic, "kv-events-topic", "", "topic frame of every KV-event message (vLLM's kv_events_config topic)")
	f.StringVar(&o.encoding, "kv-events-encoding", string(vllmpub.EncodingPositional), "msgpack form of the event batches: positional (vLLM's msgspec) or map")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.logLevel, "log-level", "info", "least log level: debug, info, warn or error")
	o.serving.register(f)
	markPaths(f, "models-dir")
	return cmd
}

// checkZMQEndpoint checks a tcp://HOST:PORT flag value.
func checkZMQEndpoint(flag, ep string) error {
	hostPort, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return fmt.Errorf("--%s %q: want tcp://HOST:PORT", flag, ep)
	}
	if _, port, err := net.SplitHostPort(hostPort); err != nil || port == "" {
		return fmt.Errorf("--%s %q: want tcp://HOST:PORT", flag, ep)
	}
	return nil
}

// check validates the flags, each error naming its flag and the limit.
func (o *simEngineOptions) check() error {
	switch {
	case o.replicaID == "":
		return errors.New("--replica-id: required (the replica's name, as the subscriber's replica_id)")
	case len(o.replicaID) > maxReplicaIDBytes:
		return fmt.Errorf("--replica-id: %d bytes, over the limit of %d", len(o.replicaID), maxReplicaIDBytes)
	case o.model == "":
		return errors.New("--model: required (the model name served)")
	case o.modelsDir == "":
		return errors.New("--models-dir: required (the directory of <model>/tokenizer.json)")
	case !(o.prefillTPS > 0):
		return fmt.Errorf("--prefill-tps %v: must be a positive number of tokens per second", o.prefillTPS)
	case !(o.decodeTPS > 0):
		return fmt.Errorf("--decode-tps %v: must be a positive number of tokens per second", o.decodeTPS)
	case o.blockSize < 1 || o.blockSize > fingerprint.MaxBlockSize:
		return fmt.Errorf("--block-size %d: want 1 to %d", o.blockSize, fingerprint.MaxBlockSize)
	case o.kvBlocks < 1:
		return fmt.Errorf("--kv-blocks %d: need at least 1", o.kvBlocks)
	case o.eventsBind != "" && o.eventsConnect != "":
		return errors.New("--kv-events-bind and --kv-events-connect: set one, not both")
	case o.replayBind != "" && o.eventsBind == "" && o.eventsConnect == "":
		return errors.New("--kv-events-replay-bind: needs --kv-events-bind or --kv-events-connect")
	case o.encoding != string(vllmpub.EncodingPositional) && o.encoding != string(vllmpub.EncodingMap):
		return fmt.Errorf("--kv-events-encoding %q: want positional or map", o.encoding)
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT", o.listen)
	}
	for _, fe := range [][2]string{{"kv-events-bind", o.eventsBind}, {"kv-events-connect", o.eventsConnect}, {"kv-events-replay-bind", o.replayBind}} {
		if fe[1] != "" {
			if err := checkZMQEndpoint(fe[0], fe[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

func runSimEngine(ctx context.Context, o *simEngineOptions, errw io.Writer) error {
	log, err := newLogger(errw, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	cfg := simengine.Config{Model: o.model, BlockSize: o.blockSize, KVBlocks: o.kvBlocks, PrefillTPS: o.prefillTPS, DecodeTPS: o.decodeTPS,
		EventEncoding: vllmpub.Encoding(o.encoding), Logger: log}
	if err := o.serving.apply(&cfg, o.replicaID, o.listen); err != nil {
		return err
	}
	var pub *vllmpub.Publisher
	if o.eventsBind != "" || o.eventsConnect != "" {
		pub, err = vllmpub.New(vllmpub.Options{Bind: o.eventsBind, Connect: o.eventsConnect, Topic: o.topic, Replay: o.replayBind != "", ReplayBind: o.replayBind})
		if err != nil {
			return fmt.Errorf("--kv-events-bind/--kv-events-connect: %w", err)
		}
		defer pub.Close()
		cfg.Events = pub
	}
	eng, err := simengine.New(cfg)
	if err != nil {
		return err
	}
	defer eng.Close()
	prompts := prompt.New(o.modelsDir, prompt.Options{MaxTokens: eng.MaxModelLen() + 1})
	if err := prompts.Preload(ctx, o.model); err != nil {
		return fmt.Errorf("--model %q with --models-dir %q: %w", o.model, o.modelsDir, err)
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.listen, err)
	}
	srv := &http.Server{Handler: simengine.NewServer(eng, enginePrompter{prompts}, simengine.ServerOptions{Logger: log}),
		ReadHeaderTimeout: 10 * time.Second}
	attrs := []any{"replica", o.replicaID, "model", o.model, "http", "http://" + lis.Addr().String(),
		"kv_blocks", o.kvBlocks, "block_size", o.blockSize, "prefill_tps", o.prefillTPS, "decode_tps", o.decodeTPS}
	if pub != nil {
		attrs = append(attrs, "kv_events", pub.Endpoint(), "replay", pub.ReplayEndpoint(), "topic", o.topic)
	}
	log.Info("sim engine serving", attrs...)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return fmt.Errorf("--listen %s: %w", o.listen, err)
	case <-ctx.Done():
	}
	log.Info("sim engine stopping", "replica", o.replicaID)
	eng.Close() // ends the streams in flight, so Shutdown does not wait for their decodes
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	return nil
}

// enginePrompter is the engine's Prompter: the prefill of package prompt,
// which the proxy keys requests with, so that the engine prefills (and
// announces in its KV events) exactly the ids the proxy looked up.
type enginePrompter struct{ reg *prompt.Registry }

func (p enginePrompter) PromptTokens(ctx context.Context, _ string, req *openai.Request) ([]uint32, error) {
	pr, err := p.reg.Tokens(ctx, req)
	if err != nil {
		return nil, err
	}
	if pr.NoKey != nil {
		return nil, openai.Errorf("messages", "image, audio and video content is not supported by this engine")
	}
	if pr.Partial { // the ids stop before a word no real prompt has
		field := "prompt"
		if req.Kind == openai.KindChat {
			field = "messages"
		}
		return nil, openai.Errorf(field, "holds a word longer than %d bytes, which this engine does not tokenize", prompt.DefaultMaxWordBytes)
	}
	return pr.TokenIDs, nil
}
