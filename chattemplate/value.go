package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	jinja "github.com/ardanlabs/jinja"
)

// Object is a JSON object that keeps its keys in the order they were
// written, as a Python dict decoded by json.loads does. Chat templates
// print objects with tojson (tool schemas, tool-call arguments), so the
// order is part of the prompt.
//
// The values an Object holds (and that Request's Tools, Documents and
// Kwargs hold) are the JSON-like Go values nil, bool, string, int64 (JSON
// numbers without fraction or exponent that fit; Python keeps them int),
// float64 (every other JSON number), []any and *Object. Values built in Go
// may also be int, json.Number and map[string]any (whose keys are then
// taken in sorted order, having none of their own).
//
// The zero Object is empty and ready to use. An Object is not safe for
// concurrent modification; rendering only reads it.
type Object struct {
	keys []string
	vals map[string]any
}

// NewObject returns an Object holding the key/value pairs in kv, in order:
// kv alternates keys (strings) and values. It panics when kv has odd length
// or a key is not a string; it is meant for literals in code and tests.
func NewObject(kv ...any) *Object {
	if len(kv)%2 != 0 {
		panic("chattemplate.NewObject: odd number of arguments")
	}
	o := &Object{}
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			panic(fmt.Sprintf("chattemplate.NewObject: key %d is %T, not string", i/2, kv[i]))
		}
		o.Set(k, kv[i+1])
	}
	return o
}

// Len returns the number of keys.
func (o *Object) Len() int {
	if o == nil {
		return 0
	}
	return len(o.keys)
}

// Keys returns the keys in order. The slice is the Object's own: do not
// modify it.
func (o *Object) Keys() []string {
	if o == nil {
		return nil
	}
	return o.keys
}

// Get returns the value of key and whether the key is present (a present
// key may hold nil, JSON null).
func (o *Object) Get(key string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.vals[key]
	return v, ok
}

// Set sets key to v. A new key goes last; an existing key keeps its place,
// as in a Python dict.
func (o *Object) Set(key string, v any) {
	if o.vals == nil {
		o.vals = make(map[string]any, 4)
	}
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = v
}

// UnmarshalJSON decodes a JSON object keeping its key order and its number
// kinds (see Object). A key written twice keeps its first place and its
// last value, as json.loads does.
func (o *Object) UnmarshalJSON(data []byte) error {
	v, err := decodeJSON(data)
	if err != nil {
		return err
	}
	obj, ok := v.(*Object)
	if !ok {
		return fmt.Errorf("chattemplate: expected a JSON object, got %s", typeName(v))
	}
	*o = *obj
	return nil
}

// MarshalJSON encodes the Object with its keys in order, in the compact
// form of encoding/json.
func (o *Object) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	if err := dumpJSON(&b, fromGo(o), dumpOptions{itemSep: ",", keySep: ":"}, 0); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// maxDepth bounds the nesting of decoded JSON (objects and arrays inside
// each other). Python's json.loads, which vLLM runs, stops near its
// recursion limit of 1000; without a bound, a body of nested brackets
// could exhaust the stack of the recursive walks that follow.
const maxDepth = 1000

// errTooDeep is decodeValue's error past maxDepth.
var errTooDeep = fmt.Errorf("JSON nests deeper than the limit of %d levels", maxDepth)

// decodeJSON decodes one JSON document into the JSON-like values of
// Object, refusing trailing data. The jsontext pass (decodeFast) gives the
// values; a document it refuses is decoded again with encoding/json, so
// that what is accepted and the message of what is not stay
// encoding/json's.
func decodeJSON(data []byte) (any, error) {
	if v, ok := decodeFast(data); ok {
		return v, nil
	}
	return decodeStd(data)
}

// decodeStd is decodeJSON with encoding/json's Decoder.
func decodeStd(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("chattemplate: unexpected data after the JSON value")
	}
	return v, nil
}

// decodeValue reads the next JSON value from dec (which has UseNumber set),
// depth levels inside the document.
func decodeValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxDepth {
			return nil, errTooDeep
		}
		switch t {
		case '{':
			o := &Object{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				o.Set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return o, nil
		case '[':
			items := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return items, nil
		}
		return nil, fmt.Errorf("chattemplate: unexpected %q", t)
	case json.Number:
		return numberValue(t), nil
	default:
		return t, nil // string, bool or nil
	}
}

// numberValue keeps a JSON integer as int64 when it fits and any other
// number as float64, as json.loads keeps int and float apart. An integer
// beyond int64 becomes a float64: Python would keep it exact.
func numberValue(n json.Number) any {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i
		}
	}
	// An out-of-range exponent gives ±Inf with an error, as Python's
	// float() gives inf.
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// typeName names a JSON-like value's type as the OpenAI API documents
// speak of them, for error messages.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case int, int64, float64, json.Number:
		return "number"
	case []any:
		return "array"
	case *Object, map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// fromGo converts a JSON-like Go value into a fresh template value. Every
// render converts anew: templates can change lists and dicts in place
// (.append, .update), which must not reach the caller's request or another
// render. Strings are shared, being immutable.
func fromGo(v any) jinja.Value {
	switch x := v.(type) {
	case nil:
		return jinja.None()
	case jinja.Value:
		return x
	case bool:
		return jinja.NewBool(x)
	case string:
		return jinja.NewString(x)
	case int:
		return jinja.NewInt(int64(x))
	case int64:
		return jinja.NewInt(x)
	case float64:
		return jinja.NewFloat(x)
	case json.Number:
		return fromGo(numberValue(x))
	case []any:
		items := make([]jinja.Value, len(x))
		for i, e := range x {
			items[i] = fromGo(e)
		}
		return jinja.NewList(items)
	case *Object:
		d := jinja.NewDict()
		dict := d.AsDict()
		if x != nil {
			dict.Keys = make([]string, 0, len(x.keys))
			for _, k := range x.keys {
				dict.Set(k, fromGo(x.vals[k]))
			}
		}
		return d
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			d.AsDict().Set(k, fromGo(x[k]))
		}
		return d
	}
	return jinja.Undefined()
}

// checkValue reports the first value under v that fromGo cannot convert,
// naming it by its path below field; it also refuses nesting deeper than
// maxDepth (which a cycle of Go values reaches).
func checkValue(field string, v any) error {
	return checkDepth(field, v, 0)
}

func checkDepth(field string, v any, depth int) error {
	switch v.(type) {
	case nil, bool, string, int, int64, float64, json.Number:
		return nil
	}
	if depth >= maxDepth {
		return badRequest(field, errTooDeep.Error())
	}
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			if err := checkDepth(fmt.Sprintf("%s[%d]", field, i), e, depth+1); err != nil {
				return err
			}
		}
		return nil
	case *Object:
		for _, k := range x.Keys() {
			if err := checkDepth(field+"."+k, x.vals[k], depth+1); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		for k, e := range x {
			if err := checkDepth(field+"."+k, e, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return badRequest(field, fmt.Sprintf("has Go type %T, which is not a JSON value", v))
}
