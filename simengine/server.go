package simengine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inference-cache/inference-cache/openai"
)

// Prompter turns a request into the token ids the engine prefills: a
// completion prompt tokenized (token-id prompts as they are), a chat
// request rendered with the model's chat template and tokenized. Errors
// meant for the client are *openai.Error (a template that raises, text
// that is not UTF-8); any other error is the server's fault (500).
type Prompter interface {
	PromptTokens(ctx context.Context, model string, req *openai.Request) ([]uint32, error)
}

// DefaultMaxBodyBytes bounds a request body (the proxy's default too).
const DefaultMaxBodyBytes = 32 << 20

// fillerToken is the text of every generated token.
const fillerToken = " tok"

// ServerOptions tune NewServer; the zero value means the defaults.
type ServerOptions struct {
	// MaxBodyBytes bounds a request body (0 = DefaultMaxBodyBytes); a
	// larger one gets a 413.
	MaxBodyBytes int64
	// Metrics serves /metrics; nil = the engine's own registry.
	Metrics http.Handler
	// Logger is the structured logger; nil = slog.Default().
	Logger *slog.Logger
}

// Server is the engine's OpenAI-compatible HTTP API, as vLLM serves it:
// POST /v1/completions and /v1/chat/completions (streamed or not), GET
// /v1/models, /health and /metrics.
type Server struct {
	e       *Engine
	p       Prompter
	opts    ServerOptions
	mux     *http.ServeMux
	created int64
}

// NewServer serves e, tokenizing prompts with p.
func NewServer(e *Engine, p Prompter, opts ServerOptions) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil && e.Gatherer() != nil {
		opts.Metrics = promhttp.HandlerFor(e.Gatherer(), promhttp.HandlerOpts{})
	}
	s := &Server{e: e, p: p, opts: opts, mux: http.NewServeMux(), created: e.cfg.Clock.Now().Unix()}
	s.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, openai.KindCompletion) })
	s.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, openai.KindChat) })
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	if opts.Metrics != nil {
		s.mux.Handle("GET /metrics", opts.Metrics)
	}
	return s
}

// ServeHTTP implements http.Handler; a panic in a handler becomes a 500
// error body (when nothing was written yet) instead of reaching the
// client as a dropped connection.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.opts.Logger.Error("handler panic", "path", r.URL.Path, "panic", fmt.Sprint(v))
			openai.WriteError(w, fmt.Errorf("internal error"))
		}
	}()
	s.mux.ServeHTTP(w, r)
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	m := s.e.Model()
	list := openai.ModelList{Object: openai.ObjectList, Data: []openai.ModelCard{{
		ID: m, Object: openai.ObjectModel, Created: s.created, OwnedBy: "vllm", Root: m,
		MaxModelLen: s.e.MaxModelLen(), Permission: []openai.ModelPermission{openai.NewModelPermission("modelperm-"+randomID(), s.created)},
	}}}
	list.Data = append(list.Data, s.adapterCards()...)
	writeJSON(w, list)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// randomID is 32 hex digits, as vLLM's random_uuid.
func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// generate serves one completion or chat request.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, kind openai.Kind) {
	req, err := s.readRequest(w, r, kind)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	adapter, err := s.checkRequest(req, kind)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	prefillOnly, remote, err := s.transferParams(req)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	ctx := r.Context()
	promptField := "prompt"
	if kind == openai.KindChat {
		promptField = "messages"
	}
	tokens, err := s.promptTokens(ctx, req, adapter, promptField)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	maxTokens := req.MaxTokensOr(openai.DefaultCompletionMaxTokens)
	h, err := s.e.SubmitJob(ctx, Job{Prompt: tokens, MaxTokens: maxTokens, Salt: req.CacheSalt, Adapter: adapter, RemotePrefill: remote})
	if err != nil {
		s.submitError(w, err, promptField, len(tokens), maxTokens)
		return
	}
	id := r.Header.Get("X-Request-Id")
	if id == "" || len(id) > 128 {
		id = randomID()
	}
	rs := &response{s: s, w: w, h: h, req: req, created: s.e.cfg.Clock.Now().Unix(), promptTokens: len(tokens)}
	if prefillOnly {
		rs.kvParams = s.prefillAnswer(len(tokens))
	}
	if kind == openai.KindChat {
		rs.id = "chatcmpl-" + id
	} else {
		rs.id = "cmpl-" + id
	}
	if req.Stream {
		rs.stream(ctx)
	} else {
		rs.full(ctx)
	}
}

