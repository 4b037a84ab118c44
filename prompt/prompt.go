package prompt

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/inference-cache/inference-cache/chattemplate"
	"github.com/inference-cache/inference-cache/openai"
	"github.com/inference-cache/inference-cache/tokenizer"
)

// Sentinel errors. Errors of the caller's request are *openai.Error
// instead (status 400, naming the field).
var (
	// ErrNoModelsDir: the Registry has no models directory, or it is not
	// a readable directory.
	ErrNoModelsDir = errors.New("prompt: no models directory")
	// ErrUnknownModel: the models directory has no <model>/tokenizer.json
	// (or the model name is not a plain relative path).
	ErrUnknownModel = errors.New("prompt: no such model in the models directory")
	// ErrModelFiles: the model's tokenizer or chat template files cannot
	// be read, parsed or reproduced exactly (the wrapped error names the
	// file). A failed load is remembered for Options.RetryFailedAfter.
	ErrModelFiles = errors.New("prompt: model files unusable")
	// ErrMultimodal is Prompt.NoKey for a chat request with an image,
	// audio or video part (chattemplate.ErrMultimodal).
	ErrMultimodal = chattemplate.ErrMultimodal
)

// Defaults of Options.
const (
	// DefaultMaxTokens caps a prompt's tokens: far beyond any model's
	// context, so only a runaway body reaches it, and the tokenizer stops
	// there instead of encoding the rest.
	DefaultMaxTokens = 1 << 20
	// DefaultMaxWordBytes bounds one BPE word (a pre-token) of a prompt:
	// merging a word costs about 32 bytes of memory per byte, so a 31 MB
	// run of one character would take a gigabyte. No natural text has a
	// word this long; a prompt that does is keyed on the ids before it
	// (Prompt.Partial).
	DefaultMaxWordBytes = 256 << 10
	// DefaultRetryFailedAfter is how long a model whose files failed to
	// load is answered from memory before its files are read again.
	DefaultRetryFailedAfter = 30 * time.Second
)

// Options tune a Registry; the zero value means the defaults.
type Options struct {
	// Now is the clock of the templates' strftime_now and of
	// RetryFailedAfter; nil = time.Now.
	Now func() time.Time
	// MaxTokens caps the tokens of a prompt (a longer one is a 400 naming
	// the prompt field); 0 = DefaultMaxTokens.
	MaxTokens int
	// MaxWordBytes bounds one BPE word of a prompt: at a longer word the
	// tokenizer stops, and the prompt's TokenIDs are the ids before it
	// (Prompt.Partial); 0 = DefaultMaxWordBytes.
	MaxWordBytes int
	// RetryFailedAfter is how long a failed model load (ErrModelFiles) is
	// remembered; 0 = DefaultRetryFailedAfter. A missing model is never
	// remembered.
	RetryFailedAfter time.Duration
}

// Prompt is what an engine prefills for one request.
type Prompt struct {
	// Model is the request's model.
	Model string
	// Text is the text that was tokenized: the rendered chat prompt or the
	// completion's prompt string; "" for a token-id prompt (TokenPrompt).
	Text string
	// TokenPrompt is set when the request gave token ids.
	TokenPrompt bool
	// TokenIDs are the ids the engine prefills (nil when NoKey is set).
	// For a token-id prompt it is the request's own slice: do not modify.
	TokenIDs []uint32
	// Partial says TokenIDs are only the leading ids of the prefill: the
	// text holds a word longer than Options.MaxWordBytes, and the ids stop
	// before it (those before it are exact, so they key a prefix).
	Partial bool
	// CacheSalt is the request's cache_salt ("" = none): the key of these
	// ids is computed in its hash domain.
	CacheSalt string
	// NoKey says why the request has no key (ErrMultimodal); nil when
	// TokenIDs are the prefill.
	NoKey error
}

// Registry serves the prompts of the models in one models directory. It
// is safe for concurrent use; each model's tokenizer and chat template
// are loaded once and shared.
type Registry struct {
	dir  string
	opts Options
	toks *tokenizer.Registry

	mu    sync.Mutex
	tmpls map[string]*tmplEntry
}

// tmplEntry is one model's chat template; ready is closed once tmpl and
// err are set.
type tmplEntry struct {
	ready chan struct{}
	tmpl  *chattemplate.Template
	err   error
	at    time.Time
}

