package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DecodeCompletion decodes a /v1/completions body. Errors are *Error
// (400) naming the field as the client wrote it.
func DecodeCompletion(body []byte) (*Request, error) { return decode(KindCompletion, body, false) }

// DecodeChat decodes a /v1/chat/completions body. Errors are *Error
// (400) naming the field as the client wrote it.
func DecodeChat(body []byte) (*Request, error) { return decode(KindChat, body, false) }

// Decode decodes a body sent to kind's endpoint. Request.Raw holds a
// copy of body's bytes: the caller may reuse body.
func Decode(kind Kind, body []byte) (*Request, error) { return decode(kind, body, false) }

// DecodeOwned is Decode for a body the caller hands over: Request.Raw
// shares its bytes instead of copying them (a large body is not held
// twice), so the caller must not modify or reuse body afterwards.
func DecodeOwned(kind Kind, body []byte) (*Request, error) { return decode(kind, body, true) }

func decode(kind Kind, body []byte, owned bool) (*Request, error) {
	if kind != KindCompletion && kind != KindChat {
		return nil, fmt.Errorf("openai: unknown request kind %d", kind)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, Errorf("", "empty request body: want a JSON object")
	}
	if trimmed[0] != '{' {
		return nil, Errorf("", "request body is not a JSON object")
	}
	f, err := splitBody(trimmed, owned)
	if err != nil {
		return nil, err
	}
	r := &Request{Kind: kind, Raw: f.raw, N: 1, AddSpecialTokens: kind == KindCompletion}
	if r.Model, err = f.str("model"); err != nil {
		return nil, err
	}
	if r.Model == "" {
		return nil, Errorf("model", "required: the name of a served model")
	}
	if kind == KindChat {
		err = r.chatFields(f)
	} else {
		err = r.completionFields(f)
	}
	if err != nil {
		return nil, err
	}
	return r, r.commonFields(f)
}

func (r *Request) commonFields(f fields) error {
	var err error
	if r.Stream, _, err = f.boolean("stream"); err != nil {
		return err
	}
	if so, ok := f.present("stream_options"); ok {
		opts, isObj := so.(*Object)
		if !isObj {
			return Errorf("stream_options", "expected an object, got %s", describe(so))
		}
		if !r.Stream {
			return Errorf("stream_options", "only allowed with \"stream\": true")
		}
		r.StreamOptions = true
		switch v, ok := opts.Get("include_usage"); {
		case !ok:
			r.IncludeUsage = true // vLLM's StreamOptions default
		case v != nil: // an explicit null is false, as pydantic's None is
			b, isBool := v.(bool)
			if !isBool {
				return Errorf("stream_options.include_usage", "expected true or false, got %s", describe(v))
			}
			r.IncludeUsage = b
		}
	}
	keys := []string{"max_tokens"}
	if r.Kind == KindChat {
		keys = append(keys, "max_completion_tokens") // a chat field only, as in vLLM
	}
	for _, key := range keys {
		n, ok, err := f.integer(key)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if n < 1 {
			return Errorf(key, "must be at least 1, got %d", n)
		}
		r.MaxTokens = int(n) // max_completion_tokens, read second, wins
	}
	if n, ok, err := f.integer("n"); err != nil {
		return err
	} else if ok {
		if n < 1 {
			return Errorf("n", "must be at least 1, got %d", n)
		}
		r.N = int(n)
	}
	if s, ok := f.present("cache_salt"); ok {
		salt, isStr := s.(string)
		if !isStr || salt == "" {
			return Errorf("cache_salt", "must be a non-empty string if provided, got %s", describe(s))
		}
		r.CacheSalt = strings.Clone(salt) // see str
	}
	if b, ok, err := f.boolean("add_special_tokens"); err != nil {
		return err
	} else if ok {
		r.AddSpecialTokens = b
	}
	return nil
}

