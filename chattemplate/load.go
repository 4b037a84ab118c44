package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	jinja "github.com/ardanlabs/jinja"
)

// maxFileBytes bounds each model file Load reads; tokenizer_config.json of
// current models is well under 1 MiB even with its added-token table.
const maxFileBytes = 16 << 20

// SpecialTokens are the tokenizer's special tokens, which transformers
// passes to every chat template as variables (its special_tokens_map: only
// the tokens that are set, so an empty field leaves the variable
// undefined). The variables are bos_token, eos_token, unk_token,
// sep_token, pad_token, cls_token, mask_token and
// additional_special_tokens (a list).
type SpecialTokens struct {
	BOS, EOS, UNK, SEP, PAD, CLS, Mask string
	Additional                         []string
}

// vars returns the template variables of t.
func (t SpecialTokens) vars() map[string]jinja.Value {
	v := map[string]jinja.Value{}
	for name, tok := range map[string]string{
		"bos_token": t.BOS, "eos_token": t.EOS, "unk_token": t.UNK, "sep_token": t.SEP,
		"pad_token": t.PAD, "cls_token": t.CLS, "mask_token": t.Mask,
	} {
		if tok != "" {
			v[name] = jinja.NewString(tok)
		}
	}
	if len(t.Additional) > 0 {
		items := make([]jinja.Value, len(t.Additional))
		for i, s := range t.Additional {
			items[i] = jinja.NewString(s)
		}
		v["additional_special_tokens"] = jinja.NewList(items)
	}
	return v
}

// Load reads the chat template of the model in dir, as transformers loads
// it with the tokenizer:
//
//   - chat_template.jinja, when present, is the template; else
//     chat_template.json's "chat_template" (a processor's); else the
//     "chat_template" of tokenizer_config.json, which is a string or a
//     list of {"name", "template"} (named templates);
//   - additional_chat_templates/<name>.jinja add named templates beside
//     the main one, which is then named "default";
//   - the special tokens come from tokenizer_config.json (a string or an
//     AddedToken object {"content": …}), overridden by
//     special_tokens_map.json when present.
//
// Every template is compiled once, here. A model without a template gives
// ErrNoChatTemplate; an unreadable, unparsable or uncompilable file gives
// ErrInvalidTemplate naming the file and the field.
func Load(dir string) (*Template, error) {
	var cfg map[string]json.RawMessage
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	if err := readJSON(cfgPath, &cfg); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	tokens, err := parseSpecialTokens(cfgPath, cfg)
	if err != nil {
		return nil, err
	}
	mapPath := filepath.Join(dir, "special_tokens_map.json")
	var stm map[string]json.RawMessage
	if err := readJSON(mapPath, &stm); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if stm != nil {
		over, err := parseSpecialTokens(mapPath, stm)
		if err != nil {
			return nil, err
		}
		tokens = mergeTokens(tokens, over, stm)
	}

	sources := map[string]string{} // name → source; "" is the single unnamed template
	origin := map[string]string{}
	if b, err := readFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		sources[""], origin[""] = string(b), "chat_template.jinja"
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	} else {
		var proc map[string]json.RawMessage
		procPath := filepath.Join(dir, "chat_template.json")
		if err := readJSON(procPath, &proc); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		raw, where := proc["chat_template"], "chat_template.json"
		if raw == nil {
			raw, where = cfg["chat_template"], "tokenizer_config.json"
		}
		if err := parseTemplateField(filepath.Join(dir, where), raw, sources, origin); err != nil {
			return nil, err
		}
	}
	extra, _ := filepath.Glob(filepath.Join(dir, "additional_chat_templates", "*.jinja"))
	sort.Strings(extra)
	for _, p := range extra {
		b, err := readFile(p)
		if err != nil {
			return nil, err
		}
		if main, ok := sources[""]; ok {
			delete(sources, "")
			sources["default"], origin["default"] = main, origin[""]
		}
		name := strings.TrimSuffix(filepath.Base(p), ".jinja")
		sources[name], origin[name] = string(b), filepath.Join("additional_chat_templates", filepath.Base(p))
	}
	if len(sources) == 0 {
		return nil, fmt.Errorf("%w: %s has no chat_template.jinja, and neither chat_template.json nor tokenizer_config.json sets chat_template", ErrNoChatTemplate, dir)
	}

	t := &Template{name: dir, tokens: tokens}
	for name, src := range sources {
		c, err := compile(src)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalidTemplate, filepath.Join(dir, origin[name]), err)
		}
		if name == "" {
			t.single = c
		} else {
			if t.named == nil {
				t.named = map[string]*compiled{}
			}
			t.named[name] = c
		}
	}
	t.init()
	return t, nil
}

