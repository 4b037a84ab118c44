package prompt

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/internal/fixtures"
	"github.com/inference-cache/inference-cache/openai"
)

// goldenRenders is chattemplate/testdata/chat_template_renders.json:
// reference renders by Jinja2 in transformers' environment on a fixed
// clock.
type goldenRenders struct {
	Clock     string `json:"strftime_now_clock"`
	Templates []struct {
		Name  string `json:"name"`
		Cases []struct {
			Name                string          `json:"name"`
			Messages            json.RawMessage `json:"messages"`
			Tools               json.RawMessage `json:"tools"`
			Kwargs              json.RawMessage `json:"kwargs"`
			AddGenerationPrompt *bool           `json:"add_generation_prompt"`
			Rendered            *string         `json:"rendered"`
			Error               *string         `json:"error"`
		} `json:"cases"`
	} `json:"templates"`
}

// vectors is tokenizer/testdata/tokenizer_vectors.json: ids by the
// reference Hugging Face tokenizers.
type vectors struct {
	Tokenizers []struct {
		Name  string `json:"name"`
		Cases []struct {
			Text             string   `json:"text"`
			AddSpecialTokens bool     `json:"add_special_tokens"`
			IDs              []uint32 `json:"ids"`
		} `json:"cases"`
	} `json:"tokenizers"`
}

