package openai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// referenceSplit is what decode read before splitFast: encoding/json's
// Unmarshal into raw fields, then each decoded with UseNumber.
func referenceSplit(body []byte) (raw map[string]json.RawMessage, vals map[string]any, ok bool) {
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, nil, false
	}
	vals = map[string]any{}
	for k, r := range raw {
		d := json.NewDecoder(bytes.NewReader(r))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			panic(err) // the body was valid as a whole
		}
		vals[k] = v
	}
	return raw, vals, true
}

// splitBodySeeds are bodies where JSON decoders are known to differ:
// invalid UTF-8, lone surrogates, names given twice, odd numbers and
// space, trailing data, nesting at encoding/json's depth limit.
var splitBodySeeds = []string{
	`{"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7}`,
	"{\"a\": \"\xff\", \"b\xfe\": \"a\xc3\", \"c\": \"\xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80\"}",
	`{"a": "\ud800", "b": "\udc00x", "c": "\ud800\u0041", "d": "\ud83d\ude00", "e": "\u0000\"\\\/\b\f\n\r\t"}`,
	`{"a": 1, "a": 2, "b": {"x": 1, "x": [true]}}`,
	`{"n": -0, "big": 1e400, "e": 1E+2, "f": 0.0000, "i": 123456789012345678901234567890, "neg": -1.5e-3}`,
	" {\t\"a\" \r\n:\n [ 1 , { \"b\" : null } ] , \"c\":\"\" } ",
	`{"a": 1} {"b": 2}`,
	`{"a": 1}x`,
	`{"a": 1}]`,
	`{"a": 01}`,
	`{"a": 1.}`,
	`{"a": "x\u12"}`,
	`{"a": "` + "\x01" + `"}`,
	`{"a": tru}`,
	`{"a": [1, 2,]}`,
	`{"a": 1,}`,
	`{"a" 1}`,
	`{"mo\u0064el": "m"}`,
	`{}`,
	`[]`,
	`"x"`,
	`{"a": ` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
	`{"a": ` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
	`{"a": ` + strings.Repeat(`{"b":`, 9999) + `1` + strings.Repeat("}", 9999) + `}`,
}

// splitFast accepts exactly what encoding/json accepts, with the same raw
// bytes and decoded values; what it refuses, splitBody refuses with
// encoding/json's message.
func FuzzSplitBody(f *testing.F) {
	for _, s := range splitBodySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		raw, vals, ok := referenceSplit(body)
		got, gotOK := splitFast(body, false)
		if gotOK != ok {
			t.Fatalf("%q: jsontext accepts: %v, encoding/json accepts: %v", body, gotOK, ok)
		}
		if !ok {
			var want error = json.Unmarshal(body, new(map[string]json.RawMessage))
			_, err := splitBody(body, false)
			if e, isE := err.(*Error); !isE || e.Message != "malformed JSON: "+want.Error() {
				t.Fatalf("%q: error %v, want malformed JSON: %v", body, err, want)
			}
			return
		}
		if len(got.raw) != len(raw) {
			t.Fatalf("%q: raw fields %q, want %q", body, got.raw, raw)
		}
		for k, r := range raw {
			if !bytes.Equal(got.raw[k], r) {
				t.Fatalf("%q: raw %q = %q, want %q", body, k, got.raw[k], r)
			}
		}
		if !reflect.DeepEqual(got.vals, vals) {
			t.Fatalf("%q: values %#v, want %#v", body, got.vals, vals)
		}
	})
}

// Raw values are copies: changing the body afterwards does not reach them.
func TestDecode_RawDoesNotAliasTheBody(t *testing.T) {
	body := []byte(`{"model": "m", "prompt": "x", "temperature": 0.5}`)
	r, err := DecodeCompletion(body)
	if err != nil {
		t.Fatal(err)
	}
	copy(body, bytes.Repeat([]byte("#"), len(body)))
	if string(r.Raw["temperature"]) != "0.5" || string(r.Raw["model"]) != `"m"` {
		t.Fatalf("raw fields %q after the body changed", r.Raw)
	}
}
