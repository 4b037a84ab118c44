package main

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/inference-cache/inference-cache/fingerprint"
	"github.com/inference-cache/inference-cache/internal/fixtures"
)

func runRender(t *testing.T, stdin string, args ...string) (renderOutput, error) {
	t.Helper()
	out, err := runCLI(t, stdin, append([]string{"render"}, args...)...)
	var r renderOutput
	if err == nil {
		if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
			t.Fatalf("output %q: %v", out, jerr)
		}
	}
	return r, err
}

// Golden chat renders (reference Jinja2 in transformers' environment,
// fixed clock) come out of the command byte for byte: one case of each
// shape of request body (with or without tools, template kwargs and
// add_generation_prompt), which is what the command's wiring can get
// wrong. Each run of the command loads the model's tokenizer; packages
// chattemplate and prompt check every golden render through the library.
func TestRenderCmd_GoldenChatRenders(t *testing.T) {
	var g struct {
		Clock     string `json:"strftime_now_clock"`
		Templates []struct {
			Cases []struct {
				Name                string          `json:"name"`
				Messages            json.RawMessage `json:"messages"`
				Tools               json.RawMessage `json:"tools"`
				Kwargs              json.RawMessage `json:"kwargs"`
				AddGenerationPrompt *bool           `json:"add_generation_prompt"`
				Rendered            *string         `json:"rendered"`
			} `json:"cases"`
		} `json:"templates"`
	}
	b, err := os.ReadFile(fixtures.Path(t, "chattemplate", "testdata", "chat_template_renders.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	dir := fixtures.ModelsDir(t, "qwen3")
	n := 0
	shapes := map[[3]bool]bool{} // the body shapes rendered so far
	for _, gt := range g.Templates {
		for _, c := range gt.Cases {
			if c.Rendered == nil {
				continue
			}
			shape := [3]bool{c.Tools != nil, c.Kwargs != nil, c.AddGenerationPrompt != nil}
			if shapes[shape] {
				continue
			}
			shapes[shape] = true
			n++
			body := map[string]json.RawMessage{"messages": c.Messages}
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
			r, err := runRender(t, string(raw), "--models-dir", dir, "--model", "qwen3", "--now", g.Clock)
			if err != nil {
				t.Errorf("%s: %v", c.Name, err)
				continue
			}
			if r.Prompt == nil || *r.Prompt != *c.Rendered {
				t.Errorf("%s: prompt %v, want %q", c.Name, r.Prompt, *c.Rendered)
			}
		}
	}
	if n == 0 {
		t.Fatal("no golden renders")
	}
}

// The token ids are the reference tokenizer's for the rendered text
// (tokenizer/testdata/tokenizer_vectors.json), and the block hashes are
// the content fingerprint of those ids at --block-size.
func TestRenderCmd_TokenIDsAreTheReferenceTokenizersAndHashesTheirFingerprint(t *testing.T) {
	var v struct {
		Tokenizers []struct {
			Name  string `json:"name"`
			Cases []struct {
				Text    string   `json:"text"`
				Special bool     `json:"add_special_tokens"`
				IDs     []uint32 `json:"ids"`
			} `json:"cases"`
		} `json:"tokenizers"`
	}
	b, err := os.ReadFile(fixtures.Path(t, "tokenizer", "testdata", "tokenizer_vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	ref := func(name, text string, special bool) []uint32 {
		for _, tk := range v.Tokenizers {
			for _, c := range tk.Cases {
				if tk.Name == name && c.Text == text && c.Special == special {
					return c.IDs
				}
			}
		}
		t.Fatalf("no vector %s %q", name, text)
		return nil
	}
	dir := fixtures.ModelsDir(t)
	r, err := runRender(t, `{"model": "ignored", "messages": [{"role": "user", "content": "What is 2+2?"}]}`, "--models-dir", dir, "--model", "qwen3", "--block-size", "4")
	if err != nil {
		t.Fatal(err)
	}
	const rendered = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
	if r.Prompt == nil || *r.Prompt != rendered || !slices.Equal(r.TokenIDs, ref("qwen3", rendered, false)) || r.Model != "qwen3" {
		t.Fatalf("got %+v, want the reference ids of %q", r, rendered)
	}
	// --ids-only prints the same ids, as lookup --tokens parses them.
	idsOut, err := runCLI(t, `{"messages": [{"role": "user", "content": "What is 2+2?"}]}`, "render", "--models-dir", dir, "--model", "qwen3", "--ids-only")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := parseUints(strings.TrimSuffix(idsOut, "\n"), 32); err != nil || len(got) != len(r.TokenIDs) || !slices.EqualFunc(got, r.TokenIDs, func(a uint64, b uint32) bool { return a == uint64(b) }) {
		t.Fatalf("--ids-only printed %q (%v), want the ids %v", idsOut, err, r.TokenIDs)
	}
	want, _ := fingerprint.Compute(r.TokenIDs, 4)
	if len(r.BlockHashes) != 3 || len(want.BlockHashes) != 3 {
		t.Fatalf("15 ids at block size 4: %d hashes, want 3", len(r.BlockHashes))
	}
	for i, h := range want.BlockHashes {
		if r.BlockHashes[i] != strconv.FormatUint(h, 10) {
			t.Fatalf("block hash %d: %s, want %d", i, r.BlockHashes[i], h)
		}
	}

	// A completion's prompt string gets the special tokens (<s> here).
	c, err := runRender(t, `{"prompt": "Hello world"}`, "--models-dir", dir, "--model", "mistral-like")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.TokenIDs, ref("mistral-like", "Hello world", true)) || len(c.BlockHashes) != 0 {
		t.Fatalf("completion: %+v", c)
	}
	// Token ids as they are, prompt null, hashes salted by cache_salt.
	ids := make([]string, 32)
	for i := range ids {
		ids[i] = strconv.Itoa(i + 1)
	}
	tp, err := runRender(t, `{"prompt": [`+strings.Join(ids, ",")+`], "cache_salt": "tenant-a"}`, "--models-dir", dir, "--model", "qwen3")
	if err != nil {
		t.Fatal(err)
	}
	salted, _ := fingerprint.ComputeSalted(tp.TokenIDs, 16, "tenant-a")
	if tp.Prompt != nil || len(tp.TokenIDs) != 32 || tp.CacheSalt != "tenant-a" || len(tp.BlockHashes) != 2 || tp.BlockHashes[1] != strconv.FormatUint(salted.PrefixHash, 10) {
		t.Fatalf("token-id prompt: %+v", tp)
	}
}

func TestRenderCmd_BadInputNamesTheField(t *testing.T) {
	dir := fixtures.ModelsDir(t, "qwen3")
	ok := []string{"--models-dir", dir, "--model", "qwen3"}
	cases := []struct {
		stdin string
		args  []string
		want  string
	}{
		{`{"messages": [`, ok, "stdin: want one JSON request object"},
		{`[1, 2]`, ok, "stdin: want one JSON request object"},
		{`{"max_tokens": 3}`, ok, `"messages" (a chat request) or "prompt" (a completion request) is required`},
		{`{"prompt": "x", "messages": []}`, ok, "not both"},
		{`{"messages": [{"content": "x"}]}`, ok, "messages[0].role: required"},
		{`{"messages": "hi"}`, ok, "messages: expected a list of message objects"},
		{`{"prompt": [1, -2]}`, ok, "prompt[1]: expected a token id"},
		{`{"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}`, ok, "image, audio or video content"},
		{`{"messages": [{"role": "user", "content": "x"}], "chat_template": "{{ 1 }}"}`, ok, "chat_template: Chat template is passed with request"},
		{`{"prompt": "x"}`, []string{"--models-dir", dir, "--model", "nope"}, `--model "nope": no `},
		{`{"prompt": "x"}`, []string{"--model", "qwen3"}, "--models-dir: required"},
		{`{"prompt": "x"}`, []string{"--models-dir", dir}, "--model: required"},
		{`{"prompt": "x"}`, append(slices.Clone(ok), "--now", "yesterday"), `--now "yesterday": want an RFC 3339 time`},
		{`{"prompt": "x"}`, append(slices.Clone(ok), "--block-size", "0"), "--block-size 0: must be between 1 and 4096"},
	}
	for _, c := range cases {
		_, err := runRender(t, c.stdin, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v:\n got  %v\n want an error containing %q", c.stdin, c.args, err, c.want)
		}
	}
}
