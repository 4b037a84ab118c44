package chattemplate

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/inference-cache/inference-cache/openai"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoad_SpecialTokensAsStringsAndAddedTokenObjects(t *testing.T) {
	dir := writeFiles(t, map[string]string{"tokenizer_config.json": `{
		"chat_template": "{{ bos_token }}|{{ eos_token }}|{{ unk_token is defined }}|{{ additional_special_tokens|join(',') }}",
		"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
		"eos_token": "</s>", "unk_token": null,
		"additional_special_tokens": ["<a>", {"content": "<b>"}]}`})
	tmpl, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := render(t, tmpl, `{"messages":[{"role":"user","content":"x"}]}`); got != "<s>|</s>|False|<a>,<b>" {
		t.Fatalf("got %q", got)
	}
	// special_tokens_map.json overrides the config's tokens it sets.
	if err := os.WriteFile(filepath.Join(dir, "special_tokens_map.json"), []byte(`{"eos_token": {"content": "<eos>"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if tmpl, err = Load(dir); err != nil {
		t.Fatal(err)
	}
	if got := render(t, tmpl, `{"messages":[{"role":"user","content":"x"}]}`); got != "<s>|<eos>|False|<a>,<b>" {
		t.Fatalf("with special_tokens_map.json: got %q", got)
	}
	// chat_template_kwargs override special tokens, as in transformers.
	if got := render(t, tmpl, `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"bos_token":"B"}}`); !strings.HasPrefix(got, "B|") {
		t.Fatalf("kwargs bos_token: got %q", got)
	}
}

func TestLoad_ChatTemplateJinjaFileWins(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"tokenizer_config.json": `{"chat_template": "from config"}`,
		"chat_template.jinja":   "from file\n",
	})
	tmpl, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := render(t, tmpl, `{"messages":[{"role":"user","content":"x"}]}`); got != "from file" {
		t.Fatalf("got %q", got)
	}
}

func TestLoad_NamedTemplatesPickToolUseForToolRequests(t *testing.T) {
	dir := writeFiles(t, map[string]string{"tokenizer_config.json": `{"chat_template": [
		{"name": "default", "template": "plain"}, {"name": "tool_use", "template": "tools:{{ tools|length }}"}]}`})
	tmpl, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := tmpl.Names()
	sort.Strings(names)
	if strings.Join(names, ",") != "default,tool_use" {
		t.Fatalf("names %v", names)
	}
	if got := render(t, tmpl, `{"messages":[{"role":"user","content":"x"}]}`); got != "plain" {
		t.Fatalf("without tools: got %q", got)
	}
	if got := render(t, tmpl, `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`); got != "tools:1" {
		t.Fatalf("with tools: got %q", got)
	}

	extra := writeFiles(t, map[string]string{
		"chat_template.jinja":                      "main",
		"additional_chat_templates/tool_use.jinja": "extra",
		"additional_chat_templates/README.md":      "not a template",
		"additional_chat_templates/rag_only.jinja": "rag",
		"tokenizer_config.json":                    `{}`,
	})
	if tmpl, err = Load(extra); err != nil {
		t.Fatal(err)
	}
	if got := render(t, tmpl, `{"messages":[{"role":"user","content":"x"}]}`); got != "main" {
		t.Fatalf("additional templates, no tools: got %q", got)
	}
	if got := render(t, tmpl, `{"messages":[{"role":"user","content":"x"}],"tools":[]}`); got != "extra" {
		t.Fatalf("additional templates, tools: got %q", got)
	}

	noDefault := writeFiles(t, map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "rag", "template": "x"}]}`})
	if tmpl, err = Load(noDefault); err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(&openai.Request{Kind: openai.KindChat}, testNow); !errors.Is(err, ErrNoChatTemplate) {
		t.Fatalf("no default: got %v; want ErrNoChatTemplate", err)
	}
}

func TestLoad_Failures(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  error
		say   string
	}{
		{"no template", map[string]string{"tokenizer_config.json": `{"eos_token": "x"}`}, ErrNoChatTemplate, "chat_template"},
		{"empty dir", map[string]string{}, ErrNoChatTemplate, "chat_template"},
		{"bad json", map[string]string{"tokenizer_config.json": `{`}, ErrInvalidTemplate, "tokenizer_config.json"},
		{"bad token", map[string]string{"tokenizer_config.json": `{"chat_template": "x", "eos_token": 3}`}, ErrInvalidTemplate, "eos_token"},
		{"bad list", map[string]string{"tokenizer_config.json": `{"chat_template": [{"template": "x"}]}`}, ErrInvalidTemplate, "chat_template[0].name"},
		{"bad syntax", map[string]string{"chat_template.jinja": `{% if %}`}, ErrInvalidTemplate, "chat_template.jinja"},
		{"unclosed", map[string]string{"chat_template.jinja": `{% for m in messages %}x`}, ErrInvalidTemplate, "chat_template.jinja"},
	}
	for _, c := range cases {
		_, err := Load(writeFiles(t, c.files))
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.say) {
			t.Errorf("%s: got %v; want %v mentioning %q", c.name, err, c.want, c.say)
		}
	}
}

func TestRender_ConcurrentRendersOfOneTemplate(t *testing.T) {
	g := loadGolden(t)
	tmpl := qwen3(t)
	cases := g.Templates[0].Cases
	reqs := make([]*openai.Request, len(cases))
	for i, c := range cases {
		reqs[i] = c.request(t)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 40 {
				i := (w + k) % len(cases)
				got, err := tmpl.Render(reqs[i], testNow)
				if err != nil {
					errs <- err
					return
				}
				if got != *cases[i].Rendered {
					errs <- errors.New(cases[i].Name + ": concurrent render differs")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
