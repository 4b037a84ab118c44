package openai

import "encoding/json"

// Kind is the endpoint a request was sent to.
type Kind int

// Kinds.
const (
	// KindCompletion is POST /v1/completions.
	KindCompletion Kind = iota + 1
	// KindChat is POST /v1/chat/completions.
	KindChat
)

// String names k's path.
func (k Kind) String() string {
	switch k {
	case KindCompletion:
		return "/v1/completions"
	case KindChat:
		return "/v1/chat/completions"
	}
	return "unknown"
}

// Limits of decoded requests.
const (
	// MaxTokenID bounds a token id of a token-id prompt (ids are unsigned
	// 32-bit, as the engines' KV events carry them).
	MaxTokenID = 1<<32 - 1
)

// DefaultCompletionMaxTokens is max_tokens when a completion request has
// none (vLLM's CompletionRequest default).
const DefaultCompletionMaxTokens = 16

// Prompt is a completion request's prompt in the form the client sent:
// Texts for a string (IsList false) or a list of strings; TokenIDs for a
// list of token ids (IsList false) or a list of such lists. Exactly one of
// Texts and TokenIDs is non-empty; each entry is one prompt (vLLM serves a
// list as a batch, one choice per prompt).
type Prompt struct {
	Texts    []string
	TokenIDs [][]uint32
	IsList   bool
}

// Len is the number of prompts.
func (p *Prompt) Len() int { return len(p.Texts) + len(p.TokenIDs) }

// Request is a decoded /v1/completions or /v1/chat/completions body: the
// fields the routing path, the chat template and the sim engine read, each
// checked once, here, as vLLM checks it (an *Error naming the field
// otherwise; contract §12.8); the rest of the body stays in Raw (every top-level field as
// sent). The chat fields and the prompt hold the values decoded from the
// body, its strings views of the body's bytes where they need no
// unquoting (the body is kept while they live: copy one that must outlive
// the request): a chat template renders from them (package chattemplate).
// Model, CacheSalt, ChatTemplate and ReasoningEffort are copies.
type Request struct {
	// Kind is the endpoint.
	Kind Kind
	// Model is the model name (required, non-empty).
	Model string

	// Prompt is the completion prompt (KindCompletion only; required).
	Prompt Prompt
	// Messages are the chat messages (KindChat only; at least one), each
	// the JSON object as sent (names in the client's order, values as
	// ParseJSON gives them), checked as vLLM checks them (see
	// checkMessage): a non-empty string "role"; a "content" that is a
	// string, null or a list of content parts (Part reads them); for an
	// assistant, a list of tool-call objects or null "tool_calls" and a
	// string or null "reasoning".
	Messages []*Object

	// Stream asks for Server-Sent Events.
	Stream bool
	// IncludeUsage is stream_options.include_usage: a last chunk with the
	// usage and no choices. StreamOptions says whether stream_options was
	// given (only allowed with stream).
	IncludeUsage, StreamOptions bool
	// MaxTokens is max_completion_tokens (chat only), else max_tokens
	// (at least 1, as vLLM's SamplingParams requires; the engine bounds it
	// by the context left); 0 when the request gives neither.
	MaxTokens int
	// N is the number of choices (at least 1, as vLLM requires; default
	// 1).
	N int

	// AddGenerationPrompt (chat; default true, false with
	// ContinueFinalMessage, as vLLM's build_chat_params defaults it) and
	// ContinueFinalMessage (chat; default false) are passed to the chat
	// template; both given true is refused, as vLLM refuses it.
	AddGenerationPrompt, ContinueFinalMessage bool
	// AddSpecialTokens is whether the tokenizer adds its special tokens:
	// default true for completions, false for chat (the template has them).
	AddSpecialTokens bool
	// ChatTemplate is a template given with the request ("" = the
	// model's).
	ChatTemplate string
	// ChatTemplateKwargs are extra template variables (e.g.
	// enable_thinking) as sent; nil when absent. None is tokenize,
	// conversation, tools or messages (vLLM refuses them); its documents,
	// read when Documents is nil, are checked as Documents are.
	ChatTemplateKwargs *Object
	// ReasoningEffort is reasoning_effort, one of ReasoningEfforts; ""
	// when absent.
	ReasoningEffort string
	// Tools are the tool definitions as sent, each checked as vLLM's
	// ChatCompletionToolsParam (see checkTool); nil when absent.
	Tools []*Object
	// Documents are the RAG documents as sent, objects of strings; nil
	// when absent.
	Documents []*Object
	// CacheSalt salts the engine's prefix cache (non-empty when present).
	CacheSalt string

	// Raw is every top-level field of the body as sent: slices of the
	// body (DecodeOwned) or of one copy of it (Decode).
	Raw map[string]json.RawMessage
}

// MaxTokensOr is MaxTokens, or def when the request gives none.
func (r *Request) MaxTokensOr(def int) int {
	if r.MaxTokens > 0 {
		return r.MaxTokens
	}
	return def
}
