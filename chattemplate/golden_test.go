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

// goldenFile is testdata/chat_template_renders.json: reference renders by
// Jinja2 in transformers' apply_chat_template environment (see
// testdata/PROVENANCE.md).
type goldenFile struct {
	Clock     string `json:"strftime_now_clock"`
	Templates []struct {
		Name          string             `json:"name"`
		SpecialTokens map[string]*string `json:"special_tokens"`
		Cases         []goldenCase       `json:"cases"`
	} `json:"templates"`
}

type goldenCase struct {
	Name                string          `json:"name"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	Kwargs              json.RawMessage `json:"kwargs"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	Rendered            *string         `json:"rendered"`
	Error               *string         `json:"error"`
}

func loadGolden(t testing.TB) goldenFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "chat_template_renders.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// request builds the Request of a golden case through the OpenAI JSON
// decoding a gateway uses.
func (c goldenCase) request(t testing.TB) *openai.Request {
	t.Helper()
	body := map[string]json.RawMessage{"model": json.RawMessage(`"golden"`), "messages": c.Messages}
	if c.Tools != nil {
		body["tools"] = c.Tools
	}
	if c.Kwargs != nil {
		body["chat_template_kwargs"] = c.Kwargs
	}
	if c.AddGenerationPrompt != nil {
		b, _ := json.Marshal(*c.AddGenerationPrompt)
		body["add_generation_prompt"] = b
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := openai.DecodeChat(raw)
	if err != nil {
		t.Fatalf("%s: decoding the request: %v", c.Name, err)
	}
	return req
}

func TestRender_GoldenCasesByteForByte(t *testing.T) {
	g := loadGolden(t)
	now, err := time.Parse(time.RFC3339, g.Clock)
	if err != nil {
		t.Fatal(err)
	}
	cases := 0
	for _, gt := range g.Templates {
		tmpl, err := Load(filepath.Join("testdata", gt.Name))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range gt.Cases {
			cases++
			t.Run(gt.Name+"/"+c.Name, func(t *testing.T) {
				got, err := tmpl.Render(c.request(t), now)
				switch {
				case c.Error != nil:
					var te *TemplateError
					if !errors.As(err, &te) {
						t.Fatalf("got %q, %v; want the template's error %q", got, err, *c.Error)
					}
					if te.Message != *c.Error || got != "" {
						t.Fatalf("got %q, message %q; want no render and message %q", got, te.Message, *c.Error)
					}
				case c.Rendered != nil:
					if err != nil {
						t.Fatal(err)
					}
					if got != *c.Rendered {
						t.Fatalf("render differs\n got: %q\nwant: %q", got, *c.Rendered)
					}
				default:
					t.Fatal("golden case has neither rendered nor error")
				}
			})
		}
	}
	if cases == 0 {
		t.Fatal("no golden cases")
	}
}

func TestLoad_SpecialTokensMatchGolden(t *testing.T) {
	g := loadGolden(t)
	for _, gt := range g.Templates {
		tmpl, err := Load(filepath.Join("testdata", gt.Name))
		if err != nil {
			t.Fatal(err)
		}
		got := tmpl.SpecialTokens()
		byName := map[string]string{"bos_token": got.BOS, "eos_token": got.EOS, "pad_token": got.PAD, "unk_token": got.UNK}
		for name, want := range gt.SpecialTokens {
			w := ""
			if want != nil {
				w = *want
			}
			if byName[name] != w {
				t.Errorf("%s: %s = %q, golden says %q", gt.Name, name, byName[name], w)
			}
		}
	}
}
