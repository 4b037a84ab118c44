package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/go-json-experiment/json/jsontext"
)

// jsonOptions make jsontext accept what encoding/json's Unmarshal
// accepts: a name given twice (the last value wins, as in a map) and
// invalid UTF-8 in strings (each bad byte read as U+FFFD). Its depth
// limit, 10,000, is encoding/json's.
var jsonOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// fields are the top-level fields of one body: raw as sent (Request.Raw)
// and decoded (numbers as json.Number, objects as map[string]any).
type fields struct {
	raw  map[string]json.RawMessage
	vals map[string]any
}

// splitBody decodes the JSON object body (no surrounding space) in one
// pass with jsontext, the streaming tokenizer of encoding/json/v2: a
// fraction of the CPU of encoding/json's Unmarshal into raw fields and
// a second decode of each. Raw values are slices of one copy of body,
// or of body itself when owned (the caller never reuses it). A body
// jsontext refuses goes through encoding/json, so that what is accepted
// and the message of what is not stay encoding/json's.
func splitBody(body []byte, owned bool) (fields, error) {
	f, ok := splitFast(body, owned)
	if ok {
		return f, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return fields{}, Errorf("", "malformed JSON: %v", err)
	}
	f = fields{raw: raw, vals: make(map[string]any, len(raw))}
	for k, r := range raw {
		d := json.NewDecoder(bytes.NewReader(r))
		d.UseNumber()
		var v any
		if d.Decode(&v) == nil {
			f.vals[k] = v
		}
	}
	return f, nil
}

// splitFast is splitBody's jsontext pass; ok is false when jsontext
// refuses body.
func splitFast(body []byte, owned bool) (f fields, ok bool) {
	if !owned {
		body = bytes.Clone(body)
	}
	d := jsontext.NewDecoder(bytes.NewBuffer(body), jsonOptions...)
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return fields{}, false
	}
	f = fields{raw: make(map[string]json.RawMessage, 16), vals: make(map[string]any, 16)}
	for d.PeekKind() != '}' {
		name, err := d.ReadToken()
		if err != nil {
			return fields{}, false
		}
		key := name.String()
		start := int(d.InputOffset())
		v, err := readAny(d)
		if err != nil {
			return fields{}, false
		}
		end := int(d.InputOffset())
		for body[start] != ':' {
			start++
		}
		start++
		for isSpace(body[start]) {
			start++
		}
		f.raw[key] = body[start:end:end]
		f.vals[key] = v
	}
	if _, err := d.ReadToken(); err != nil {
		return fields{}, false
	}
	if _, err := d.ReadToken(); !errors.Is(err, io.EOF) {
		return fields{}, false // trailing data
	}
	return f, true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// readAny decodes the next value of d as encoding/json decodes into an
// any with UseNumber: nil, bool, string, json.Number, []any and
// map[string]any (a name given twice keeps its last value).
func readAny(d *jsontext.Decoder) (any, error) {
	tok, err := d.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case '{':
		m := make(map[string]any)
		for d.PeekKind() != '}' {
			name, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			key := name.String()
			v, err := readAny(d)
			if err != nil {
				return nil, err
			}
			m[key] = v
		}
		_, err := d.ReadToken()
		return m, err
	case '[':
		items := []any{}
		for d.PeekKind() != ']' {
			v, err := readAny(d)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		}
		_, err := d.ReadToken()
		return items, err
	case '"':
		return tok.String(), nil
	case '0':
		return json.Number(tok.String()), nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	}
	return nil, nil // null
}
