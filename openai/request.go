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

// Request is a decoded /v1/completions or /v1/chat/completions body. The
// fields are those the routing path and the sim engine read; the rest of
// the body stays in Raw (every top-level field as sent).
type Request struct {
	// Kind is the endpoint.
	Kind Kind
	// Model is the model name (required, non-empty).
	Model string

	// Prompt is the completion prompt (KindCompletion only; required).
	Prompt Prompt
	// Messages are the chat messages (KindChat only; at least one), each
	// the JSON object as sent, numbers as json.Number. Each has a string
	// "role"; "content" is a string, a list of content parts (objects with
	// a string "type"; "text" parts have a string "text") or null.
	Messages []map[string]any

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

	// AddGenerationPrompt (chat; default true) and ContinueFinalMessage
	// (chat; default false) are passed to the chat template; both set
	// true is refused, as vLLM refuses it.
	AddGenerationPrompt, ContinueFinalMessage bool
	// AddSpecialTokens is whether the tokenizer adds its special tokens:
	// default true for completions, false for chat (the template has them).
	AddSpecialTokens bool
	// ChatTemplate is a template given with the request ("" = the
	// model's).
	ChatTemplate string
	// ChatTemplateKwargs are extra template variables (e.g.
	// enable_thinking), numbers as json.Number; nil when absent.
	ChatTemplateKwargs map[string]any
	// Tools are the tool definitions as sent (objects); nil when absent.
	Tools []map[string]any
	// Documents are the RAG documents as sent (objects); nil when absent.
	Documents []map[string]any
	// CacheSalt salts the engine's prefix cache (non-empty when present).
	CacheSalt string

	// Raw is every top-level field of the body as sent.
	Raw map[string]json.RawMessage
}

// MaxTokensOr is MaxTokens, or def when the request gives none.
func (r *Request) MaxTokensOr(def int) int {
	if r.MaxTokens > 0 {
		return r.MaxTokens
	}
	return def
}

// MessageText is a message's content as text, as vLLM flattens it for a
// template that takes string content: a string as is, the text of the
// text parts (and of plain string parts) joined with "\n", "" for null.
// multimodal reports a part of any other type (image_url, input_audio, …),
// which the text does not represent.
func MessageText(msg map[string]any) (text string, multimodal bool) {
	switch c := msg["content"].(type) {
	case string:
		return c, false
	case []any:
		var b []byte
		n := 0
		for _, p := range c {
			var s string
			switch part := p.(type) {
			case string:
				s = part
			case map[string]any:
				t, typed := part["type"].(string)
				txt, isText := part["text"].(string)
				if (typed && t != "text") || !isText {
					multimodal = true // vLLM also reads {"text": …} without a type
					continue
				}
				s = txt
			default:
				continue
			}
			if n > 0 {
				b = append(b, '\n')
			}
			b = append(b, s...)
			n++
		}
		return string(b), multimodal
	}
	return "", false
}
