package openai

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// Every chat field a template reads is checked at decode, once, as vLLM
// checks it: the error names the field as the client wrote it (nested
// paths included) and the rule.
func TestDecodeChat_ChatFieldsNameTheFieldAndTheRule(t *testing.T) {
	const user = `{"role": "user", "content": "a"}`
	cases := []struct{ rest, param, text string }{
		{`"messages": [` + user + `, {"content": "b"}]`, "messages[1].role", "required"},
		{`"messages": [{"role": 7, "content": "b"}]`, "messages[0].role", "expected a string, got 7"},
		{`"messages": [{"role": "", "content": "b"}]`, "messages[0].role", "empty"},
		{`"messages": [{"role": "user", "content": 5}]`, "messages[0].content", "got 5"},
		{`"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "hologram"}]}]`, "messages[0].content[1].type", `unsupported content part type "hologram"`},
		{`"messages": [{"role": "user", "content": [{"text": "a"}]}]`, "messages[0].content[0].type", "required"},
		{`"messages": [{"role": "user", "content": [{"type": 1}]}]`, "messages[0].content[0].type", "expected a string, got 1"},
		{`"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]`, "messages[0].content[0].text", "string text, got 3"},
		{`"messages": [{"role": "user", "content": [{"type": "refusal", "refusal": null}]}]`, "messages[0].content[0].refusal", "string refusal, got null"},
		{`"messages": [{"role": "user", "content": [{"type": "tool_reference"}]}]`, "messages[0].content[0].name", "string name"},
		{`"messages": [{"role": "user", "content": [true]}]`, "messages[0].content[0]", "content part object or a string, got true"},
		{`"messages": [{"role": "assistant", "content": "", "tool_calls": {"id": "x"}}]`, "messages[0].tool_calls", "got an object"},
		{`"messages": [{"role": "assistant", "content": "", "tool_calls": ["x"]}]`, "messages[0].tool_calls[0]", "tool call object"},
		{`"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "x"}]}]`, "messages[0].tool_calls[0].function", "got null"},
		{`"messages": [{"role": "assistant", "content": "", "reasoning": 5}]`, "messages[0].reasoning", "got 5"},
		{`"messages": [{"role": "assistant", "content": "", "reasoning_content": []}]`, "messages[0].reasoning_content", "got a list"},
		{`"messages": [` + user + `], "tools": {}`, "tools", "expected a list of objects"},
		{`"messages": [` + user + `], "tools": ["f"]`, "tools[0]", `got "f"`},
		{`"messages": [` + user + `], "tools": [{"type": "code", "function": {"name": "f"}}]`, "tools[0].type", `expected "function", got "code"`},
		{`"messages": [` + user + `], "tools": [{"type": "function", "function": {"description": "d"}}]`, "tools[0].function.name", "required"},
		{`"messages": [` + user + `], "tools": [{"type": "function"}]`, "tools[0].function", "required"},
		{`"messages": [` + user + `], "tools": [{"function": {"name": "f", "parameters": "x"}}]`, "tools[0].function.parameters", `expected an object or null, got "x"`},
		{`"messages": [` + user + `], "tools": [{"function": {"name": "f", "description": 2}}]`, "tools[0].function.description", "got 2"},
		{`"messages": [` + user + `], "tools": [{"function": {"name": "f", "strict": "yes"}}]`, "tools[0].function.strict", `got "yes"`},
		{`"messages": [` + user + `], "tools": [{"function": {"name": "f"}, "defer_loading": 1}]`, "tools[0].defer_loading", "got 1"},
		{`"messages": [` + user + `], "documents": [{"title": 1}]`, "documents[0].title", "expected a string, got 1"},
		{`"messages": [` + user + `], "documents": "d"`, "documents", "expected a list of objects"},
		{`"messages": [` + user + `], "chat_template_kwargs": {"tokenize": true}`, "chat_template_kwargs.tokenize", "not allowed"},
		{`"messages": [` + user + `], "chat_template_kwargs": {"messages": []}`, "chat_template_kwargs.messages", "not allowed"},
		{`"messages": [` + user + `], "chat_template_kwargs": {"documents": [{"t": null}]}`, "chat_template_kwargs.documents[0].t", "expected a string, got null"},
		{`"messages": [` + user + `], "chat_template_kwargs": {"documents": 3}`, "chat_template_kwargs.documents", "got 3"},
		{`"messages": [` + user + `], "reasoning_effort": "extreme"`, "reasoning_effort", `expected one of none, minimal, low, medium, high, xhigh, max, got "extreme"`},
		{`"messages": [` + user + `], "reasoning_effort": 1`, "reasoning_effort", "expected a string"},
		{`"messages": [` + user + `], "add_generation_prompt": "yes"`, "add_generation_prompt", "expected true or false"},
		{`"messages": [` + user + `], "continue_final_message": 1`, "continue_final_message", "expected true or false"},
		{`"messages": [` + user + `], "chat_template_kwargs": {"x": ` + strings.Repeat("[", MaxNesting) + strings.Repeat("]", MaxNesting) + `}`, "chat_template_kwargs", "nests deeper than the limit of 1000 levels"},
		{`"messages": [` + user + `], "temperature": ` + strings.Repeat("[", MaxNesting) + strings.Repeat("]", MaxNesting), "temperature", "nests deeper than the limit of 1000 levels"},
	}
	for _, tc := range cases {
		body := `{"model": "m", ` + tc.rest + `}`
		_, err := DecodeChat([]byte(body))
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: error %v, want *Error", body, err)
			continue
		}
		if e.Status != http.StatusBadRequest || e.Param != tc.param || !strings.Contains(e.Message, tc.text) {
			t.Errorf("%s:\n got  %d %q %q\n want 400 %q containing %q", body, e.Status, e.Param, e.Message, tc.param, tc.text)
		}
	}
}

// What vLLM accepts is accepted: media parts (typed, or untyped with a
// media field), null tool_calls and reasoning, a null tool type's
// absence, documents from chat_template_kwargs when the request has none
// of its own, nesting up to the limit.
func TestDecodeChat_AcceptsWhatVLLMAccepts(t *testing.T) {
	for _, rest := range []string{
		`"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}, {"input_audio": {}}, {"type": "thinking", "thinking": "t"}]}]`,
		`"messages": [{"role": "assistant", "content": null, "tool_calls": null, "reasoning": null, "reasoning_content": "r"}]`,
		`"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]`,
		`"messages": [{"role": "user", "content": "a"}], "tools": [{"function": {"name": "f", "description": null, "parameters": null, "strict": true}}]`,
		`"messages": [{"role": "user", "content": "a"}], "documents": [{"title": "t"}], "chat_template_kwargs": {"documents": 5}`,
		`"messages": [{"role": "user", "content": "a"}], "chat_template_kwargs": {"x": ` + strings.Repeat("[", MaxNesting-2) + strings.Repeat("]", MaxNesting-2) + `}`,
	} {
		if _, err := DecodeChat([]byte(`{"model": "m", ` + rest + `}`)); err != nil {
			t.Errorf("%s: %v", rest, err)
		}
	}
}