// New returns a Registry over the models directory dir. Nothing is read
// until the first Tokens or Preload.
func New(dir string, opts Options) *Registry {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxTokens <= 0 {
		opts.MaxTokens = DefaultMaxTokens
	}
	if opts.MaxWordBytes <= 0 {
		opts.MaxWordBytes = DefaultMaxWordBytes
	}
	if opts.RetryFailedAfter <= 0 {
		opts.RetryFailedAfter = DefaultRetryFailedAfter
	}
	return &Registry{
		dir: dir, opts: opts, tmpls: map[string]*tmplEntry{},
		toks: tokenizer.NewRegistry(dir, tokenizer.RegistryOptions{MaxModels: 64, RetryFailedAfter: opts.RetryFailedAfter, Now: opts.Now}),
	}
}

// Dir is the models directory.
func (r *Registry) Dir() string { return r.dir }

// Models lists the models of the directory (every <model>/tokenizer.json,
// at most three levels deep), sorted. Errors wrap ErrNoModelsDir.
func (r *Registry) Models() ([]string, error) {
	ms, err := r.toks.Models()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoModelsDir, err)
	}
	return ms, nil
}

// Preload loads the tokenizer and chat template of each model named (all
// of Models when none is), so that first requests do not wait for a
// tokenizer parse. It returns the first load error; a model without a chat
// template is not an error (it serves completions only).
func (r *Registry) Preload(ctx context.Context, models ...string) error {
	if len(models) == 0 {
		var err error
		if models, err = r.Models(); err != nil {
			return err
		}
	}
	for _, m := range models {
		if _, err := r.tokenizer(m); err != nil {
			return err
		}
		if _, err := r.template(ctx, m); err != nil && !errors.Is(err, chattemplate.ErrNoChatTemplate) {
			return err
		}
	}
	return nil
}

// Tokens returns the prefill of req (as openai.Decode returns it: a chat
// template renders from its checked values) for req.Model's files; see the package
// documentation for the mapping. Errors: *openai.Error (400) for the
// request; ErrUnknownModel, ErrNoModelsDir, ErrModelFiles for the model;
// a wrapped ctx error when ctx ends while tokenizing or waiting for a
// load.
func (r *Registry) Tokens(ctx context.Context, req *openai.Request) (Prompt, error) {
	if p, ok := FromTokenIDs(req); ok {
		return p, nil
	}
	p := Prompt{Model: req.Model, CacheSalt: req.CacheSalt}
	tok, err := r.tokenizer(req.Model)
	if err != nil {
		return p, err
	}
	field := "prompt"
	switch req.Kind {
	case openai.KindCompletion:
		if len(req.Prompt.Texts) == 0 {
			return p, openai.Errorf("prompt", "required")
		}
		p.Text = req.Prompt.Texts[0]
	case openai.KindChat:
		field = "messages"
		if p.Text, err = r.render(ctx, req); errors.Is(err, chattemplate.ErrMultimodal) {
			p.NoKey = ErrMultimodal
			return p, nil
		} else if err != nil {
			return p, err
		}
	default:
		return p, fmt.Errorf("prompt: unknown request kind %d", req.Kind)
	}
	ids, err := tok.EncodePrefix(ctx, p.Text, req.AddSpecialTokens, r.opts.MaxTokens, r.opts.MaxWordBytes)
	switch {
	case err == nil:
		p.TokenIDs = ids
		return p, nil
	case errors.Is(err, tokenizer.ErrWordTooLong):
		p.TokenIDs, p.Partial = ids, true
		return p, nil
	case errors.Is(err, tokenizer.ErrInvalidUTF8):
		return p, openai.Errorf(field, "is not valid UTF-8")
	case errors.Is(err, tokenizer.ErrTooManyTokens):
		return p, openai.Errorf(field, "encodes to more than %d tokens, the limit", r.opts.MaxTokens)
	}
	return p, fmt.Errorf("prompt: model %q: %w", req.Model, err)
}

