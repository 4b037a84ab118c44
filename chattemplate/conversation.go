package chattemplate

import (
	"fmt"
	"strings"

	"github.com/inference-cache/inference-cache/openai"
)

// ContentFormat is how message content reaches a template, as vLLM decides
// it (--chat-template-content-format auto).
type ContentFormat int

const (
	// ContentString: content is one string, the request's text parts
	// joined with "\n". vLLM picks it for templates that never loop over
	// a message's content.
	ContentString ContentFormat = iota
	// ContentOpenAI: content is a list of parts, each {"type": "text",
	// "text": …}, also for content sent as a plain string. vLLM picks it
	// for templates that loop over message.content or message['content'].
	ContentOpenAI
)

// String returns "string" or "openai", vLLM's names.
func (f ContentFormat) String() string {
	if f == ContentOpenAI {
		return "openai"
	}
	return "string"
}

// conversation maps the request's messages (checked by openai.Decode) to
// the list vLLM hands the template (vllm/entrypoints/chat_utils.py,
// _parse_chat_message_content and _postprocess_messages, with the
// reasoning_content → reasoning rename of ChatCompletionRequest's
// validator). Each message becomes a new object with, in this order:
//
//   - role and content (joined text or text parts, per format);
//   - for an assistant: tool_calls when present and not null (dropped when
//     empty; each function's string arguments parsed as JSON, {} when they
//     are not JSON, missing or null), then reasoning and reasoning_content,
//     both from reasoning or else reasoning_content, when not null;
//   - for a tool message: tool_call_id when present (and text-only list
//     content joined back into one string);
//   - name and task when they are strings;
//   - for a developer message: tools (null when absent).
//
// Other fields are dropped, as vLLM drops them. A media part gives
// ErrMultimodal, wrapped with the part's field name.
func conversation(msgs []*openai.Object, format ContentFormat) ([]any, error) {
	out := make([]any, len(msgs))
	for i, m := range msgs {
		rv, _ := m.Get("role")
		role, _ := rv.(string)
		content, err := messageContent(m, i, role, format)
		if err != nil {
			return nil, err
		}
		msg := openai.NewObject("role", role, "content", content)
		switch role {
		case "assistant":
			assistantFields(m, msg)
		case "tool":
			if id, ok := m.Get("tool_call_id"); ok {
				msg.Set("tool_call_id", id)
			}
		}
		for _, k := range []string{"name", "task"} {
			if v, _ := m.Get(k); v != nil {
				if s, isStr := v.(string); isStr {
					msg.Set(k, s)
				}
			}
		}
		if role == "developer" {
			tools, _ := m.Get("tools")
			msg.Set("tools", tools)
		}
		out[i] = msg
	}
	return out, nil
}

// messageContent returns messages[i]'s content as the template sees it.
func messageContent(m *openai.Object, i int, role string, format ContentFormat) (any, error) {
	raw, _ := m.Get("content")
	var parts []any
	switch c := raw.(type) {
	case string:
		if format == ContentString {
			return c, nil
		}
		parts = []any{c}
	case []any:
		parts = c
	}

	var texts []string
	var blocks []any
	textOnly := true
	for j, p := range parts {
		kind, text := openai.Part(p)
		switch kind {
		case openai.PartMedia:
			return nil, fmt.Errorf("messages[%d].content[%d]: %w", i, j, ErrMultimodal)
		case openai.PartToolReference:
			textOnly = false
			blocks = append(blocks, openai.NewObject("type", "tool_reference", "name", text))
		case openai.PartText:
			blocks = append(blocks, openai.NewObject("type", "text", "text", text))
		default:
			continue
		}
		texts = append(texts, text)
	}
	if format == ContentString || (role == "tool" && textOnly) {
		return strings.Join(texts, "\n"), nil
	}
	if blocks == nil {
		blocks = []any{}
	}
	return blocks, nil
}

// assistantFields adds an assistant message's tool_calls and reasoning.
func assistantFields(m, msg *openai.Object) {
	if tc, _ := m.Get("tool_calls"); tc != nil {
		calls, _ := tc.([]any)
		if len(calls) > 0 {
			mapped := make([]any, 0, len(calls))
			for _, c := range calls {
				if call, ok := c.(*openai.Object); ok {
					mapped = append(mapped, toolCall(call))
				}
			}
			msg.Set("tool_calls", mapped)
		}
	}
	reasoning, _ := m.Get("reasoning")
	if reasoning == nil {
		reasoning, _ = m.Get("reasoning_content")
	}
	if s, ok := reasoning.(string); ok {
		msg.Set("reasoning", s)
		msg.Set("reasoning_content", s)
	}
}

// toolCall copies one tool call with its function's arguments as vLLM's
// _postprocess_messages leaves them: a JSON string parsed, an object or
// array kept, anything else (invalid JSON, null, missing) {}.
func toolCall(call *openai.Object) *openai.Object {
	fv, _ := call.Get("function")
	fn, _ := fv.(*openai.Object)
	var args any = &openai.Object{}
	switch a, _ := fn.Get("arguments"); x := a.(type) {
	case string:
		if parsed, err := openai.ParseJSON([]byte(x)); err == nil {
			args = parsed
		}
	case *openai.Object, []any:
		args = x
	}
	newFn := fn.Clone(1)
	newFn.Set("arguments", args)
	newCall := call.Clone(0)
	newCall.Set("function", newFn)
	return newCall
}

// normalizeTools returns the tools (checked by openai.Decode) as vLLM
// hands them to the template: each validated as its
// ChatCompletionToolsParam and dumped again (tool.model_dump()), so a
// tool is {"type": "function", "function": {"name", "description",
// "parameters", then "strict" and "defer_loading" when set}} plus
// "defer_loading" when the tool sets it; description and parameters are
// null when absent; other fields are dropped.
func normalizeTools(tools []*openai.Object) []any {
	out := make([]any, len(tools))
	for i, tool := range tools {
		fv, _ := tool.Get("function")
		fn, _ := fv.(*openai.Object)
		name, _ := fn.Get("name")
		desc, _ := fn.Get("description")
		params, _ := fn.Get("parameters")
		strict, _ := fn.Get("strict")
		fnDefer, _ := fn.Get("defer_loading")
		toolDefer, _ := tool.Get("defer_loading")
		if fnDefer == nil {
			fnDefer = toolDefer
		}
		f := openai.NewObject("name", name, "description", desc, "parameters", params)
		if strict != nil {
			f.Set("strict", strict)
		}
		if fnDefer != nil {
			f.Set("defer_loading", fnDefer)
		}
		norm := openai.NewObject("type", "function", "function", f)
		if toolDefer != nil {
			norm.Set("defer_loading", toolDefer)
		}
		out[i] = norm
	}
	return out
}
