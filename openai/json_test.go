package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// referenceParse is ParseJSON built on encoding/json alone: its syntax
// check (and message) by Unmarshal, then its Decoder's tokens with
// UseNumber, nesting counted as ParseJSON counts it.
func referenceParse(data []byte) (any, error) {
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := referenceValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		panic("trailing data in a document Unmarshal accepted")
	}
	return v, nil
}

func referenceValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		panic(err) // the document is valid as a whole
	}
	d, isDelim := tok.(json.Delim)
	if !isDelim {
		return tok, nil // string, json.Number, bool or nil
	}
	if depth >= MaxNesting {
		return nil, ErrTooDeep
	}
	var out any
	switch d {
	case '{':
		o := &Object{}
		for dec.More() {
			kt, _ := dec.Token()
			v, err := referenceValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			o.Set(kt.(string), v)
		}
		out = o
	case '[':
		items := []any{}
		for dec.More() {
			v, err := referenceValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		}
		out = items
	}
	_, _ = dec.Token() // the closing delimiter
	return out, nil
}

// sameJSON compares decoded values, an Object's names in order.
func sameJSON(a, b any) bool {
	switch x := a.(type) {
	case *Object:
		y, ok := b.(*Object)
		if !ok || !slices.Equal(x.Keys(), y.Keys()) {
			return false
		}
		for _, k := range x.Keys() {
			if !sameJSON(x.vals[k], y.vals[k]) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}

// jsonSeeds are documents where JSON decoders are known to differ:
// invalid UTF-8, lone surrogates, names given twice (first place, last
// value), numbers of each kind, space, trailing data, nesting at
// MaxNesting and at encoding/json's own limit (10,000).
var jsonSeeds = []string{
	`{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "tools": [{"z": 1, "a": {"y": 2.5, "b": null}}]}`,
	"{\"a\": \"\xff\", \"b\xfe\": \"a\xc3\", \"c\": \"\xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80\"}",
	`{"a": "\ud800", "b": "\udc00x", "c": "\ud800\u0041", "d": "\ud83d\ude00", "e": "\u0000\"\\\/\b\f\n\r\t"}`,
	`{"b": 1, "a": 2, "b": 3, "c": {"x": 1, "x": [true, false]}}`,
	`{"n": -0, "big": 1e400, "e": 1E+2, "f": 0.0000, "i": 123456789012345678901234567890, "neg": -1.5e-3}`,
	`[-0, 1e400, -1e400, 1E+2, 0.0000, 9223372036854775807, -9223372036854775808, 9223372036854775808]`,
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
	`3`,
	`null`,
	``,
	strings.Repeat("[", MaxNesting) + strings.Repeat("]", MaxNesting),
	strings.Repeat("[", MaxNesting+1) + strings.Repeat("]", MaxNesting+1),
	`{"a": ` + strings.Repeat(`{"b":`, MaxNesting-1) + `1` + strings.Repeat("}", MaxNesting) + `}`,
	`{"a": ` + strings.Repeat(`{"b":`, MaxNesting) + `1` + strings.Repeat("}", MaxNesting) + `}`,
	`{"a": ` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
	`{"a": ` + strings.Repeat("[", MaxNesting+1) + `}`,
}

// ParseJSON accepts exactly what encoding/json accepts within MaxNesting,
// with the same values; what encoding/json refuses it refuses with the
// same message; deeper documents get ErrTooDeep.
func FuzzParseJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, wantErr := referenceParse(data)
		got, err := ParseJSON(data)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: ParseJSON error %v, encoding/json's %v", data, err, wantErr)
		}
		if err != nil {
			if err.Error() != wantErr.Error() {
				t.Fatalf("%q: error %q, want %q", data, err, wantErr)
			}
			return
		}
		if !sameJSON(got, want) {
			t.Fatalf("%q: decoded %#v, want %#v", data, got, want)
		}
	})
}