func (r *Request) completionFields(f fields) error {
	if _, ok := f.present("prompt_embeds"); ok {
		return Errorf("prompt_embeds", "not supported: send prompt (text or token ids)")
	}
	v, ok := f.present("prompt")
	if !ok {
		return Errorf("prompt", "required: a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	switch p := v.(type) {
	case string:
		r.Prompt.Texts = []string{p}
		return nil
	case []any:
		r.Prompt.IsList = true
		if len(p) == 0 {
			return Errorf("prompt", "empty list: at least one prompt or token id is required")
		}
		switch p[0].(type) {
		case string:
			r.Prompt.Texts = make([]string, len(p))
			for i, x := range p {
				s, isStr := x.(string)
				if !isStr {
					return Errorf("prompt["+strconv.Itoa(i)+"]", "expected a string like prompt[0], got %s", describe(x))
				}
				r.Prompt.Texts[i] = s
			}
			return nil
		case []any:
			r.Prompt.TokenIDs = make([][]uint32, len(p))
			for i, x := range p {
				at := "prompt[" + strconv.Itoa(i) + "]"
				ids, isList := x.([]any)
				if !isList {
					return Errorf(at, "expected a list of token ids like prompt[0], got %s", describe(x))
				}
				if len(ids) == 0 {
					return Errorf(at, "empty list of token ids")
				}
				toks, err := tokenIDs(at, ids)
				if err != nil {
					return err
				}
				r.Prompt.TokenIDs[i] = toks
			}
			return nil
		default:
			toks, err := tokenIDs("prompt", p)
			if err != nil {
				return err
			}
			r.Prompt.TokenIDs = [][]uint32{toks}
			r.Prompt.IsList = false
			return nil
		}
	}
	return Errorf("prompt", "expected a string, a list of strings, a list of token ids or a list of lists of token ids, got %s", describe(v))
}

func tokenIDs(at string, ids []any) ([]uint32, error) {
	out := make([]uint32, len(ids))
	for i, x := range ids {
		n, err := asInt(x)
		if err != nil || n < 0 || n > MaxTokenID {
			return nil, Errorf(at+"["+strconv.Itoa(i)+"]", "expected a token id (an integer 0 to %d), got %s", int64(MaxTokenID), describe(x))
		}
		out[i] = uint32(n)
	}
	return out, nil
}

// present is key's decoded value (numbers as json.Number); a null or
// absent key is not present.
func (f fields) present(key string) (any, bool) {
	v, _ := f.vals.Get(key)
	return v, v != nil
}

// str reads a top-level string (model, chat_template, reasoning_effort),
// copied out of the body: such names outlive the request (metric labels,
// per-model state), and a view would keep the whole body alive.
func (f fields) str(key string) (string, error) {
	v, ok := f.present(key)
	if !ok {
		return "", nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", Errorf(key, "expected a string, got %s", describe(v))
	}
	return strings.Clone(s), nil
}

func (f fields) boolean(key string) (v, ok bool, err error) {
	x, ok := f.present(key)
	if !ok {
		return false, false, nil
	}
	b, isBool := x.(bool)
	if !isBool {
		return false, false, Errorf(key, "expected true or false, got %s", describe(x))
	}
	return b, true, nil
}

func (f fields) integer(key string) (int64, bool, error) {
	x, ok := f.present(key)
	if !ok {
		return 0, false, nil
	}
	n, err := asInt(x)
	if err != nil {
		return 0, false, Errorf(key, "expected an integer, got %s", describe(x))
	}
	return n, true, nil
}

// objects reads a list of objects (tools, documents); nil when absent.
func (f fields) objects(key string) ([]*Object, error) {
	x, ok := f.present(key)
	if !ok {
		return nil, nil
	}
	list, isList := x.([]any)
	if !isList {
		return nil, Errorf(key, "expected a list of objects, got %s", describe(x))
	}
	out := make([]*Object, len(list))
	for i, e := range list {
		o, isObj := e.(*Object)
		if !isObj {
			return nil, Errorf(key+"["+strconv.Itoa(i)+"]", "expected an object, got %s", describe(e))
		}
		out[i] = o
	}
	return out, nil
}

// asInt reads an integral JSON number (2 or 2.0, as pydantic accepts).
func asInt(x any) (int64, error) {
	num, ok := x.(json.Number)
	if !ok {
		return 0, fmt.Errorf("not a number")
	}
	if n, err := num.Int64(); err == nil {
		return n, nil
	}
	f, err := num.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("not an integer")
	}
	return int64(f), nil
}

// describe renders a decoded value for an error message, cut to 40 bytes.
func describe(v any) string {
	var s string
	switch x := v.(type) {
	case nil:
		return "null"
	case *Object, map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		s = strconv.Quote(x)
	case json.Number:
		s = x.String()
	default:
		s = fmt.Sprint(x)
	}
	if len(s) > 40 {
		cut := 37
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}
