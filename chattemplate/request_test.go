package chattemplate

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/openai"
)

// The expected prompts below were rendered by the reference Jinja2 in
// transformers' environment from the conversation vLLM builds for each
// request (mapped by hand following vllm/entrypoints/chat_utils.py).

var testNow = time.Date(2026, 1, 15, 10, 0, 0, 0, time.UTC)

func qwen3(t testing.TB) *Template {
	t.Helper()
	tmpl, err := Load(filepath.Join("testdata", "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// parseRequest decodes a chat body (without its model, which rendering
// does not read) as a gateway does.
func parseRequest(t testing.TB, body string) *openai.Request {
	t.Helper()
	req, err := openai.DecodeChat([]byte(`{"model":"m",` + strings.TrimPrefix(body, "{")))
	if err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	return req
}

func render(t testing.TB, tmpl *Template, body string) string {
	t.Helper()
	out, err := tmpl.Render(parseRequest(t, body), testNow)
	if err != nil {
		t.Fatalf("rendering %s: %v", body, err)
	}
	return out
}

func TestRender_TextPartsJoinWithNewlineForStringTemplates(t *testing.T) {
	tmpl := qwen3(t)
	if f, _ := tmpl.ContentFormat(false); f != ContentString {
		t.Fatalf("qwen3 content format = %v; want string", f)
	}
	got := render(t, tmpl, `{"messages":[{"role":"user","content":[{"type":"text","text":"first part"},"second part"]}]}`)
	want := "<|im_start|>user\nfirst part\nsecond part<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	got = render(t, tmpl, `{"messages":[{"role":"user","content":[{"type":"input_text","text":"first part\nsecond part"}]}]}`)
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestRender_MultimodalPartsGiveErrMultimodal(t *testing.T) {
	tmpl := qwen3(t)
	for _, part := range []string{
		`{"type":"image_url","image_url":{"url":"http://x/a.png"}}`,
		`{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}`,
		`{"type":"video_url","video_url":{"url":"http://x/v.mp4"}}`,
		`{"image_url":"http://x/a.png"}`,
	} {
		_, err := tmpl.Render(parseRequest(t, `{"messages":[{"role":"user","content":[{"type":"text","text":"look"},`+part+`]}]}`), testNow)
		if !errors.Is(err, ErrMultimodal) {
			t.Errorf("part %s: got %v; want ErrMultimodal", part, err)
		} else if !strings.Contains(err.Error(), "messages[0].content[1]") {
			t.Errorf("part %s: error %q does not name messages[0].content[1]", part, err)
		}
	}
}

func TestRender_ToolCallArgumentsParsedFromJSONStrings(t *testing.T) {
	// vLLM parses a tool call's string arguments into an object before
	// rendering (invalid JSON becomes {}), renames reasoning_content to
	// reasoning and gives the template both.
	got := render(t, qwen3(t), `{"messages":[
		{"role":"user","content":"Weather?"},
		{"role":"assistant","content":null,"reasoning_content":"need weather","tool_calls":[
			{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Zürich\", \"days\": 3}"}},
			{"id":"c2","type":"function","function":{"name":"noop","arguments":"not json"}}]},
		{"role":"tool","content":"sunny","tool_call_id":"c1"},
		{"role":"tool","content":[{"type":"text","text":"ok"}],"tool_call_id":"c2"}]}`)
	want := "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\nneed weather\n</think>\n\n" +
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": 3}}\n</tool_call>\n" +
		"<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nok\n</tool_response><|im_end|>\n" +
		"<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func TestRender_ContinueFinalMessageCutsAfterTheContent(t *testing.T) {
	tmpl := qwen3(t)
	got := render(t, tmpl, `{"messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"The answer is"}],
		"continue_final_message":true,"add_generation_prompt":false}`)
	want := "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nThe answer is"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	// add_generation_prompt left out defaults to false when continuing.
	if again := render(t, tmpl, `{"messages":[{"role":"user","content":"Q"},{"role":"assistant","content":"The answer is"}],
		"continue_final_message":true}`); again != want {
		t.Fatalf("without add_generation_prompt: got %q\nwant %q", again, want)
	}

	// A template that trims the content trims the tag's space too: the
	// cut then drops the trailing whitespace as transformers does.
	trim, err := New(`{% for m in messages %}[{{ m.content|trim }}]{% endfor %}`, SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	got = render(t, trim, `{"messages":[{"role":"assistant","content":"Hello  "}],"continue_final_message":true}`)
	if got != "[Hello" {
		t.Fatalf("trimming template: got %q; want %q", got, "[Hello")
	}

	// A template that drops the final message cannot be continued.
	drop, err := New(`{% for m in messages[:-1] %}{{ m.content }}{% endfor %}`, SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = drop.Render(parseRequest(t, `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"continue_final_message":true}`), testNow)
	if !errors.Is(err, ErrRender) {
		t.Fatalf("got %v; want ErrRender", err)
	}
}

func TestRender_ReasoningEffortSetsEnableThinkingUnlessKwargsDo(t *testing.T) {
	tmpl := qwen3(t)
	noThink := "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	plain := "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
	if got := render(t, tmpl, `{"messages":[{"role":"user","content":"Q"}],"reasoning_effort":"none"}`); got != noThink {
		t.Fatalf("reasoning_effort none: got %q; want %q", got, noThink)
	}
	if got := render(t, tmpl, `{"messages":[{"role":"user","content":"Q"}],"reasoning_effort":"high"}`); got != plain {
		t.Fatalf("reasoning_effort high: got %q; want %q", got, plain)
	}
	if got := render(t, tmpl, `{"messages":[{"role":"user","content":"Q"}],"reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true}}`); got != plain {
		t.Fatalf("kwargs enable_thinking wins: got %q; want %q", got, plain)
	}
}

func TestRender_ToolsNormalizedAsVLLMDumpsThem(t *testing.T) {
	// No description becomes "description": null; unknown fields go; the
	// number kinds stay (0.0 a float, 10 an int).
	got := render(t, qwen3(t), `{"messages":[{"role":"user","content":"Q"}],"tools":[
		{"function":{"parameters":{"type":"object","properties":{"n":{"type":"number","minimum":0.0,"maximum":10}}},"name":"f","x-extra":1},"extra":true}]}`)
	want := "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
		`{"type": "function", "function": {"name": "f", "description": null, "parameters": {"type": "object", "properties": {"n": {"type": "number", "minimum": 0.0, "maximum": 10}}}}}` +
		"\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
		"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func TestRender_ConversationKeepsOnlyTheFieldsVLLMKeeps(t *testing.T) {
	tmpl, err := New(`{% for m in messages %}{{ m|tojson }};{% endfor %}`, SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	got := render(t, tmpl, `{"messages":[
		{"content":"hi","role":"user","name":"ann","foo":1,"reasoning":"dropped for users"},
		{"role":"assistant","content":"a","tool_calls":[],"reasoning":"r"},
		{"role":"tool","content":"t","tool_call_id":null,"name":5},
		{"role":"developer","content":"d"}]}`)
	want := `{"role": "user", "content": "hi", "name": "ann"};` +
		`{"role": "assistant", "content": "a", "reasoning": "r", "reasoning_content": "r"};` +
		`{"role": "tool", "content": "t", "tool_call_id": null};` +
		`{"role": "developer", "content": "d", "tools": null};`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestRender_OpenAIContentFormatKeepsParts(t *testing.T) {
	tmpl, err := New(`{% for message in messages %}{% for part in message['content'] %}<{{ part.type }}:{{ part.text }}>{% endfor %}{% endfor %}`, SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := tmpl.ContentFormat(false); f != ContentOpenAI {
		t.Fatalf("content format = %v; want openai", f)
	}
	got := render(t, tmpl, `{"messages":[{"role":"user","content":"hello"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"refusal","refusal":"b"}]}]}`)
	if want := "<text:hello><text:a><text:b>"; got != want {
		t.Fatalf("got %q; want %q", got, want)
	}
}

func TestDetectContentFormat_FollowsVLLM(t *testing.T) {
	cases := []struct {
		src  string
		want ContentFormat
	}{
		{`{% for m in messages %}{{ m.content }}{% endfor %}`, ContentString},
		{`{% for m in messages %}{% for c in m.content %}{{ c.text }}{% endfor %}{% endfor %}`, ContentOpenAI},
		{`{%- set loop_messages = messages[1:] %}{%- for message in loop_messages %}{%- for c in message["content"] | selectattr("type", "equalto", "text") %}{{ c.text }}{% endfor %}{% endfor %}`, ContentOpenAI},
		{`{% set a = messages %}{% set b = a|list %}{% for m in b if m.role != "system" %}{% for c in m.content %}{% endfor %}{% endfor %}`, ContentOpenAI},
		{`{% for m in other %}{% for c in m.content %}{% endfor %}{% endfor %}`, ContentString},
		{`{% for m in messages %}{% for c in m.tool_calls %}{% endfor %}{% endfor %}`, ContentString},
		// vLLM's walk fails on a namespace attribute set from messages
		// and falls back to string.
		{`{% set ns.m = messages %}{% for m in messages %}{% for c in m.content %}{% endfor %}{% endfor %}`, ContentString},
	}
	for _, c := range cases {
		if got := detectContentFormat(c.src); got != c.want {
			t.Errorf("%s: got %v; want %v", c.src, got, c.want)
		}
	}
}

func TestRender_DoesNotChangeTheRequest(t *testing.T) {
	// A template may change its lists and dicts in place; the next render
	// of the same request must not see it.
	tmpl, err := New(`{% set _ = messages[0].update({'content': 'changed'}) %}{{ messages[0].content }}|{{ tools[0].function.name }}`, SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	req := parseRequest(t, `{"messages":[{"role":"user","content":"orig"}],"tools":[{"type":"function","function":{"name":"f"}}]}`)
	for range 2 {
		got, err := tmpl.Render(req, testNow)
		if err != nil {
			t.Fatal(err)
		}
		if got != "changed|f" {
			t.Fatalf("got %q", got)
		}
	}
	if c, _ := req.Messages[0].Get("content"); c != "orig" {
		t.Fatalf("request content became %v", c)
	}
}

func TestRender_EnginePanicBecomesErrRender(t *testing.T) {
	// The engine panics on a negative string repeat count.
	tmpl, err := New(`{{ 'a' * n }}`, SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(&openai.Request{Kind: openai.KindChat, ChatTemplateKwargs: openai.NewObject("n", -1)}, testNow)
	if !errors.Is(err, ErrRender) {
		t.Fatalf("got %v; want ErrRender", err)
	}
}

func TestRender_GoValuesBuildTheSameRequest(t *testing.T) {
	tmpl, err := New(`{{ messages[0].content }}|{{ tools|tojson }}|{{ opts|tojson }}`, SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	req := &openai.Request{
		Kind:     openai.KindChat,
		Messages: []*openai.Object{openai.NewObject("role", "user", "content", []any{openai.NewObject("type", "text", "text", "hi")})},
		Tools: []*openai.Object{openai.NewObject("type", "function", "function",
			openai.NewObject("name", "f", "parameters", map[string]any{"b": 1, "a": 2.5}))},
		ChatTemplateKwargs: openai.NewObject("opts", openai.NewObject("z", int64(1), "y", []any{true, nil})),
	}
	got, err := tmpl.Render(req, testNow)
	if err != nil {
		t.Fatal(err)
	}
	want := `hi|[{"type": "function", "function": {"name": "f", "description": null, "parameters": {"a": 2.5, "b": 1}}}]|{"z": 1, "y": [true, null]}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// A cycle of Go values (which no decoded request holds) is cut at
// openai.MaxNesting levels instead of exhausting the stack.
func TestRender_GoValueCycleIsCut(t *testing.T) {
	cycle := []any{nil}
	cycle[0] = cycle
	tmpl, err := New("x{{ c|length }}", SpecialTokens{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(&openai.Request{Kind: openai.KindChat, ChatTemplateKwargs: openai.NewObject("c", cycle)}, testNow)
	if err != nil || got != "x1" {
		t.Fatalf("got %q, %v; want x1", got, err)
	}
}