// splitBody's fields are encoding/json's: the raw bytes Unmarshal gives
// each top-level field, and the body's values as ParseJSON reads them.
// What encoding/json refuses is refused with its message; a body nesting
// past MaxNesting names a top-level field and the limit.
func FuzzSplitBody(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) == 0 || body[0] != '{' {
			return // decode refuses these before splitting
		}
		got, err := splitBody(body, false)
		var raw map[string]json.RawMessage
		if uerr := json.Unmarshal(body, &raw); uerr != nil {
			if e, isE := err.(*Error); !isE || e.Message != "malformed JSON: "+uerr.Error() || e.Param != "" {
				t.Fatalf("%q: error %v, want malformed JSON: %v", body, err, uerr)
			}
			return
		}
		vals, perr := referenceParse(body)
		if perr != nil {
			e, isE := err.(*Error)
			if !isE {
				t.Fatalf("%q: error %v, want *Error", body, err)
			}
			if _, named := raw[e.Param]; !named || e.Message != "nests deeper than the limit of 1000 levels" {
				t.Fatalf("%q: error %v, want a field named nesting deeper than 1000 levels", body, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v, encoding/json accepts it", body, err)
		}
		if len(got.raw) != len(raw) {
			t.Fatalf("%q: raw fields %q, want %q", body, got.raw, raw)
		}
		for k, r := range raw {
			if !bytes.Equal(got.raw[k], r) {
				t.Fatalf("%q: raw %q = %q, want %q", body, k, got.raw[k], r)
			}
		}
		if !sameJSON(got.vals, vals) {
			t.Fatalf("%q: values %#v, want %#v", body, got.vals, vals)
		}
	})
}

// Decode's raw fields and strings are views of its own copy of the body:
// changing the body afterwards does not reach them. DecodeOwned's are
// views of the body itself, with escaped strings unquoted.
func TestDecode_ValuesDoNotAliasTheCallersBody(t *testing.T) {
	body := []byte(`{"model": "m", "messages": [{"role": "user", "content": "hello"}], "temperature": 0.5}`)
	r, err := DecodeChat(body)
	if err != nil {
		t.Fatal(err)
	}
	copy(body, bytes.Repeat([]byte("#"), len(body)))
	content, _ := r.Messages[0].Get("content")
	if string(r.Raw["temperature"]) != "0.5" || string(r.Raw["model"]) != `"m"` || r.Model != "m" || content != "hello" {
		t.Fatalf("raw fields %q, model %q, content %q after the body changed", r.Raw, r.Model, content)
	}
	owned := []byte(`{"model": "m", "messages": [{"role": "user", "content": "a\nb\u00e9\ud800` + "\xff" + `"}]}`)
	r, err = DecodeOwned(KindChat, owned)
	if err != nil {
		t.Fatal(err)
	}
	if content, _ := r.Messages[0].Get("content"); content != "a\nbé\ufffd\ufffd" {
		t.Fatalf("escaped content %q", content)
	}
}

// Objects keep the client's name order; a name given twice keeps its
// first place and its last value, as Python's json.loads does.
func TestParseJSON_KeepsNameOrder(t *testing.T) {
	v, err := ParseJSON([]byte(`{"z": 1, "a": {"y": 2.5, "b": null}, "z": [true], "m": "x"}`))
	if err != nil {
		t.Fatal(err)
	}
	o := v.(*Object)
	z, _ := o.Get("z")
	if !reflect.DeepEqual(o.Keys(), []string{"z", "a", "m"}) || !reflect.DeepEqual(z, []any{true}) {
		t.Fatalf("keys %q, z %v", o.Keys(), z)
	}
	a, _ := o.Get("a")
	y, _ := a.(*Object).Get("y")
	if y != json.Number("2.5") || !reflect.DeepEqual(a.(*Object).Keys(), []string{"y", "b"}) {
		t.Fatalf("a = %#v", a)
	}
	b, err := o.MarshalJSON()
	if want := `{"z":[true],"a":{"y":2.5,"b":null},"m":"x"}`; err != nil || string(b) != want {
		t.Fatalf("MarshalJSON = %s, %v; want %s", b, err, want)
	}
}

// A body DecodeOwned reads is not copied: an unescaped string (a large
// prompt) is a view of the body's bytes, the model name a copy (it may
// outlive the request).
func TestDecodeOwned_StringsViewTheBody(t *testing.T) {
	body := []byte(`{"model": "m", "messages": [{"role": "user", "content": "` + strings.Repeat("a", 1<<16) + `"}]}`)
	r, err := DecodeOwned(KindChat, body)
	if err != nil {
		t.Fatal(err)
	}
	content, _ := r.Messages[0].Get("content")
	s := content.(string)
	if !within(unsafe.Slice(unsafe.StringData(s), len(s)), body) {
		t.Fatal("the content was copied out of the owned body")
	}
	if within(unsafe.Slice(unsafe.StringData(r.Model), len(r.Model)), body) {
		t.Fatal("the model name is a view of the body")
	}
}