func readJSON(t testing.TB, v any, elem ...string) {
	t.Helper()
	b, err := os.ReadFile(fixtures.Path(t, elem...))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// referenceIDs returns the reference ids of text for tokenizer name.
func referenceIDs(t *testing.T, name, text string, special bool) []uint32 {
	t.Helper()
	var v vectors
	readJSON(t, &v, "tokenizer", "testdata", "tokenizer_vectors.json")
	for _, tk := range v.Tokenizers {
		for _, c := range tk.Cases {
			if tk.Name == name && c.Text == text && c.AddSpecialTokens == special {
				return c.IDs
			}
		}
	}
	t.Fatalf("no reference vector for %s %q (special tokens %t)", name, text, special)
	return nil
}

func decode(t testing.TB, kind openai.Kind, body string) *openai.Request {
	t.Helper()
	req, err := openai.Decode(kind, []byte(body))
	if err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return req
}

// addModel makes a model directory named name in dir: the tiny-sp
// reference tokenizer and the given chat_template.jinja ("" = none).
func addModel(t testing.TB, dir, name, template string) {
	t.Helper()
	md := filepath.Join(dir, name)
	if err := os.MkdirAll(md, 0o755); err != nil {
		t.Fatal(err)
	}
	src := fixtures.Path(t, "tokenizer", "testdata", "tiny-sp")
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(md, f)); err != nil {
			t.Fatal(err)
		}
	}
	if template != "" {
		if err := os.WriteFile(filepath.Join(md, "chat_template.jinja"), []byte(template), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Every golden case renders byte for byte through the OpenAI decoding the
// proxy and the sim engine use.
func TestTokens_GoldenChatRendersByteForByte(t *testing.T) {
	var g goldenRenders
	readJSON(t, &g, "chattemplate", "testdata", "chat_template_renders.json")
	now, err := time.Parse(time.RFC3339, g.Clock)
	if err != nil {
		t.Fatal(err)
	}
	reg := New(fixtures.ModelsDir(t, "qwen3"), Options{Now: func() time.Time { return now }})
	n := 0
	for _, gt := range g.Templates {
		for _, c := range gt.Cases {
			n++
			body := map[string]json.RawMessage{"model": json.RawMessage(`"qwen3"`), "messages": c.Messages}
			if c.Tools != nil {
				body["tools"] = c.Tools
			}
			if c.Kwargs != nil {
				body["chat_template_kwargs"] = c.Kwargs
			}
			if c.AddGenerationPrompt != nil {
				body["add_generation_prompt"], _ = json.Marshal(*c.AddGenerationPrompt)
			}
			raw, _ := json.Marshal(body)
			p, err := reg.Tokens(context.Background(), decode(t, openai.KindChat, string(raw)))
			switch {
			case c.Rendered != nil:
				if err != nil {
					t.Errorf("%s: %v", c.Name, err)
				} else if p.Text != *c.Rendered {
					t.Errorf("%s: render differs\n got: %q\nwant: %q", c.Name, p.Text, *c.Rendered)
				} else if len(p.TokenIDs) == 0 || p.NoKey != nil {
					t.Errorf("%s: no token ids (%v)", c.Name, p.NoKey)
				}
			case c.Error != nil:
				var oe *openai.Error
				if !errors.As(err, &oe) || oe.Status != http.StatusBadRequest || oe.Message != *c.Error {
					t.Errorf("%s: got %v, want a 400 with the template's message %q", c.Name, err, *c.Error)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no golden cases")
	}
}

// A chat prompt is tokenized without added special tokens: its ids are the
// reference tokenizer's for the rendered text.
func TestTokens_ChatIDsAreTheReferenceTokenizers(t *testing.T) {
	const rendered = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
	want := referenceIDs(t, "qwen3", rendered, false)
	reg := New(fixtures.ModelsDir(t, "qwen3"), Options{})
	p, err := reg.Tokens(context.Background(), decode(t, openai.KindChat, `{"model": "qwen3", "messages": [{"role": "user", "content": "What is 2+2?"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Text != rendered || !slices.Equal(p.TokenIDs, want) {
		t.Fatalf("got %q %v\nwant %q %v", p.Text, p.TokenIDs, rendered, want)
	}
	// Text parts are joined as vLLM joins them for a string-content
	// template: the same prompt.
	p2, err := reg.Tokens(context.Background(), decode(t, openai.KindChat,
		`{"model": "qwen3", "messages": [{"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "2+2?"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p2.Text != "<|im_start|>user\nWhat is\n2+2?<|im_end|>\n<|im_start|>assistant\n" {
		t.Fatalf("text parts rendered as %q", p2.Text)
	}
}

// A completion's prompt string gets the tokenizer's special tokens (vLLM's
// add_special_tokens default for completions) unless the request turns
// them off; a token-id prompt is the prefill as it is.
func TestTokens_CompletionSpecialTokensAndTokenIDs(t *testing.T) {
	reg := New(fixtures.ModelsDir(t, "mistral-like"), Options{})
	ctx := context.Background()
	p, err := reg.Tokens(ctx, decode(t, openai.KindCompletion, `{"model": "mistral-like", "prompt": "Hello world"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := referenceIDs(t, "mistral-like", "Hello world", true); !slices.Equal(p.TokenIDs, want) || p.Text != "Hello world" {
		t.Fatalf("with special tokens: %v, want %v", p.TokenIDs, want)
	}
	if p.TokenIDs[0] != 1 {
		t.Fatalf("ids %v do not start with <s> (id 1)", p.TokenIDs)
	}
	off, err := reg.Tokens(ctx, decode(t, openai.KindCompletion, `{"model": "mistral-like", "prompt": "Hello world", "add_special_tokens": false}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(off.TokenIDs, p.TokenIDs[1:]) {
		t.Fatalf("add_special_tokens false: %v, want the ids without <s>: %v", off.TokenIDs, p.TokenIDs[1:])
	}
	ids, err := reg.Tokens(ctx, decode(t, openai.KindCompletion, `{"model": "nowhere", "prompt": [5, 6, 7], "cache_salt": "s1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !ids.TokenPrompt || !slices.Equal(ids.TokenIDs, []uint32{5, 6, 7}) || ids.Text != "" || ids.CacheSalt != "s1" {
		t.Fatalf("token-id prompt: %+v", ids)
	}
	batch, err := reg.Tokens(ctx, decode(t, openai.KindCompletion, `{"model": "mistral-like", "prompt": ["Hello world", "other"]}`))
	if err != nil || !slices.Equal(batch.TokenIDs, p.TokenIDs) {
		t.Fatalf("a batch is keyed by its first prompt: %v %v", batch.TokenIDs, err)
	}
}

func TestTokens_MultimodalHasNoKey(t *testing.T) {
	reg := New(fixtures.ModelsDir(t, "qwen3"), Options{})
	p, err := reg.Tokens(context.Background(), decode(t, openai.KindChat,
		`{"model": "qwen3", "cache_salt": "x", "messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "http://x/cat.png"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(p.NoKey, ErrMultimodal) || p.TokenIDs != nil || p.CacheSalt != "x" {
		t.Fatalf("got %+v, want no key (ErrMultimodal) and no ids", p)
	}
}

// strftime_now reads the injected clock, and a chat_template.jinja beside
// the tokenizer is the model's template.
func TestTokens_StrftimeNowReadsTheInjectedClock(t *testing.T) {
	dir := t.TempDir()
	addModel(t, dir, "dated", "{{ strftime_now('%d %b %Y') }}|{% for m in messages %}{{ m.content }}{% endfor %}")
	now := time.Date(2026, 1, 15, 10, 0, 0, 0, time.UTC)
	reg := New(dir, Options{Now: func() time.Time { return now }})
	p, err := reg.Tokens(context.Background(), decode(t, openai.KindChat, `{"model": "dated", "messages": [{"role": "user", "content": "hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Text != "15 Jan 2026|hi" {
		t.Fatalf("rendered %q, want the injected date", p.Text)
	}
}

func TestTokens_ErrorsNameTheFieldOrTheModel(t *testing.T) {
	dir := t.TempDir()
	addModel(t, dir, "plain", "")
	addModel(t, dir, "strict", "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with a user message') }}{% endif %}{{ messages[0].content }}")
	addModel(t, dir, "broken", "{% for m in messages %}")
	reg := New(dir, Options{MaxTokens: 8})
	cases := []struct {
		name         string
		kind         openai.Kind
		body         string
		status       int
		param, inMsg string
		sentinel     error
	}{
		{"template raises", openai.KindChat, `{"model": "strict", "messages": [{"role": "system", "content": "x"}]}`,
			400, "", "Conversation must start with a user message", nil},
		{"request chat_template", openai.KindChat, `{"model": "strict", "chat_template": "{{ 1 }}", "messages": [{"role": "user", "content": "x"}]}`,
			400, "chat_template", "--trust-request-chat-template", nil},
		{"kwargs chat_template", openai.KindChat, `{"model": "strict", "chat_template_kwargs": {"chat_template": "x"}, "messages": [{"role": "user", "content": "x"}]}`,
			400, "chat_template_kwargs.chat_template", "--trust-request-chat-template", nil},
		{"no chat template", openai.KindChat, `{"model": "plain", "messages": [{"role": "user", "content": "x"}]}`,
			400, "", "default chat template is no longer allowed", nil},
		{"over the token cap", openai.KindCompletion, `{"model": "plain", "prompt": "` + strings.Repeat("hello ", 50) + `"}`,
			400, "prompt", "more than 8 tokens", nil},
		{"chat over the token cap", openai.KindChat, `{"model": "strict", "messages": [{"role": "user", "content": "` + strings.Repeat("hello ", 50) + `"}]}`,
			400, "messages", "more than 8 tokens", nil},
		{"unknown model", openai.KindCompletion, `{"model": "nope", "prompt": "x"}`, 0, "", "", ErrUnknownModel},
		{"model outside the directory", openai.KindCompletion, `{"model": "../plain", "prompt": "x"}`, 0, "", "", ErrUnknownModel},
		{"template does not compile", openai.KindChat, `{"model": "broken", "messages": [{"role": "user", "content": "x"}]}`, 0, "", "", ErrModelFiles},
	}
	for _, c := range cases {
		p, err := reg.Tokens(context.Background(), decode(t, c.kind, c.body))
		if p.TokenIDs != nil {
			t.Errorf("%s: ids %v with an error", c.name, p.TokenIDs)
		}
		if c.sentinel != nil {
			if !errors.Is(err, c.sentinel) {
				t.Errorf("%s: %v, want %v", c.name, err, c.sentinel)
			}
			continue
		}
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.Status != c.status || oe.Param != c.param || !strings.Contains(oe.Message, c.inMsg) {
			t.Errorf("%s: %#v, want status %d param %q message with %q", c.name, err, c.status, c.param, c.inMsg)
		}
	}
	if _, err := New("", Options{}).Tokens(context.Background(), decode(t, openai.KindCompletion, `{"model": "m", "prompt": "x"}`)); !errors.Is(err, ErrNoModelsDir) {
		t.Errorf("no models directory: %v", err)
	}
}

// A model's files are read once, however many requests render
// concurrently, and every request gets the same prompt.
func TestTokens_ConcurrentRequestsShareOneLoad(t *testing.T) {
	dir := t.TempDir()
	addModel(t, dir, "m", "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
	reg := New(dir, Options{})
	req := decode(t, openai.KindChat, `{"model": "m", "messages": [{"role": "user", "content": "hello world"}]}`)
	var wg sync.WaitGroup
	got := make([]Prompt, 8)
	errs := make([]error, 8)
	for i := range got {
		wg.Go(func() { got[i], errs[i] = reg.Tokens(context.Background(), req) })
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil || got[i].Text != "<user>hello world" || !slices.Equal(got[i].TokenIDs, got[0].TokenIDs) {
			t.Fatalf("request %d: %+v %v", i, got[i], errs[i])
		}
	}
	if n := reg.toks.Loads(); n != 1 {
		t.Fatalf("tokenizer loaded %d times, want once", n)
	}
}

func TestPreload_LoadsEveryModelAndListsThem(t *testing.T) {
	dir := fixtures.ModelsDir(t, "qwen3", "mistral-like")
	reg := New(dir, Options{})
	ms, err := reg.Models()
	if err != nil || !slices.Equal(ms, []string{"mistral-like", "qwen3"}) {
		t.Fatalf("models %v %v", ms, err)
	}
	if err := reg.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := reg.toks.Loads(); n != 2 {
		t.Fatalf("%d tokenizer loads after Preload, want 2", n)
	}
	if _, err := reg.Tokens(context.Background(), decode(t, openai.KindCompletion, `{"model": "qwen3", "prompt": "x"}`)); err != nil || reg.toks.Loads() != 2 {
		t.Fatalf("a preloaded model was loaded again (%d loads, %v)", reg.toks.Loads(), err)
	}
	dir2 := t.TempDir()
	addModel(t, dir2, "broken", "{% if %}")
	if err := New(dir2, Options{}).Preload(context.Background()); !errors.Is(err, ErrModelFiles) {
		t.Fatalf("Preload of a broken template: %v, want ErrModelFiles", err)
	}
}