// New compiles one chat template source with the given special tokens.
// The template compiles once; Render may then be called concurrently.
func New(source string, tokens SpecialTokens) (*Template, error) {
	c, err := compile(source)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidTemplate, err)
	}
	t := &Template{name: "template", single: c, tokens: tokens}
	t.init()
	return t, nil
}

// parseTemplateField reads a chat_template value: a string, or a list of
// {"name": …, "template": …}.
func parseTemplateField(path string, raw json.RawMessage, sources, origin map[string]string) error {
	if raw == nil || string(raw) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		sources[""], origin[""] = s, filepath.Base(path)
		return nil
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("%w: %s: chat_template must be a string or a list of {name, template}", ErrInvalidTemplate, path)
	}
	for i, e := range list {
		var name, tmpl string
		if err := json.Unmarshal(e["name"], &name); err != nil || name == "" {
			return fmt.Errorf("%w: %s: chat_template[%d].name must be a non-empty string", ErrInvalidTemplate, path, i)
		}
		if err := json.Unmarshal(e["template"], &tmpl); err != nil {
			return fmt.Errorf("%w: %s: chat_template[%d].template must be a string", ErrInvalidTemplate, path, i)
		}
		sources[name], origin[name] = tmpl, filepath.Base(path)
	}
	return nil
}

// parseSpecialTokens reads the special-token fields of a tokenizer config
// or special_tokens_map.json.
func parseSpecialTokens(path string, cfg map[string]json.RawMessage) (SpecialTokens, error) {
	var t SpecialTokens
	fields := []struct {
		key string
		dst *string
	}{
		{"bos_token", &t.BOS}, {"eos_token", &t.EOS}, {"unk_token", &t.UNK}, {"sep_token", &t.SEP},
		{"pad_token", &t.PAD}, {"cls_token", &t.CLS}, {"mask_token", &t.Mask},
	}
	for _, f := range fields {
		s, err := tokenString(cfg[f.key])
		if err != nil {
			return t, fmt.Errorf("%w: %s: %s %v", ErrInvalidTemplate, path, f.key, err)
		}
		*f.dst = s
	}
	if raw := cfg["additional_special_tokens"]; raw != nil && string(raw) != "null" {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return t, fmt.Errorf("%w: %s: additional_special_tokens must be a list", ErrInvalidTemplate, path)
		}
		for i, e := range list {
			s, err := tokenString(e)
			if err != nil {
				return t, fmt.Errorf("%w: %s: additional_special_tokens[%d] %v", ErrInvalidTemplate, path, i, err)
			}
			t.Additional = append(t.Additional, s)
		}
	}
	return t, nil
}

// tokenString reads a special token: null, a string, or an AddedToken
// object whose "content" is the token.
func tokenString(raw json.RawMessage) (string, error) {
	if raw == nil || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", errors.New(`must be a string, null or an object with a string "content"`)
	}
	return *obj.Content, nil
}

// mergeTokens overrides base with the tokens special_tokens_map.json sets.
func mergeTokens(base, over SpecialTokens, set map[string]json.RawMessage) SpecialTokens {
	pick := func(key, b, o string) string {
		if _, ok := set[key]; ok {
			return o
		}
		return b
	}
	base.BOS = pick("bos_token", base.BOS, over.BOS)
	base.EOS = pick("eos_token", base.EOS, over.EOS)
	base.UNK = pick("unk_token", base.UNK, over.UNK)
	base.SEP = pick("sep_token", base.SEP, over.SEP)
	base.PAD = pick("pad_token", base.PAD, over.PAD)
	base.CLS = pick("cls_token", base.CLS, over.CLS)
	base.Mask = pick("mask_token", base.Mask, over.Mask)
	if _, ok := set["additional_special_tokens"]; ok {
		base.Additional = over.Additional
	}
	return base
}

func readJSON(path string, dst any) error {
	b, err := readFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidTemplate, path, err)
	}
	return nil
}

// readFile reads a model file of at most maxFileBytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidTemplate, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidTemplate, path, err)
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%w: %s is over the limit of %d bytes", ErrInvalidTemplate, path, maxFileBytes)
	}
	return b, nil
}
