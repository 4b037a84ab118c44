package openai

import "encoding/json"

// Object names of the responses.
const (
	ObjectTextCompletion = "text_completion"
	ObjectChatCompletion = "chat.completion"
	ObjectChatChunk      = "chat.completion.chunk"
	ObjectModel          = "model"
	ObjectList           = "list"
)

// Finish reasons.
const (
	FinishLength = "length" // max_tokens reached
	FinishStop   = "stop"   // end of sequence or a stop string
)

// PromptTokensDetails is usage.prompt_tokens_details: CachedTokens is the
// prompt prefix the engine found in its prefix cache (whole blocks).
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// Usage is a response's token counts, as vLLM's UsageInfo (fields in its
// order). vLLM sets PromptTokensDetails only when prompt tokens were
// cached (and --enable-prompt-tokens-details is on); it is null otherwise.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details"`
}

// CachedTokens is PromptTokensDetails.CachedTokens, 0 without details.
func (u *Usage) CachedTokens() int {
	if u == nil || u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// StreamUsage is the usage of a stream's last chunk: vLLM dumps that
// chunk with exclude_none, so prompt_tokens_details is absent rather than
// null when unset.
type StreamUsage Usage

// MarshalJSON writes u without a nil prompt_tokens_details.
func (u StreamUsage) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		PromptTokens        int                  `json:"prompt_tokens"`
		TotalTokens         int                  `json:"total_tokens"`
		CompletionTokens    int                  `json:"completion_tokens"`
		PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
	}(u))
}

// CompletionChoice is one choice of a /v1/completions response.
type CompletionChoice struct {
	Index          int    `json:"index"`
	Text           string `json:"text"`
	Logprobs       any    `json:"logprobs"`
	FinishReason   string `json:"finish_reason"`
	StopReason     any    `json:"stop_reason"`
	PromptLogprobs any    `json:"prompt_logprobs"`
}

// CompletionResponse is a non-streamed /v1/completions response (vLLM
// dumps every field, unset ones null).
type CompletionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []CompletionChoice `json:"choices"`
	ServiceTier       any                `json:"service_tier"`
	SystemFingerprint any                `json:"system_fingerprint"`
	Usage             Usage              `json:"usage"`
	KVTransferParams  any                `json:"kv_transfer_params"`
}

// CompletionChunkChoice is one choice of a streamed completion chunk.
type CompletionChunkChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   any     `json:"stop_reason"`
}

// CompletionChunk is one event of a streamed /v1/completions response.
// vLLM dumps it with every field: usage is null except in the last chunk
// (stream_options.include_usage), which has no choices.
type CompletionChunk struct {
	ID      string                  `json:"id"`
	Object  string                  `json:"object"`
	Created int64                   `json:"created"`
	Model   string                  `json:"model"`
	Choices []CompletionChunkChoice `json:"choices"`
	Usage   *StreamUsage            `json:"usage"`
}

// ChatMessage is the message of a non-streamed chat choice.
type ChatMessage struct {
	Role             string `json:"role"`
	Content          string `json:"content"`
	Refusal          any    `json:"refusal"`
	Annotations      any    `json:"annotations"`
	Audio            any    `json:"audio"`
	FunctionCall     any    `json:"function_call"`
	ToolCalls        []any  `json:"tool_calls"`
	ReasoningContent any    `json:"reasoning_content"`
}

// ChatChoice is one choice of a non-streamed chat response.
type ChatChoice struct {
	Index        int         `json:"index"`
	Message      ChatMessage `json:"message"`
	Logprobs     any         `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
	StopReason   any         `json:"stop_reason"`
}

// ChatCompletionResponse is a non-streamed /v1/chat/completions response.
type ChatCompletionResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []ChatChoice `json:"choices"`
	ServiceTier       any          `json:"service_tier"`
	SystemFingerprint any          `json:"system_fingerprint"`
	Usage             Usage        `json:"usage"`
	PromptLogprobs    any          `json:"prompt_logprobs"`
	KVTransferParams  any          `json:"kv_transfer_params"`
}

// ChatDelta is the delta of a streamed chat choice; vLLM sends only the
// fields it set (exclude_unset): role and "" content in the first chunk,
// content after.
type ChatDelta struct {
	Role    *string `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// ChatChunkChoice is one choice of a streamed chat chunk. StopReason is
// sent (as null) only with the finish reason: set it to NullStopReason
// then.
type ChatChunkChoice struct {
	Index        int             `json:"index"`
	Delta        ChatDelta       `json:"delta"`
	Logprobs     any             `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason,omitempty"`
}

// NullStopReason is the stop_reason of a finishing chunk that stopped for
// no stop string or token (max_tokens, end of sequence).
var NullStopReason = json.RawMessage("null")

// ChatCompletionChunk is one event of a streamed chat response; Usage is
// only in the last chunk (stream_options.include_usage), which has no
// choices.
type ChatCompletionChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *StreamUsage      `json:"usage,omitempty"`
}

// ModelPermission is a model card's permission entry (vLLM fills the
// defaults below).
type ModelPermission struct {
	ID                 string `json:"id"`
	Object             string `json:"object"`
	Created            int64  `json:"created"`
	AllowCreateEngine  bool   `json:"allow_create_engine"`
	AllowSampling      bool   `json:"allow_sampling"`
	AllowLogprobs      bool   `json:"allow_logprobs"`
	AllowSearchIndices bool   `json:"allow_search_indices"`
	AllowView          bool   `json:"allow_view"`
	AllowFineTuning    bool   `json:"allow_fine_tuning"`
	Organization       string `json:"organization"`
	Group              any    `json:"group"`
	IsBlocking         bool   `json:"is_blocking"`
}

// NewModelPermission is vLLM's default permission entry with id.
func NewModelPermission(id string, created int64) ModelPermission {
	return ModelPermission{ID: id, Object: "model_permission", Created: created, AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*"}
}

// ModelCard is one model of /v1/models.
type ModelCard struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Created     int64             `json:"created"`
	OwnedBy     string            `json:"owned_by"`
	Root        string            `json:"root"`
	Parent      any               `json:"parent"`
	MaxModelLen int               `json:"max_model_len"`
	Permission  []ModelPermission `json:"permission"`
}

// ModelList is the /v1/models response.
type ModelList struct {
	Object string      `json:"object"`
	Data   []ModelCard `json:"data"`
}
