package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/go-json-experiment/json/jsontext"
)

// jsonOptions make jsontext accept what encoding/json accepts: a name
// given twice and invalid UTF-8 in strings (each bad byte read as U+FFFD).
var jsonOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// decodeFast is decodeJSON's pass over data with jsontext, the streaming
// tokenizer of encoding/json/v2: a fraction of the CPU of encoding/json's
// Decoder.Token, which allocates a token per value. ok is false when
// jsontext refuses data or it nests deeper than maxDepth.
func decodeFast(data []byte) (v any, ok bool) {
	d := jsontext.NewDecoder(bytes.NewBuffer(data), jsonOptions...)
	v, err := readValue(d, 0)
	if err != nil {
		return nil, false
	}
	if _, err := d.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return v, true
}

// readValue reads the next value of d, depth levels inside the document,
// as decodeValue does.
func readValue(d *jsontext.Decoder, depth int) (any, error) {
	tok, err := d.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case '{':
		if depth >= maxDepth {
			return nil, errTooDeep
		}
		o := &Object{}
		for d.PeekKind() != '}' {
			name, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			k := name.String()
			v, err := readValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			o.Set(k, v)
		}
		_, err := d.ReadToken()
		return o, err
	case '[':
		if depth >= maxDepth {
			return nil, errTooDeep
		}
		items := []any{}
		for d.PeekKind() != ']' {
			v, err := readValue(d, depth+1)
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
		return numberValue(json.Number(tok.String())), nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	}
	return nil, nil // null
}
