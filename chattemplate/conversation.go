package chattemplate

import (
	"fmt"
	"strings"
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

// Content part types, as vLLM's chat_utils.MM_PARSER_MAP names them.
var (
	textPartKeys = map[string]string{
		"text": "text", "input_text": "text", "output_text": "text",
		"refusal": "refusal", "thinking": "thinking",
	}
	mediaPartTypes = map[string]bool{
		"image_url": true, "input_image": true, "image_embeds": true, "image_pil": true,
		"audio_url": true, "input_audio": true, "audio_embeds": true,
		"video_url": true, "prompt_embeds": true,
	}
	// mediaPartKeys are the keys that make a part without "type" a media
	// part for vLLM.
	mediaPartKeys = []string{"image_url", "image_pil", "image_embeds", "audio_embeds",
		"prompt_embeds", "audio_url", "input_audio", "video_url"}
)

// conversation maps the request's messages to the list vLLM hands the
// template (vllm/entrypoints/chat_utils.py, _parse_chat_message_content and
// _postprocess_messages, with the reasoning_content → reasoning rename of
// ChatCompletionRequest's validator). Each message becomes a new object
// with, in this order:
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
func conversation(msgs []*Object, format ContentFormat) ([]any, error) {
	out := make([]any, len(msgs))
	for i, m := range msgs {
		field := fmt.Sprintf("messages[%d]", i)
		if m == nil {
			return nil, badRequest(field, "must be an object")
		}
		rv, _ := m.Get("role")
		role, ok := rv.(string)
		if !ok {
			return nil, badRequest(field+".role", "is required and must be a string")
		}
		content, err := messageContent(m, field, role, format)
		if err != nil {
			return nil, err
		}
		msg := &Object{keys: make([]string, 0, 4), vals: make(map[string]any, 4)}
		msg.Set("role", role)
		msg.Set("content", content)
		switch role {
		case "assistant":
			if err := assistantFields(m, msg, field); err != nil {
				return nil, err
			}
		case "tool":
			if id, ok := m.Get("tool_call_id"); ok {
				msg.Set("tool_call_id", id)
			}
		}
		if name, ok := m.Get("name"); ok {
			if s, isStr := name.(string); isStr {
				msg.Set("name", s)
			}
		}
		if task, ok := m.Get("task"); ok {
			if s, isStr := task.(string); isStr {
				msg.Set("task", s)
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

// messageContent returns a message's content as the template sees it.
func messageContent(m *Object, field, role string, format ContentFormat) (any, error) {
	field += ".content"
	raw, _ := m.Get("content")
	var parts []any
	switch c := raw.(type) {
	case nil:
	case string:
		if format == ContentString {
			return c, nil
		}
		parts = []any{c}
	case []any:
		parts = c
	default:
		return nil, badRequest(field, "must be a string, an array of content parts or null, got "+typeName(raw))
	}

	var texts []string
	var blocks []any
	textOnly := true
	for j, p := range parts {
		pf := fmt.Sprintf("%s[%d]", field, j)
		text, kind, err := contentPart(p, pf)
		if err != nil {
			return nil, err
		}
		if kind == "" {
			continue // a text or refusal part whose text is null
		}
		texts = append(texts, text)
		if kind == "tool_reference" {
			textOnly = false
			blocks = append(blocks, NewObject("type", "tool_reference", "name", text))
		} else {
			blocks = append(blocks, NewObject("type", "text", "text", text))
		}
	}
	if format == ContentString {
		return strings.Join(texts, "\n"), nil
	}
	if role == "tool" && textOnly {
		return strings.Join(texts, "\n"), nil
	}
	if blocks == nil {
		blocks = []any{}
	}
	return blocks, nil
}

// contentPart reads one content part: its text and kind ("text" for every
// text-like part, "tool_reference"), or kind "" for a part vLLM skips.
func contentPart(p any, field string) (text, kind string, err error) {
	if m, ok := p.(map[string]any); ok {
		o, err := asObject(m, field)
		if err != nil {
			return "", "", err
		}
		p = o
	}
	switch x := p.(type) {
	case string:
		return x, "text", nil
	case *Object:
		tv, hasType := x.Get("type")
		if !hasType || tv == nil {
			for _, k := range mediaPartKeys {
				if _, ok := x.Get(k); ok {
					return "", "", fmt.Errorf("%s: %w", field, ErrMultimodal)
				}
			}
			return "", "", badRequest(field+".type", "is required")
		}
		typ, ok := tv.(string)
		if !ok {
			return "", "", badRequest(field+".type", "must be a string, got "+typeName(tv))
		}
		if mediaPartTypes[typ] {
			return "", "", fmt.Errorf("%s (type %q): %w", field, typ, ErrMultimodal)
		}
		key, ok := textPartKeys[typ]
		if typ == "tool_reference" {
			key, ok = "name", true
		}
		if !ok {
			return "", "", badRequest(field+".type", fmt.Sprintf("unsupported content part type %q", typ))
		}
		v, _ := x.Get(key)
		if v == nil && (typ == "text" || typ == "refusal") {
			return "", "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", "", badRequest(field+"."+key, "is required and must be a string, got "+typeName(v))
		}
		if typ == "tool_reference" {
			return s, "tool_reference", nil
		}
		return s, "text", nil
	}
	return "", "", badRequest(field, "must be a string or an object, got "+typeName(p))
}

// assistantFields adds an assistant message's tool_calls and reasoning.
func assistantFields(m, msg *Object, field string) error {
	if tc, ok := m.Get("tool_calls"); ok && tc != nil {
		calls, ok := tc.([]any)
		if !ok {
			return badRequest(field+".tool_calls", "must be an array, got "+typeName(tc))
		}
		if len(calls) > 0 {
			mapped := make([]any, len(calls))
			for j, c := range calls {
				call, err := toolCall(c, fmt.Sprintf("%s.tool_calls[%d]", field, j))
				if err != nil {
					return err
				}
				mapped[j] = call
			}
			msg.Set("tool_calls", mapped)
		}
	}
	reasoning, _ := m.Get("reasoning")
	if reasoning == nil {
		reasoning, _ = m.Get("reasoning_content")
	}
	if reasoning != nil {
		s, ok := reasoning.(string)
		if !ok {
			return badRequest(field+".reasoning", "must be a string, got "+typeName(reasoning))
		}
		msg.Set("reasoning", s)
		msg.Set("reasoning_content", s)
	}
	return nil
}

// toolCall copies one tool call with its function's arguments as vLLM's
// _postprocess_messages leaves them: a JSON string parsed, an object or
// array kept, anything else (invalid JSON, null, missing) {}.
func toolCall(c any, field string) (*Object, error) {
	call, err := asObject(c, field)
	if err != nil {
		return nil, err
	}
	fv, _ := call.Get("function")
	fn, err := asObject(fv, field+".function")
	if err != nil {
		return nil, err
	}
	var args any = &Object{}
	switch a, _ := fn.Get("arguments"); x := a.(type) {
	case string:
		if parsed, err := decodeJSON([]byte(x)); err == nil {
			args = parsed
		}
	case *Object, []any:
		args = x
	}
	newFn := copyObject(fn)
	newFn.Set("arguments", args)
	newCall := copyObject(call)
	newCall.Set("function", newFn)
	return newCall, nil
}

func copyObject(o *Object) *Object {
	c := &Object{keys: append([]string(nil), o.keys...), vals: make(map[string]any, len(o.vals)+1)}
	for k, v := range o.vals {
		c.vals[k] = v
	}
	return c
}

// normalizeTools returns the tools as vLLM hands them to the template:
// each validated as its ChatCompletionToolsParam and dumped again
// (tool.model_dump()), so a tool is {"type": "function", "function":
// {"name", "description", "parameters", then "strict" and "defer_loading"
// when set}} plus "defer_loading" when the tool sets it; description and
// parameters are null when absent; other fields are dropped.
func normalizeTools(tools []any) ([]any, error) {
	out := make([]any, len(tools))
	for i, t := range tools {
		field := fmt.Sprintf("tools[%d]", i)
		tool, err := asObject(t, field)
		if err != nil {
			return nil, err
		}
		if typ, ok := tool.Get("type"); ok && typ != "function" {
			return nil, badRequest(field+".type", fmt.Sprintf("must be \"function\", got %s", describe(typ)))
		}
		fv, _ := tool.Get("function")
		fn, err := asObject(fv, field+".function")
		if err != nil {
			return nil, err
		}
		nv, _ := fn.Get("name")
		name, ok := nv.(string)
		if !ok {
			return nil, badRequest(field+".function.name", "is required and must be a string, got "+typeName(nv))
		}
		desc, err := optionalOf[string](fn, "description", field+".function")
		if err != nil {
			return nil, err
		}
		params, err := optionalOf[*Object](fn, "parameters", field+".function")
		if err != nil {
			return nil, err
		}
		strict, err := optionalOf[bool](fn, "strict", field+".function")
		if err != nil {
			return nil, err
		}
		fnDefer, err := optionalOf[bool](fn, "defer_loading", field+".function")
		if err != nil {
			return nil, err
		}
		toolDefer, err := optionalOf[bool](tool, "defer_loading", field)
		if err != nil {
			return nil, err
		}
		if fnDefer == nil {
			fnDefer = toolDefer
		}
		f := NewObject("name", name, "description", desc, "parameters", params)
		if strict != nil {
			f.Set("strict", strict)
		}
		if fnDefer != nil {
			f.Set("defer_loading", fnDefer)
		}
		norm := NewObject("type", "function", "function", f)
		if toolDefer != nil {
			norm.Set("defer_loading", toolDefer)
		}
		out[i] = norm
	}
	return out, nil
}

// checkDocuments validates documents as vLLM's list[dict[str, str]].
func checkDocuments(docs []any) error {
	for i, d := range docs {
		field := fmt.Sprintf("documents[%d]", i)
		o, err := asObject(d, field)
		if err != nil {
			return err
		}
		for _, k := range o.Keys() {
			if v, _ := o.Get(k); typeName(v) != "string" {
				return badRequest(field+"."+k, "must be a string, got "+typeName(v))
			}
		}
	}
	return nil
}

// asObject accepts an *Object or a map[string]any (keys then sorted).
func asObject(v any, field string) (*Object, error) {
	switch x := v.(type) {
	case *Object:
		if x != nil {
			return x, nil
		}
	case map[string]any:
		if err := checkValue(field, x); err != nil {
			return nil, err
		}
		d := fromGo(x).AsDict()
		o := &Object{}
		for _, k := range d.Keys {
			o.Set(k, x[k])
		}
		return o, nil
	}
	return nil, badRequest(field, "must be an object, got "+typeName(v))
}

// optionalOf reads an optional field of type T: nil when absent or null,
// a pointer to the value otherwise (an *Object as itself).
func optionalOf[T any](o *Object, key, parent string) (any, error) {
	v, ok := o.Get(key)
	if !ok || v == nil {
		return nil, nil
	}
	if m, isMap := v.(map[string]any); isMap {
		var zero T
		if _, wantObj := any(zero).(*Object); wantObj {
			return asObject(m, parent+"."+key)
		}
	}
	if _, ok := v.(T); !ok {
		var zero T
		return nil, badRequest(parent+"."+key, fmt.Sprintf("must be %s, got %s", typeName(any(zero)), typeName(v)))
	}
	return v, nil
}

func describe(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return typeName(v)
}