// readRequest reads the body within MaxBodyBytes and decodes it as kind.
// Errors are OpenAI errors to write as they are: 413 for a body over the
// limit, 400 naming the field for a body that does not decode.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, kind openai.Kind) (*openai.Request, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &openai.Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body over the limit of %d bytes", tooBig.Limit)}
		}
		return nil, openai.Errorf("", "reading the request body: %v", err)
	}
	return openai.Decode(kind, body)
}

// checkRequest refuses what this engine does not serve, as vLLM answers
// it: an unknown model (404, or an adapter without LoRA enabled), n > 1,
// a batch of completion prompts. It returns the adapter the request
// names ("" for the base model).
func (s *Server) checkRequest(req *openai.Request, kind openai.Kind) (string, error) {
	adapter := ""
	if req.Model != s.e.Model() {
		if _, ok := s.e.adapterID(req.Model); !ok || s.e.lora == nil {
			return "", &openai.Error{Status: http.StatusNotFound, Param: "model", Message: fmt.Sprintf("The model `%s` does not exist.", openai.Clip(req.Model))}
		}
		adapter = req.Model
	}
	if req.N != 1 {
		return "", openai.Errorf("n", "%d choices requested: this engine serves only n = 1", req.N)
	}
	if kind == openai.KindCompletion && req.Prompt.Len() != 1 {
		return "", openai.Errorf("prompt", "a batch of %d prompts: this engine serves one prompt per request", req.Prompt.Len())
	}
	return adapter, nil
}

// promptTokens is the prompt the engine prefills: req's, rendered and
// tokenized as the base model's when it names an adapter. An empty prompt
// is refused naming promptField.
func (s *Server) promptTokens(ctx context.Context, req *openai.Request, adapter, promptField string) ([]uint32, error) {
	base := req
	if adapter != "" {
		// An adapter's prompt is the base model's: its tokenizer and
		// chat template.
		b := *req
		b.Model = s.e.Model()
		base = &b
	}
	tokens, err := s.p.PromptTokens(ctx, base.Model, base)
	if err != nil {
		var oe *openai.Error
		if !errors.As(err, &oe) {
			s.opts.Logger.Error("prompt not tokenized", "model", req.Model, "err", err)
		}
		return nil, err
	}
	if len(tokens) == 0 {
		return nil, openai.Errorf(promptField, "the prompt is empty (0 tokens)")
	}
	return tokens, nil
}

// submitError answers a request the engine refused, in vLLM's words for
// a context overflow.
func (s *Server) submitError(w http.ResponseWriter, err error, promptField string, prompt, maxTokens int) {
	switch {
	case errors.Is(err, ErrTooLong):
		field := "max_tokens"
		if prompt >= s.e.MaxModelLen() {
			field = promptField
		}
		detail := fmt.Sprintf("%d in the messages, %d in the completion). Please reduce the length of the messages or completion.", prompt, maxTokens)
		if promptField == "prompt" {
			detail = fmt.Sprintf("%d in your prompt; %d for the completion). Please reduce the length of your prompt or completion.", prompt, maxTokens)
		}
		openai.WriteError(w, openai.Errorf(field, "This model's maximum context length is %d tokens (%d KV blocks of %d). However, you requested %d tokens (%s",
			s.e.MaxModelLen(), s.e.cfg.KVBlocks, s.e.cfg.BlockSize, prompt+maxTokens, detail))
	case errors.Is(err, ErrClosed):
		openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Message: "the engine is shutting down"})
	default:
		openai.WriteError(w, err)
	}
}
