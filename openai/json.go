package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxNesting bounds how deeply a JSON document nests (objects and lists
// inside each other; the outermost value is level 1). vLLM reads bodies
// with Python's json.loads, which stops near its recursion limit of 1000;
// past it a body is refused, naming the top-level field it is in, and
// the recursive walks that follow a decode never go deeper (contract
// §12.8).
const MaxNesting = 1000

// ErrTooDeep is ParseJSON's error for a document nesting deeper than
// MaxNesting.
var ErrTooDeep = fmt.Errorf("openai: JSON nests deeper than the limit of %d levels", MaxNesting)

// jsonOptions make jsontext accept what encoding/json's Unmarshal
// accepts: a name given twice (the last value wins) and invalid UTF-8 in
// strings (each bad byte read as U+FFFD).
var jsonOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// ParseJSON decodes one JSON document into nil, bool, string,
// json.Number (the number as written), []any and *Object (names in the
// order written; a name given twice keeps its first place and its last
// value, as json.loads does). It accepts exactly the documents
// encoding/json's Unmarshal accepts (invalid UTF-8 read as U+FFFD,
// trailing data refused) that nest at most MaxNesting levels. Errors: a
// document encoding/json refuses gets encoding/json's error (the same
// message); one nesting deeper gets ErrTooDeep.
//
// It is the project's one JSON reader of request values (contract §12.8;
// Decode runs it over a body). It reads with jsontext
// (github.com/go-json-experiment/json, the tokenizer of encoding/json/v2:
// a fraction of encoding/json's CPU and allocations); encoding/json runs
// only on a refused document, for its message.
func ParseJSON(data []byte) (any, error) {
	d := jsontext.NewDecoder(bytes.NewBuffer(data), jsonOptions...)
	v, err := readValue(d, 0, nil)
	if err == nil {
		if _, err = d.ReadToken(); errors.Is(err, io.EOF) {
			return v, nil
		}
	}
	return nil, refusal(data, err)
}

// refusal is the error of a document the jsontext pass refused with err:
// encoding/json's, when it refuses the document too; else ErrTooDeep, the
// only other cause (jsontext, with jsonOptions, refuses what
// encoding/json refuses: FuzzParseJSON).
func refusal(data []byte, err error) error {
	var raw json.RawMessage
	if e := json.Unmarshal(data, &raw); e != nil {
		return e
	}
	if errors.Is(err, ErrTooDeep) {
		return ErrTooDeep
	}
	return fmt.Errorf("openai: JSON decoder disagreement: %w", err)
}

// readValue reads the next value of d, depth levels inside the document.
// A non-nil view is the buffer d reads, which nobody changes while the
// values live: a string without escapes or invalid UTF-8 (nearly every
// byte of a large prompt) is then a view of it instead of a copy.
func readValue(d *jsontext.Decoder, depth int, view []byte) (any, error) {
	if view != nil && d.PeekKind() == '"' {
		raw, err := d.ReadValue()
		if err != nil {
			return nil, err
		}
		return viewString(raw, view), nil
	}
	tok, err := d.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case '{':
		if depth >= MaxNesting {
			return nil, ErrTooDeep
		}
		o := &Object{}
		for d.PeekKind() != '}' {
			name, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			k := name.String()
			v, err := readValue(d, depth+1, view)
			if err != nil {
				return nil, err
			}
			o.Set(k, v)
		}
		_, err := d.ReadToken()
		return o, err
	case '[':
		if depth >= MaxNesting {
			return nil, ErrTooDeep
		}
		items := []any{}
		for d.PeekKind() != ']' {
			v, err := readValue(d, depth+1, view)
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

// fields are the top-level fields of one body: raw as sent (Request.Raw)
// and decoded (Request's values share them).
type fields struct {
	raw  map[string]json.RawMessage
	vals *Object
}

// splitBody decodes the JSON object body (no surrounding space) in one
// pass: each top-level field's raw bytes, slices of one copy of body (of
// body itself when owned: the caller never reuses it), and its value as
// ParseJSON reads it. Errors are *Error: encoding/json's message for
// malformed JSON, the field's name for nesting past MaxNesting.
func splitBody(body []byte, owned bool) (fields, error) {
	f, key, err := splitFast(body, owned)
	if err == nil {
		return f, nil
	}
	if err = refusal(body, err); errors.Is(err, ErrTooDeep) {
		return fields{}, Errorf(key, "nests deeper than the limit of %d levels", MaxNesting)
	}
	return fields{}, Errorf("", "malformed JSON: %v", err)
}

// splitFast is splitBody's jsontext pass; key is the field being read
// when it failed.
func splitFast(body []byte, owned bool) (f fields, key string, err error) {
	if !owned {
		body = bytes.Clone(body)
	}
	d := jsontext.NewDecoder(bytes.NewBuffer(body), jsonOptions...)
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return fields{}, "", errors.New("not an object")
	}
	f = fields{raw: make(map[string]json.RawMessage, 16), vals: &Object{keys: make([]string, 0, 16), vals: make(map[string]any, 16)}}
	for d.PeekKind() != '}' {
		name, err := d.ReadToken()
		if err != nil {
			return fields{}, key, err
		}
		key = name.String()
		start := int(d.InputOffset())
		v, err := readValue(d, 1, body)
		if err != nil {
			return fields{}, key, err
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
		f.vals.Set(key, v)
	}
	if _, err := d.ReadToken(); err != nil {
		return fields{}, "", err
	}
	if _, err := d.ReadToken(); !errors.Is(err, io.EOF) {
		return fields{}, "", errors.New("trailing data")
	}
	return f, "", nil
}

// viewString is the JSON string literal raw (valid, as the decoder read
// it) as a Go string: a view of raw's bytes when they lie in view (the
// decoder reads a bytes.Buffer in place) and hold no escape and only
// valid UTF-8, else its unquoted copy (invalid UTF-8 read as U+FFFD, as
// encoding/json reads it).
func viewString(raw, view []byte) string {
	inner := raw[1 : len(raw)-1]
	if len(inner) == 0 {
		return ""
	}
	if within(inner, view) && bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return unsafe.String(&inner[0], len(inner))
	}
	b, _ := jsontext.AppendUnquote(make([]byte, 0, len(inner)), raw) // the error reports invalid UTF-8, already replaced
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// within says whether b's bytes lie in buf's.
func within(b, buf []byte) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	return p >= start && p+uintptr(len(b)) <= start+uintptr(len(buf))
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