// FromTokenIDs is the prefill of a completion whose prompt is token ids
// (the first of a batch): the ids as given, with no special token added,
// as vLLM prefills them (it tokenizes only text prompts). It needs no
// model files, so a gateway without a models directory keys such
// requests too. ok is false for any other request.
func FromTokenIDs(req *openai.Request) (p Prompt, ok bool) {
	if req.Kind != openai.KindCompletion || len(req.Prompt.TokenIDs) == 0 {
		return Prompt{}, false
	}
	return Prompt{Model: req.Model, CacheSalt: req.CacheSalt, TokenPrompt: true, TokenIDs: req.Prompt.TokenIDs[0]}, true
}

// untrustedTemplate is vLLM's refusal of a chat template sent with the
// request when the server was not started with
// --trust-request-chat-template (its default).
const untrustedTemplate = "Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template."

// noTemplate is transformers' refusal (through vLLM) for a model without
// a chat template.
const noTemplate = "As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat template if the tokenizer does not define one."

// render renders a chat request's messages with the model's template,
// from the values openai.Decode read (no second parse of the body).
func (r *Registry) render(ctx context.Context, req *openai.Request) (string, error) {
	if req.ChatTemplate != "" {
		return "", openai.Errorf("chat_template", untrustedTemplate)
	}
	if _, ok := req.ChatTemplateKwargs.Get("chat_template"); ok {
		return "", openai.Errorf("chat_template_kwargs.chat_template", untrustedTemplate)
	}
	tmpl, err := r.template(ctx, req.Model)
	if errors.Is(err, chattemplate.ErrNoChatTemplate) {
		return "", &openai.Error{Status: http.StatusBadRequest, Message: noTemplate}
	} else if err != nil {
		return "", err
	}
	out, err := tmpl.Render(req, r.opts.Now())
	var te *chattemplate.TemplateError
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, chattemplate.ErrMultimodal):
		return "", err
	case errors.As(err, &te):
		return "", &openai.Error{Status: http.StatusBadRequest, Message: te.Message}
	case errors.Is(err, chattemplate.ErrNoChatTemplate):
		return "", &openai.Error{Status: http.StatusBadRequest, Message: noTemplate}
	}
	return "", &openai.Error{Status: http.StatusBadRequest, Message: err.Error()}
}

// tokenizer returns model's tokenizer (loading it on first use: a parse
// of tens of MB, which Preload does ahead), mapping the tokenizer
// package's errors to this one's.
func (r *Registry) tokenizer(model string) (*tokenizer.Tokenizer, error) {
	tok, err := r.toks.Tokenizer(model)
	switch {
	case err == nil:
		return tok, nil
	case errors.Is(err, tokenizer.ErrNoModelsDir):
		return nil, fmt.Errorf("%w: %w", ErrNoModelsDir, err)
	case errors.Is(err, tokenizer.ErrUnknownModel):
		return nil, fmt.Errorf("%w: %w", ErrUnknownModel, err)
	}
	return nil, fmt.Errorf("%w: %w", ErrModelFiles, err)
}

// template returns model's chat template, loading it on first use.
// ErrNoChatTemplate (wrapped) when the model has none.
func (r *Registry) template(ctx context.Context, model string) (*chattemplate.Template, error) {
	now := r.opts.Now()
	r.mu.Lock()
	e := r.tmpls[model]
	if e != nil {
		select {
		case <-e.ready:
			if e.err != nil && now.Sub(e.at) >= r.opts.RetryFailedAfter {
				e = nil
			}
		default:
		}
	}
	if e == nil {
		e = &tmplEntry{ready: make(chan struct{})}
		r.tmpls[model] = e
		r.mu.Unlock()
		e.tmpl, e.err = r.loadTemplate(model)
		e.at = now
		close(e.ready)
		return e.tmpl, e.err
	}
	r.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("prompt: model %q: chat template still loading: %w", model, ctx.Err())
	}
	return e.tmpl, e.err
}

func (r *Registry) loadTemplate(model string) (*chattemplate.Template, error) {
	if r.dir == "" {
		return nil, ErrNoModelsDir
	}
	if model == "" || !filepath.IsLocal(model) || filepath.Clean(model) != model {
		return nil, fmt.Errorf("%w: model %q is not a plain relative path", ErrUnknownModel, model)
	}
	t, err := chattemplate.Load(filepath.Join(r.dir, model))
	switch {
	case err == nil:
		return t, nil
	case errors.Is(err, chattemplate.ErrNoChatTemplate):
		return nil, err
	}
	return nil, fmt.Errorf("%w: model %q: %w", ErrModelFiles, model, err)
}
