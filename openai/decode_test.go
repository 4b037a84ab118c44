package openai

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// A chat body as the OpenAI Python SDK sends it to vLLM, with vLLM's
// extension fields: every field the routing path reads is decoded, the
// messages keep every key and number as sent, and the sampling
// parameters stay only in Raw.
func TestDecodeChat_KeepsTheFieldsATemplateSees(t *testing.T) {
	body := `{
  "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}], "name": "ann"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
    {"role": "tool", "content": "42", "tool_call_id": "call_1"}
  ],
  "model": "Qwen/Qwen3-8B",
  "max_completion_tokens": 64,
  "max_tokens": 8,
  "stream": true,
  "stream_options": {"include_usage": true},
  "temperature": 0.7,
  "top_p": 0.95,
  "seed": 7,
  "add_generation_prompt": true,
  "chat_template_kwargs": {"enable_thinking": false, "budget": 1.5},
  "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
  "cache_salt": "tenant-a"
}`
	r, err := DecodeChat([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != KindChat || r.Model != "Qwen/Qwen3-8B" || !r.Stream || !r.IncludeUsage || r.MaxTokens != 64 || r.N != 1 {
		t.Fatalf("decoded %+v", r)
	}
	if !r.AddGenerationPrompt || r.ContinueFinalMessage || r.AddSpecialTokens || r.CacheSalt != "tenant-a" {
		t.Fatalf("template flags %v %v %v, salt %q", r.AddGenerationPrompt, r.ContinueFinalMessage, r.AddSpecialTokens, r.CacheSalt)
	}
	name, _ := r.Messages[1].Get("name")
	id, _ := r.Messages[3].Get("tool_call_id")
	if len(r.Messages) != 4 || name != "ann" || id != "call_1" || !slices.Equal(r.Messages[1].Keys(), []string{"role", "content", "name"}) {
		t.Fatalf("messages %v", r.Messages)
	}
	think, _ := r.ChatTemplateKwargs.Get("enable_thinking")
	budget, _ := r.ChatTemplateKwargs.Get("budget")
	if think != false || budget != json.Number("1.5") {
		t.Fatalf("chat_template_kwargs %v (numbers must stay json.Number)", r.ChatTemplateKwargs)
	}
	if typ, _ := r.Tools[0].Get("type"); len(r.Tools) != 1 || typ != "function" {
		t.Fatalf("tools %v", r.Tools)
	}
	if string(r.Raw["temperature"]) != "0.7" {
		t.Fatalf("raw temperature %q", r.Raw["temperature"])
	}
	if text, mm := MessageText(r.Messages[1]); text != "Hi\nthere" || mm {
		t.Fatalf("MessageText of text parts = %q, %v; want \"Hi\\nthere\", false", text, mm)
	}
}

// The four prompt forms of vLLM's CompletionRequest decode to the form
// sent; add_special_tokens defaults to true for completions.
func TestDecodeCompletion_PromptForms(t *testing.T) {
	cases := []struct {
		prompt string
		texts  []string
		ids    [][]uint32
		list   bool
	}{
		{`"Once upon a time"`, []string{"Once upon a time"}, nil, false},
		{`["a", "b"]`, []string{"a", "b"}, nil, true},
		{`[1, 2, 3]`, nil, [][]uint32{{1, 2, 3}}, false},
		{`[[1, 2], [4294967295]]`, nil, [][]uint32{{1, 2}, {4294967295}}, true},
	}
	for _, tc := range cases {
		r, err := DecodeCompletion([]byte(`{"model": "m", "prompt": ` + tc.prompt + `, "max_tokens": 5, "echo": false, "logprobs": null}`))
		if err != nil {
			t.Fatalf("prompt %s: %v", tc.prompt, err)
		}
		if !slices.Equal(r.Prompt.Texts, tc.texts) || !slices.EqualFunc(r.Prompt.TokenIDs, tc.ids, slices.Equal) || r.Prompt.IsList != tc.list {
			t.Errorf("prompt %s decoded %+v", tc.prompt, r.Prompt)
		}
		if !r.AddSpecialTokens || r.MaxTokens != 5 || r.Stream {
			t.Errorf("prompt %s: add_special_tokens %v, max_tokens %d, stream %v", tc.prompt, r.AddSpecialTokens, r.MaxTokens, r.Stream)
		}
	}
	r, err := DecodeCompletion([]byte(`{"model": "m", "prompt": "x"}`))
	if err != nil || r.MaxTokens != 0 || r.MaxTokensOr(DefaultCompletionMaxTokens) != 16 {
		t.Fatalf("absent max_tokens: %v, %d", err, r.MaxTokens)
	}
}

// Bad input is refused with a 400 naming the field as the client wrote it
// (nested paths included) and the limit.
func TestDecode_ErrorsNameTheFieldAndTheLimit(t *testing.T) {
	cases := []struct {
		kind        Kind
		body        string
		param, text string
	}{
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}`, "", "malformed JSON"},
		{KindChat, `[1]`, "", "not a JSON object"},
		{KindChat, ``, "", "empty request body"},
		{KindChat, `{"messages": [{"role": "user", "content": "a"}]}`, "model", "required"},
		{KindChat, `{"model": 3, "messages": []}`, "model", "expected a string, got 3"},
		{KindChat, `{"model": "m"}`, "messages", "required"},
		{KindChat, `{"model": "m", "messages": []}`, "messages", "at least one"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "user", "content": 5}]}`, "messages[2].content", "got 5"},
		{KindChat, `{"model": "m", "messages": [{"content": "a"}]}`, "messages[0].role", "required"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]}`, "messages[0].content[0].text", "string text"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": null}]}]}`, "messages[0].content[0].text", "string text, got null"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": [7]}]}`, "messages[0].content[0]", "content part"},
		{KindChat, `{"model": "m", "messages": ["hi"]}`, "messages[0]", "message object"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}], "max_tokens": 0}`, "max_tokens", "at least 1, got 0"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}], "max_completion_tokens": -3}`, "max_completion_tokens", "at least 1, got -3"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}], "max_tokens": "8"}`, "max_tokens", "expected an integer"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}], "max_tokens": 1.5}`, "max_tokens", "expected an integer, got 1.5"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}], "n": 0}`, "n", "at least 1, got 0"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}], "stream_options": {"include_usage": true}}`, "stream_options", "only allowed with \"stream\": true"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}], "stream": "yes"}`, "stream", "expected true or false"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}], "stream": true, "stream_options": {"include_usage": 1}}`, "stream_options.include_usage", "expected true or false"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}], "add_generation_prompt": true, "continue_final_message": true}`, "continue_final_message", "cannot be true together"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}], "cache_salt": ""}`, "cache_salt", "non-empty string"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}], "chat_template_kwargs": []}`, "chat_template_kwargs", "expected an object"},
		{KindChat, `{"model": "m", "messages": [{"role": "user", "content": "a"}], "tools": [1]}`, "tools[0]", "expected an object"},
		{KindCompletion, `{"model": "m"}`, "prompt", "required"},
		{KindCompletion, `{"model": "m", "prompt": []}`, "prompt", "empty list"},
		{KindCompletion, `{"model": "m", "prompt": [1, -2]}`, "prompt[1]", "integer 0 to 4294967295"},
		{KindCompletion, `{"model": "m", "prompt": [1, 4294967296]}`, "prompt[1]", "integer 0 to 4294967295"},
		{KindCompletion, `{"model": "m", "prompt": [[1], [2, "x"]]}`, "prompt[1][1]", "token id"},
		{KindCompletion, `{"model": "m", "prompt": [[1], []]}`, "prompt[1]", "empty list"},
		{KindCompletion, `{"model": "m", "prompt": ["a", 2]}`, "prompt[1]", "expected a string"},
		{KindCompletion, `{"model": "m", "prompt": {"a": 1}}`, "prompt", "got an object"},
		{KindCompletion, `{"model": "m", "prompt_embeds": "AAAA"}`, "prompt_embeds", "not supported"},
	}
	for _, tc := range cases {
		_, err := Decode(tc.kind, []byte(tc.body))
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: error %v, want *Error", tc.body, err)
			continue
		}
		if e.Status != http.StatusBadRequest || e.Param != tc.param || !strings.Contains(e.Message, tc.text) {
			t.Errorf("%s:\n got  %d %q %q\n want 400 %q containing %q", tc.body, e.Status, e.Param, e.Message, tc.param, tc.text)
		}
	}
}

// vLLM's defaults and its own spellings: stream_options without
// include_usage means true, an explicit null false; continue_final_message
// with add_generation_prompt left to its default is allowed; integral
// floats are integers, as pydantic reads them.
func TestDecode_DefaultsAsVLLMReadsThem(t *testing.T) {
	msgs := `"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]`
	r, err := DecodeChat([]byte(`{"model": "m", ` + msgs + `, "stream": true, "stream_options": {}}`))
	if err != nil || !r.IncludeUsage {
		t.Fatalf("stream_options {}: %v, include_usage %v; want true", err, r.IncludeUsage)
	}
	r, err = DecodeChat([]byte(`{"model": "m", ` + msgs + `, "stream": true, "stream_options": {"include_usage": null}}`))
	if err != nil || r.IncludeUsage {
		t.Fatalf("include_usage null: %v, %v; want false", err, r.IncludeUsage)
	}
	for _, agp := range []string{`, "add_generation_prompt": false`, ""} {
		r, err = DecodeChat([]byte(`{"model": "m", ` + msgs + `, "continue_final_message": true` + agp + `}`))
		if err != nil || !r.ContinueFinalMessage || r.AddGenerationPrompt {
			t.Fatalf("continue_final_message%s: %v, %v, %v; want add_generation_prompt false", agp, err, r.ContinueFinalMessage, r.AddGenerationPrompt)
		}
	}
	r, err = DecodeChat([]byte(`{"model": "m", ` + msgs + `, "max_tokens": 32.0, "n": 1, "stream": null}`))
	if err != nil || r.MaxTokens != 32 || r.Stream {
		t.Fatalf("max_tokens 32.0: %v, %d", err, r.MaxTokens)
	}
	if r.AddGenerationPrompt != true || r.AddSpecialTokens != false {
		t.Fatalf("chat defaults: add_generation_prompt %v, add_special_tokens %v; want true, false", r.AddGenerationPrompt, r.AddSpecialTokens)
	}
}

