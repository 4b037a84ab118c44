package simengine

import (
	"context"
	"net/http"
	"strings"

	"github.com/inference-cache/inference-cache/openai"
)

// response writes one request's answer as vLLM's serving_chat.py and
// serving_completion.py do.
type response struct {
	s            *Server
	w            http.ResponseWriter
	h            *Handle
	req          *openai.Request
	id           string
	created      int64
	promptTokens int
	kvParams     map[string]any // the answer's kv_transfer_params (nil = null)
}

func (rs *response) usage(p Progress) openai.Usage {
	u := openai.Usage{PromptTokens: rs.promptTokens, CompletionTokens: p.Tokens, TotalTokens: rs.promptTokens + p.Tokens}
	if p.CachedTokens > 0 {
		u.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: p.CachedTokens}
	}
	return u
}

// full waits for the last token and writes the whole response.
func (rs *response) full(ctx context.Context) {
	var p Progress
	var err error
	for !p.Done {
		if p, err = rs.h.Next(ctx, p.Tokens); err != nil {
			return // the client went away; the engine stopped the request
		}
	}
	if p.Cancelled {
		openai.WriteError(rs.w, &openai.Error{Status: http.StatusServiceUnavailable, Message: "the request was stopped: the engine is shutting down"})
		return
	}
	text := strings.Repeat(fillerToken, p.Tokens)
	if rs.req.Kind == openai.KindChat {
		writeJSON(rs.w, openai.ChatCompletionResponse{
			ID: rs.id, Object: openai.ObjectChatCompletion, Created: rs.created, Model: rs.req.Model,
			Choices: []openai.ChatChoice{{Message: openai.ChatMessage{Role: "assistant", Content: text, ToolCalls: []any{}}, FinishReason: openai.FinishLength}},
			Usage:   rs.usage(p), KVTransferParams: rs.kvParams,
		})
		return
	}
	writeJSON(rs.w, openai.CompletionResponse{
		ID: rs.id, Object: openai.ObjectTextCompletion, Created: rs.created, Model: rs.req.Model,
		Choices: []openai.CompletionChoice{{Text: text, FinishReason: openai.FinishLength}},
		Usage:   rs.usage(p), KVTransferParams: rs.kvParams,
	})
}

// stream sends the response as Server-Sent Events: the headers at once,
// then (chat) the role chunk with the first token, one chunk per batch of
// new tokens (the last with the finish reason), the usage chunk when
// asked for, and [DONE].
func (rs *response) stream(ctx context.Context) {
	sse, err := openai.NewSSEWriter(rs.w)
	if err != nil {
		rs.h.Cancel()
		return
	}
	seen := 0
	var p Progress
	for !p.Done {
		if p, err = rs.h.Next(ctx, seen); err != nil || p.Cancelled {
			return
		}
		if seen == 0 && p.Tokens > 0 && rs.req.Kind == openai.KindChat {
			role, empty := "assistant", ""
			if err := sse.WriteJSON(rs.chatChunk(openai.ChatChunkChoice{Delta: openai.ChatDelta{Role: &role, Content: &empty}})); err != nil {
				rs.h.Cancel()
				return
			}
		}
		if p.Tokens > seen {
			if err := sse.WriteJSON(rs.tokenChunk(strings.Repeat(fillerToken, p.Tokens-seen), p.Done)); err != nil {
				rs.h.Cancel()
				return
			}
			seen = p.Tokens
		}
	}
	if rs.req.IncludeUsage {
		u := openai.StreamUsage(rs.usage(p))
		var chunk any
		if rs.req.Kind == openai.KindChat {
			c := rs.chatChunk()
			c.Choices, c.Usage = []openai.ChatChunkChoice{}, &u
			chunk = c
		} else {
			chunk = openai.CompletionChunk{ID: rs.id, Object: openai.ObjectTextCompletion, Created: rs.created, Model: rs.req.Model, Choices: []openai.CompletionChunkChoice{}, Usage: &u}
		}
		if sse.WriteJSON(chunk) != nil {
			return
		}
	}
	_ = sse.WriteDone()
}

func (rs *response) chatChunk(choices ...openai.ChatChunkChoice) openai.ChatCompletionChunk {
	return openai.ChatCompletionChunk{ID: rs.id, Object: openai.ObjectChatChunk, Created: rs.created, Model: rs.req.Model, Choices: choices}
}

// tokenChunk is the chunk of new output text; the last carries the
// finish reason (and, in chat, stop_reason null).
func (rs *response) tokenChunk(text string, last bool) any {
	var finish *string
	if last {
		f := openai.FinishLength
		finish = &f
	}
	if rs.req.Kind == openai.KindChat {
		c := openai.ChatChunkChoice{Delta: openai.ChatDelta{Content: &text}, FinishReason: finish}
		if last {
			c.StopReason = openai.NullStopReason
		}
		return rs.chatChunk(c)
	}
	return openai.CompletionChunk{ID: rs.id, Object: openai.ObjectTextCompletion, Created: rs.created, Model: rs.req.Model,
		Choices: []openai.CompletionChunkChoice{{Text: text, FinishReason: finish}}}
}
