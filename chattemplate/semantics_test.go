package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/inference-cache/inference-cache/openai"
)

// TestRender_MatchesReferenceJinja2 renders the small templates of
// testdata/jinja2_semantics.json, each written by the reference Jinja2 in
// transformers' environment (gen_jinja2_semantics.py), and requires the
// same output byte for byte, or the same raise_exception message. The
// cases' messages and tools pass through Render's request mapping, which
// leaves them as the reference got them.
func TestRender_MatchesReferenceJinja2(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "jinja2_semantics.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Clock    string            `json:"strftime_now_clock"`
		Messages []*openai.Object  `json:"messages"`
		Cases    []json.RawMessage `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	now, err := time.Parse("2006-01-02T15:04:05.999999", file.Clock)
	if err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, rc := range file.Cases {
		var c struct {
			Name     string         `json:"name"`
			Template string         `json:"template"`
			Vars     *openai.Object `json:"vars"`
			Rendered *string        `json:"rendered"`
			Error    *string        `json:"error"`
		}
		if err := json.Unmarshal(rc, &c); err != nil {
			t.Fatal(err)
		}
		t.Run(c.Name, func(t *testing.T) {
			tmpl, err := New(c.Template, SpecialTokens{})
			if err != nil {
				t.Fatal(err)
			}
			// messages and tools go where a request carries them, every
			// other variable through chat_template_kwargs.
			req := &openai.Request{Kind: openai.KindChat, Messages: file.Messages, ChatTemplateKwargs: &openai.Object{}, AddGenerationPrompt: true}
			for _, k := range c.Vars.Keys() {
				v, _ := c.Vars.Get(k)
				switch k {
				case "messages":
					req.Messages = nil
					for _, m := range v.([]any) {
						req.Messages = append(req.Messages, m.(*openai.Object))
					}
				case "tools":
					for _, tool := range v.([]any) {
						req.Tools = append(req.Tools, tool.(*openai.Object))
					}
				default:
					req.ChatTemplateKwargs.Set(k, v)
				}
			}
			got, err := tmpl.Render(req, now)
			if c.Error != nil {
				var te *TemplateError
				if !errors.As(err, &te) || te.Message != *c.Error || got != "" {
					t.Fatalf("got %q, %v; want no render and the template's error %q", got, err, *c.Error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != *c.Rendered {
				t.Fatalf("render differs from Jinja2\ntemplate: %q\n     got: %q\n    want: %q", c.Template, got, *c.Rendered)
			}
		})
	}
}