// MessageText joins the text-like parts and flags the parts the text does
// not carry (an image, and an untyped part with a media field).
func TestMessageText_FlagsMultimodalParts(t *testing.T) {
	r, err := DecodeChat([]byte(`{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}, "plain", {"type": "refusal", "refusal": "no"}, {"image_url": "x"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if text, mm := MessageText(r.Messages[0]); text != "see\nplain\nno" || !mm {
		t.Fatalf("MessageText = %q, %v; want \"see\\nplain\\nno\", true", text, mm)
	}
	if text, mm := MessageText(NewObject("role", "assistant", "content", nil)); text != "" || mm {
		t.Fatalf("null content: %q, %v", text, mm)
	}
}

// max_completion_tokens is a chat field: a completion request ignores it,
// as vLLM's CompletionRequest does.
func TestDecodeCompletion_IgnoresMaxCompletionTokens(t *testing.T) {
	r, err := DecodeCompletion([]byte(`{"model": "m", "prompt": "x", "max_tokens": 4, "max_completion_tokens": 0}`))
	if err != nil || r.MaxTokens != 4 {
		t.Fatalf("%v, max tokens %d; want 4", err, r.MaxTokens)
	}
}

// n and max_tokens are accepted as vLLM's SamplingParams accepts them:
// any n ≥ 1 (several choices), and a max_tokens beyond any context (the
// engine answers it, knowing the prompt's length).
func TestDecode_NAndMaxTokensAsVLLMAcceptsThem(t *testing.T) {
	r, err := DecodeChat([]byte(`{"model": "m", "messages": [{"role": "user", "content": "a"}], "n": 3, "max_tokens": 100000000}`))
	if err != nil || r.N != 3 || r.MaxTokens != 100000000 {
		t.Fatalf("n 3, max_tokens 1e8: err %v, N %d, MaxTokens %d", err, r.N, r.MaxTokens)
	}
	r, err = DecodeCompletion([]byte(`{"model": "m", "prompt": "a"}`))
	if err != nil || r.N != 1 {
		t.Fatalf("no n: err %v, N %d; want 1", err, r.N)
	}
}

// A client's value echoed in an error is cut to 256 bytes, with its
// length named.
func TestClip_CutsLongValuesAtARuneBoundary(t *testing.T) {
	if got := Clip("qwen3"); got != "qwen3" {
		t.Errorf("short: %q", got)
	}
	long := strings.Repeat("é", 1<<19) // 1 MiB, 2 bytes a rune
	got := Clip(long)
	if want := strings.Repeat("é", 128) + "… (1048576 bytes)"; got != want {
		t.Errorf("1 MiB name clipped to %d bytes %q…, want %q", len(got), got[:20], want[:20])
	}
}
